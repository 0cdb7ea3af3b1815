"""A long catch-up says so (issue 41): ``turnlog pending`` on a machine that never projected the
topics read their whole history into its own store before its first page -- 76 s at a million
pauses -- in silence. Now it says up front how many records it must read and why, how far it
is every few seconds with the time left at its rate, and what it read at the end."""

from __future__ import annotations

from dataclasses import dataclass

from turnlog.cli.common import SAY_BEHIND, SAY_EVERY, CatchUpReport


@dataclass
class Step:
    applied: int
    remaining: int
    rate: float


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_short_catch_up_says_nothing() -> None:
    said: list[str] = []
    report = CatchUpReport(said.append, "/state/projection", clock=Clock())
    report(Step(200, SAY_BEHIND - 201, 5000.0))
    report(Step(SAY_BEHIND - 1, 0, 5000.0))
    report.finish()
    assert said == []


def test_a_long_catch_up_says_what_it_reads_how_it_goes_and_what_it_read() -> None:
    said: list[str] = []
    clock = Clock()
    report = CatchUpReport(said.append, "/state/projection", clock=clock)
    report(Step(200, 999_800, 2000.0))
    assert len(said) == 1
    assert "/state/projection" in said[0] and "1,000,000 offsets" in said[0]
    assert "whole history" in said[0]
    clock.now += SAY_EVERY / 2
    report(Step(60_000, 940_000, 12_000.0))
    assert len(said) == 1  # not before its time
    clock.now += SAY_EVERY
    report(Step(150_000, 850_000, 15_000.0))
    assert said[1] == "applied 150,000 records, 850,000 offsets left (15,000/s, at most about 57s)"
    clock.now += 50.0
    report(Step(1_000_000, 0, 15_500.0))
    report.finish()
    assert said[2] == "caught up: 1,000,000 records applied in 65.0s"
    assert len(said) == 3
