"""How long to wait between the attempts of one delivery.

Exponential and bounded: ``base``, doubled per attempt, at most ``cap``, for ``attempts`` tries
in all. Deterministic (no jitter): one notifier posts to each webhook one notice at a time, so
there is no crowd of clients to spread out, and a fixed schedule is one a reader can predict.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    attempts: int = 5
    base_seconds: float = 0.5
    cap_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {self.attempts}")
        if not 0 <= self.base_seconds <= self.cap_seconds:
            raise ValueError("the backoff needs 0 <= base <= cap")

    def delays(self) -> tuple[float, ...]:
        """The waits before the second, third, ... attempt (one fewer than ``attempts``)."""
        return tuple(
            min(self.cap_seconds, self.base_seconds * 2**i) for i in range(self.attempts - 1)
        )

    def worst_case(self, timeout_seconds: float) -> float:
        """The longest one delivery can hold its webhook's lane: every attempt timing out."""
        return self.attempts * timeout_seconds + sum(self.delays())
