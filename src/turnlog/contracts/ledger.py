"""The spent-token ledger's vocabulary: how a token was spent, and the one row that says so.

A token is spent once, for good: resumed by one answer, or expired by its owner. The ledger row
is what every part of turnlog reads and writes about it -- the worker's open transaction, the
local store, a ``TokenConsumed`` record read back -- so there is one type for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    """How a token was spent; the value is what ``TokenConsumed.outcome`` carries."""

    RESUMED = "resumed"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """A spent token: its outcome, the answer that spent it (empty for an expiry), its thread."""

    outcome: Outcome
    answer_id: str
    thread_id: str = ""
