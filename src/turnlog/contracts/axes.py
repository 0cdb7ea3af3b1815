"""The four axes: who may answer a pause, stated by every answer and checked against its token.

Tenant scope, session, run and the tool call answered. They travel together everywhere -- a
pause names them, an answer states them, a token claims them, the worker compares them -- so
they are one value. An answer must state every one: an unstated axis is refused by its own
name (step 2), never defaulted from the token, because defaulting would let an answer carry
anyone's authority.

``Axes`` is also a mapping of its four field names, so ``publisher.publish(token, response,
**axes)`` reads like the wire record it becomes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from turnlog.contracts.refusals import Refusal, RefusalReason

if TYPE_CHECKING:
    from turnlog.contracts.checkpoint import TurnCheckpoint
    from turnlog.contracts.claims import PauseClaims
    from turnlog.contracts.events import AnswerSubmitted

_MISSING = (
    RefusalReason.AXIS_MISSING_SCOPE,
    RefusalReason.AXIS_MISSING_SESSION,
    RefusalReason.AXIS_MISSING_RUN,
    RefusalReason.AXIS_MISSING_CALL,
)
_MISMATCH = (
    RefusalReason.SCOPE_MISMATCH,
    RefusalReason.SESSION_MISMATCH,
    RefusalReason.RUN_MISMATCH,
    RefusalReason.CALL_MISMATCH,
)


@dataclass(frozen=True, slots=True, eq=False)
class Axes(Mapping[str, "str | None"]):
    """Scope, session, run and call; ``None`` (or empty) where an answer left one unstated.

    Compared as a mapping (``eq=False`` leaves ``Mapping.__eq__``), so it equals the dict of
    the same four fields, as callers that pass axes around as keyword dicts expect."""

    scope_hash: str | None
    session_id: str | None
    run_id: str | None
    call_id: str | None

    @classmethod
    def of_pause(cls, checkpoint: TurnCheckpoint) -> Axes:
        """What an answer to this paused turn must state."""
        call = checkpoint.tool_call_id or checkpoint.interrupt_id
        return cls(checkpoint.scope_hash, checkpoint.session_id, checkpoint.run_id, call)

    @classmethod
    def of_claims(cls, claims: PauseClaims) -> Axes:
        """What the token says an answer must state."""
        return cls(claims.scope_hash, claims.session_id, claims.run_id, claims.answered_call_id)

    @classmethod
    def stated_by(cls, answer: AnswerSubmitted) -> Axes:
        return cls(answer.scope_hash, answer.session_id, answer.run_id, answer.call_id)

    def missing(self) -> Refusal | None:
        """The first axis left unstated, refused by its own name."""
        for reason, value in zip(_MISSING, self._values(), strict=True):
            if not value:
                return Refusal(
                    reason, "the answer must state it; an unstated axis is never defaulted"
                )
        return None

    def mismatch(self, claimed: Axes) -> Refusal | None:
        """The first axis that disagrees with ``claimed`` (the token's), refused by name."""
        for reason, stated, wanted in zip(
            _MISMATCH, self._values(), claimed._values(), strict=True
        ):
            if stated != wanted:
                # Named, never quoted: what an answer states is its own text.
                return Refusal(reason, "the answer states another value than its token")
        return None

    def _values(self) -> tuple[str | None, ...]:
        return (self.scope_hash, self.session_id, self.run_id, self.call_id)

    # The mapping of the four field names, for ``**axes``.
    def __getitem__(self, key: str) -> str | None:
        if key not in _NAMES:
            raise KeyError(key)
        value: str | None = getattr(self, key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)


_NAMES = tuple(f.name for f in fields(Axes))
