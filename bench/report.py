"""Rows of results: the table on the terminal, the JSON file, and the Markdown for the README.

A row is one metric: turnlog's median over the repeats, the baseline's median measured in the
same run on the same broker, their ratio (turnlog / baseline), the target in words and whether
the median met it. ``passed`` is ``None`` where a row has no target of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.measure import median


@dataclass
class Row:
    scenario: str
    metric: str
    unit: str
    samples: list[float]
    baseline_samples: list[float] = field(default_factory=list)
    baseline_name: str = ""
    target: str = ""
    check: Callable[[float, float | None], bool] | None = field(default=None, repr=False)
    notes: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def value(self) -> float | None:
        return median(self.samples)

    @property
    def baseline(self) -> float | None:
        return median(self.baseline_samples)

    @property
    def ratio(self) -> float | None:
        value, baseline = self.value, self.baseline
        if value is None or not baseline:
            return None
        return value / baseline

    @property
    def passed(self) -> bool | None:
        value = self.value
        if self.check is None or value is None:
            return None
        return self.check(value, self.ratio)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("check")
        data.update(
            value=self.value,
            baseline=self.baseline,
            ratio=self.ratio,
            passed=self.passed,
            repeats=len(self.samples),
        )
        return data


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("/s", "records/s", "resumes/s", "ops/s"):
        return f"{value:,.0f}{' ' + unit if unit != '/s' else '/s'}"
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit == "us":
        return f"{value:,.1f} µs"
    if unit == "MB":
        return f"{value:,.1f} MB"
    if unit == "B":
        return f"{value:,.0f} B"
    return f"{value:,.3g} {unit}".strip()


def verdict(passed: bool | None) -> str:
    return {True: "pass", False: "MISS", None: "-"}[passed]


def _cells(row: Row) -> list[str]:
    ratio = row.ratio
    baseline = fmt(row.baseline, row.unit)
    if row.baseline_name and row.baseline is not None:
        baseline = f"{baseline} ({row.baseline_name})"
    return [
        row.scenario,
        row.metric,
        fmt(row.value, row.unit),
        baseline,
        "-" if ratio is None else f"{ratio:.2f}x",
        row.target or "-",
        verdict(row.passed),
        str(len(row.samples)),
    ]


HEADERS = ["scenario", "metric", "turnlog (median)", "baseline (median)", "ratio", "target"]
HEADERS += ["result", "runs"]


def print_table(rows: Sequence[Row], title: str, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=title, show_lines=False)
    for header in HEADERS:
        table.add_column(header, justify="right" if header in ("ratio", "runs") else "left")
    for row in rows:
        cells = _cells(row)
        style = {True: "green", False: "red", None: ""}[row.passed]
        cells[6] = f"[{style}]{cells[6]}[/{style}]" if style else cells[6]
        table.add_row(*cells)
    console.print(table)
    for row in rows:
        if row.notes:
            console.print(f"  [dim]{row.scenario} / {row.metric}: {row.notes}[/dim]")


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(row)) + " |")
    return "\n".join(lines)


def write_json(path: Path, rows: Sequence[Row], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {**meta, "rows": [row.as_json() for row in rows]}
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
