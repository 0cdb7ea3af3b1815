"""Growth factors between sizes: how a metric moves from one number of pending pauses to the next.

A metric either should stay flat (its cost is the work asked for, not the state held) or may grow
linearly with the state (it reads or holds all of it). :func:`growth_factors` gives the factor
between each pair of neighbouring sizes, :func:`reading` says what a factor looks like against
the size's own factor, and :func:`growth_table` lays the rows out as Markdown.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Expect = Literal["flat", "linear"]

#: A flat metric may move this much between sizes (noise, caches, a deeper index) and stay flat.
FLAT_TOLERANCE = 0.20


@dataclass(frozen=True)
class Series:
    """One metric measured at each size (``None``: not measured at that size)."""

    metric: str
    unit: str
    expect: Expect
    values: Sequence[float | None]


def growth_factors(values: Sequence[float | None]) -> list[float | None]:
    """``values[i] / values[i - 1]`` for each neighbouring pair; ``None`` where either is
    missing or the earlier one is zero."""
    factors: list[float | None] = []
    for before, after in itertools.pairwise(values):
        if before is None or after is None or before == 0:
            factors.append(None)
        else:
            factors.append(after / before)
    return factors


def reading(factor: float | None, size_factor: float) -> str:
    """What a growth ``factor`` looks like when the state grew by ``size_factor``: ``flat``
    (within :data:`FLAT_TOLERANCE` of 1), ``linear`` (within a factor of two of the size's own
    growth, either way), ``sublinear`` in between, ``superlinear`` above, ``-`` unknown."""
    if factor is None or size_factor <= 1:
        return "-"
    if factor <= 1 + FLAT_TOLERANCE:
        return "flat"
    if factor > 2 * size_factor:
        return "superlinear"
    if factor >= size_factor / 2:
        return "linear"
    return "sublinear"


def format_factor(factor: float | None) -> str:
    """``x1.05``, ``x9.80``, ``x112``: two decimals below 10, whole numbers from 10."""
    if factor is None:
        return "-"
    return f"x{factor:.2f}" if factor < 10 else f"x{factor:,.0f}"


def number(value: float) -> str:
    """Three significant figures, thousands separated: ``0.0524``, ``18.5``, ``9,941``."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def growth_table(sizes: Sequence[int], series: Sequence[Series]) -> str:
    """Markdown: a row per metric, its value at each size, then each step's factor with its
    reading, and what the metric is expected to do."""
    steps = [f"{_size(a)}→{_size(b)}" for a, b in itertools.pairwise(sizes)]
    headers = ["metric", *(_size(n) for n in sizes), *steps, "expected"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    size_factors = [b / a for a, b in itertools.pairwise(sizes)]
    for s in series:
        values = [
            "-" if v is None else number(v) + (f" {s.unit}" if s.unit else "") for v in s.values
        ]
        factors = [
            "-" if f is None else f"{format_factor(f)} ({reading(f, k)})"
            for f, k in zip(growth_factors(s.values), size_factors, strict=False)
        ]
        lines.append("| " + " | ".join([s.metric, *values, *factors, s.expect]) + " |")
    return "\n".join(lines)


def ratio_table(sizes: Sequence[int], ratios: dict[str, Sequence[float | None]]) -> str:
    """Markdown: a row per metric (named with its baseline), its ratio to the baseline at each
    size."""
    headers = ["metric / baseline", *(_size(n) for n in sizes)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for metric, values in ratios.items():
        cells = ["-" if v is None else f"{number(v)}x" for v in values]
        lines.append("| " + " | ".join([metric, *cells]) + " |")
    return "\n".join(lines)


def _size(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return f"{n:,}"
