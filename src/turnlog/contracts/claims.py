"""The claims of a pause token, as a value: what a token says, whoever signed it.

Pure: the rules of the resume contract compare an answer with these claims, and they are built
and checked here without any key, file or JWT library -- those live in :mod:`turnlog.tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, check_call, request_binding
from turnlog.contracts.events import PauseRecorded


def _utc_second(value: datetime, name: str) -> datetime:
    """``value`` in UTC at whole seconds: a JWT NumericDate has no finer grain, so a claim
    value that kept microseconds would not survive its own round trip."""
    if value.tzinfo is None:
        raise ValueError(f"{name} must be timezone-aware (UTC)")
    return value.astimezone(UTC).replace(microsecond=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseClaims:
    """What a pause token says: its window and the identity of the pause it may resume.

    ``pause_partition``/``pause_offset`` locate the ``PauseRecorded`` record, so the worker that
    owns the partition can catch up to at least that offset before it calls a pause missing;
    they are optional because a token can be issued before that offset is known.

    ``tool_name``/``arguments_hash`` bind an ``approve_tool_call`` pause to the exact call it
    asks about (empty for every other interaction): an approval names both, and one naming
    another call is refused (:mod:`turnlog.contracts.approvals`).
    """

    token_id: str
    scope_hash: str
    session_id: str
    run_id: str
    tool_call_id: str
    interrupt_id: str
    thread_id: str
    checkpoint_id: str
    interaction: str
    request_hash: str
    issued_at: datetime
    not_before: datetime
    expires_at: datetime
    pause_partition: int | None = None
    pause_offset: int | None = None
    tool_name: str = ""
    arguments_hash: str = ""

    def __post_init__(self) -> None:
        for attr in ("issued_at", "not_before", "expires_at"):
            object.__setattr__(self, attr, _utc_second(getattr(self, attr), attr))
        if self.expires_at <= self.not_before:
            raise ValueError("a pause token's window must close after it opens")
        if not self.token_id or not self.thread_id or not self.checkpoint_id:
            raise ValueError("token_id, thread_id and checkpoint_id must not be empty")
        if not (self.tool_call_id or self.interrupt_id):
            raise ValueError("a pause must name the call it stopped: tool_call_id or interrupt_id")
        for attr in ("pause_partition", "pause_offset"):
            value = getattr(self, attr)
            if value is not None and (isinstance(value, bool) or value < 0):
                raise ValueError(f"{attr} must be a non-negative int or None")

    @property
    def answered_call_id(self) -> str:
        """The call the answer stands in for: the tool call, or the interrupt when there is none."""
        return self.tool_call_id or self.interrupt_id

    @classmethod
    def for_pause(
        cls,
        pause: PauseRecorded,
        *,
        issued_at: datetime | None = None,
        pause_partition: int | None = None,
        pause_offset: int | None = None,
    ) -> PauseClaims:
        """The claims of the token handed out for ``pause``; its window runs from ``issued_at``
        (default: when the pause happened) to the pause's own ``expires_at``."""
        start = pause.occurred_at if issued_at is None else issued_at
        cp = pause.checkpoint
        # Raises ValueError for an approval request naming no exact call: no token for it.
        tool, hashed = "", ""
        if pause.response_schema == APPROVE_TOOL_CALL:
            tool, hashed = request_binding(pause.request_json)
            check_call(cp.messages, cp.tool_call_id or cp.interrupt_id, tool, hashed)
        return cls(
            token_id=pause.token_id,
            scope_hash=cp.scope_hash,
            session_id=cp.session_id,
            run_id=cp.run_id,
            tool_call_id=cp.tool_call_id,
            interrupt_id=cp.interrupt_id,
            thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id,
            interaction=pause.response_schema,
            request_hash=pause.request_hash,
            issued_at=start,
            not_before=start,
            expires_at=pause.expires_at,
            pause_partition=pause_partition,
            pause_offset=pause_offset,
            tool_name=tool,
            arguments_hash=hashed,
        )
