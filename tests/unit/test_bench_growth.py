"""The scale benchmark's growth factors: what a step between two sizes is read as."""

from __future__ import annotations

from bench.growth import (
    Series,
    format_factor,
    growth_factors,
    growth_table,
    number,
    ratio_table,
    reading,
)


def test_each_factor_is_a_value_over_the_one_before_it() -> None:
    assert growth_factors([2.0, 3.0, 30.0]) == [1.5, 10.0]


def test_a_missing_or_zero_value_has_no_factor() -> None:
    assert growth_factors([None, 1.0, 0.0, 5.0, 6.0]) == [None, 0.0, None, 1.2]
    assert growth_factors([4.0]) == []


def test_a_factor_is_read_against_the_sizes_own_growth() -> None:
    assert reading(1.2, 10) == "flat"  # the tolerance is inclusive
    assert reading(0.4, 10) == "flat"  # falling is flat too: it did not grow
    assert reading(1.25, 10) == "sublinear"
    assert reading(5.0, 10) == "linear"
    assert reading(20.0, 10) == "linear"
    assert reading(20.1, 10) == "superlinear"
    assert reading(None, 10) == "-"
    assert reading(3.0, 1) == "-"  # no growth in size: nothing to read


def test_factors_and_values_are_written_briefly() -> None:
    assert format_factor(None) == "-"
    assert format_factor(0.5) == "x0.50"
    assert format_factor(9.994) == "x9.99"
    assert format_factor(1234.4) == "x1,234"
    values = (0.05236, 18.52, 99.95, 9941.2)
    assert [number(v) for v in values] == ["0.0524", "18.5", "100", "9,941"]


def test_the_growth_table_has_a_value_per_size_and_a_factor_per_step() -> None:
    table = growth_table(
        [10_000, 100_000, 1_000_000],
        [
            Series("sweep", "ms", "flat", [10.0, 11.0, 30.0]),
            Series("bytes", "MB", "linear", [27.0, 270.0, None]),
        ],
    )
    assert table.splitlines() == [
        "| metric | 10k | 100k | 1M | 10k→100k | 100k→1M | expected |",
        "|---|---|---|---|---|---|---|",
        "| sweep | 10 ms | 11 ms | 30 ms | x1.10 (flat) | x2.73 (sublinear) | flat |",
        "| bytes | 27 MB | 270 MB | - | x10 (linear) | - | linear |",
    ]


def test_the_ratio_table_has_a_ratio_per_size() -> None:
    assert ratio_table([1500, 3000], {"rebuild (raw)": [0.2, None]}).splitlines() == [
        "| metric / baseline | 1,500 | 3k |",
        "|---|---|---|",
        "| rebuild (raw) | 0.2x | - |",
    ]
