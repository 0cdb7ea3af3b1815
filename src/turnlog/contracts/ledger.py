"""The spent-token ledger's vocabulary: how a token was spent, and the one row that says so.

A token is spent once, for good: resumed by one answer, or expired by its owner. The ledger row
is what every part of turnlog reads and writes about it -- the worker's open transaction, the
local store, a ``TokenConsumed`` record read back -- so there is one type for it.

The ledger is bounded: a row outlives its token's window only by the verifier's leeway and a
kept margin (:func:`retire_before_ms`), then its owner retires it, so the ledger grows with the
tokens that can still be spent, not with every token ever spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """How a token was spent; the value is what ``TokenConsumed.outcome`` carries."""

    RESUMED = "resumed"
    #: Spent by an answer to one call of a group whose other calls still wait: the answer is
    #: kept (its response on the row) and the turn resumes with the group's last answer.
    HELD = "held"
    EXPIRED = "expired"


class ClaimState(StrEnum):
    """Where the continuation of a resumed turn stands (``TokenConsumed.claim_state``)."""

    #: taken; its holder has not said done -- the side effect may or may not have run
    CLAIMED = "claimed"
    #: its holder said done: never taken again
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """A spent token: its outcome, the answer that spent it (empty for an expiry), its thread,
    for a held answer the response it gave (kept until its group resumes), and for a resumed
    turn the claim of whoever continues it."""

    outcome: Outcome
    answer_id: str
    thread_id: str = ""
    response_json: str = ""
    #: The continuation claim of a resumed turn (empty: nobody claimed it yet): who holds it,
    #: since when (ms), and whether it is ``claimed`` or ``finished``.
    claim_id: str = ""
    claimant: str = ""
    claimed_at_ms: int = 0
    claim_state: str = ""

    @property
    def claimed(self) -> bool:
        """Whether somebody holds (or held, and finished) the continuation of this turn."""
        return bool(self.claim_state)


def claim_of(row: LedgerEntry | Any) -> tuple[str, str, int, str] | None:
    """A ledger row's claim as the store keeps it, ``(claim_id, claimant, claimed_at_ms,
    state)``; ``None`` when nobody claimed the turn. ``row`` is a :class:`LedgerEntry` or a
    ``TokenConsumed`` read back (the same fields)."""
    if not row.claim_state:
        return None
    return (row.claim_id, row.claimant, row.claimed_at_ms, row.claim_state)


def retire_before_ms(now_ms: int, leeway_ms: int, keep_ms: int) -> int:
    """The ledger's retirement line at ``now_ms``: a row whose token expires before it can go.

    A token that expired at ``exp`` still verifies until ``exp + leeway`` (clock skew), so until
    then its row is what refuses a second spend; after that the verifier refuses every answer
    for it by the clock (``token_expired``), before the ledger is read, and the row protects
    nothing. ``keep_ms`` holds rows longer still: a margin for clocks further apart than the
    leeway, and the time the audit can still pair a row with its outputs. The same line bounds
    the expiry sweep: a pause whose deadline is before it is never expired again (its row may
    be retired already, and expiring it would spend its token a second time on the log).
    """
    if leeway_ms < 0 or keep_ms < 0:
        raise ValueError(f"leeway and keep are never negative, got {leeway_ms}, {keep_ms}")
    return max(0, now_ms - leeway_ms - keep_ms)


def retirable(expires_at_ms: int, now_ms: int, leeway_ms: int, keep_ms: int) -> bool:
    """Whether the ledger row of a token expiring at ``expires_at_ms`` may be retired now."""
    return expires_at_ms < retire_before_ms(now_ms, leeway_ms, keep_ms)
