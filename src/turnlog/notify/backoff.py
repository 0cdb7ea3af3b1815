"""How long to wait before posting a notice again, and for how long to keep trying.

Capped exponential backoff with jitter: after ``n`` failures in a row the wait is drawn from
the upper half of ``min(cap, base * 2^(n-1))``, so a receiver back from an outage is not met by
every notifier (and every webhook lane) at the same instant, and never waits less than half of
the schedule's step. A notice is tried for ``horizon`` from its first attempt (a day by
default: webhook senders people rely on keep trying for hours), then dead-lettered with its
reason. Pure: the random draw is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

#: 2^60 seconds is beyond any cap; the exponent stops there so the float never overflows.
_MAX_EXPONENT = 60


@dataclass(frozen=True, slots=True)
class Backoff:
    base_seconds: float = 1.0
    cap_seconds: float = 300.0
    horizon: timedelta = timedelta(days=1)

    def __post_init__(self) -> None:
        if not 0 < self.base_seconds <= self.cap_seconds:
            raise ValueError("the backoff needs 0 < base <= cap")
        if self.horizon <= timedelta(0):
            raise ValueError("the retry horizon must be positive")

    def step(self, failures: int) -> float:
        """The schedule's wait after ``failures`` failures in a row (no jitter)."""
        exponent = min(max(failures, 1) - 1, _MAX_EXPONENT)
        return min(self.cap_seconds, self.base_seconds * float(2**exponent))

    def delay(self, failures: int, draw: float) -> float:
        """The wait after ``failures`` failures in a row, ``draw`` in [0, 1) choosing where in
        the upper half of the step ("equal jitter")."""
        step = self.step(failures)
        return step / 2 + step / 2 * min(max(draw, 0.0), 1.0)
