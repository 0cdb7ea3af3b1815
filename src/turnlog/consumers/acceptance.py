"""What an answer that passes the resume contract writes: its ``TokenConsumed`` and ``TurnResumed``.

The worker reads pauses from its store without decoding their messages
(:func:`turnlog.wire.skim.skim_pause`); the resumed turn's history is then written around the
stored messages as they are (:mod:`turnlog.wire.resumed_bytes`), with the same bytes the codec
would write for the decoded turn. The checks are :func:`~turnlog.contracts.resume.check_resume`'s
either way, so no refusal depends on the path. Two cases take the decoding path: an approval that
edits the call's arguments (it rewrites an earlier message, not only appends), and messages the
walk cannot read (never expected: the skim has already checked them as the decoder would; the
decoder then says what it says). A ``PauseRecorded`` given decoded (a test's view) takes it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from turnlog.contracts.claims import PauseClaims
from turnlog.contracts.events import AnswerSubmitted, PauseRecorded
from turnlog.contracts.interactions import InteractionRegistry
from turnlog.contracts.ledger import LedgerEntry, Outcome
from turnlog.contracts.refusals import Refusal, Refused
from turnlog.contracts.rehydration import continuation
from turnlog.contracts.resume import (
    CheckedResume,
    PreparedResume,
    Verifier,
    check_resume,
    prepare_resume,
)
from turnlog.kafka.partitioning import consumption_key
from turnlog.kafka.topics import TopicSet
from turnlog.wire.codec import encode
from turnlog.wire.direct import encode_token_consumed
from turnlog.wire.resumed_bytes import ResumedFields, asking_round_of, encode_turn_resumed
from turnlog.wire.skim import SkimmedPause

Output = tuple[str, bytes, bytes | None]  # topic, key, value (None: a tombstone)


class Verified:
    """A verifier that answers with the outcome of the one verification already made."""

    __slots__ = ("_outcome",)

    def __init__(self, outcome: PauseClaims | Refused) -> None:
        self._outcome = outcome

    def verify(self, token: str, now: datetime) -> PauseClaims:
        if isinstance(self._outcome, Refused):
            raise self._outcome
        return self._outcome


class Accepted(NamedTuple):
    claims: PauseClaims
    outputs: list[Output]


def accept(
    answer: AnswerSubmitted,
    *,
    verifier: Verifier,
    interactions: InteractionRegistry,
    pause: PauseRecorded | SkimmedPause | None,
    ledger: LedgerEntry | None,
    now: datetime,
    topics: TopicSet,
    consumed_meta: Mapping[str, Any],
    resumed_meta: Mapping[str, Any],
) -> Refusal | Accepted:
    """The resume contract on ``answer`` and, if it passes, the two records step 6 writes;
    ``*_meta`` are each event's ``event_id``, ``occurred_at`` and ``package_version``."""
    if isinstance(pause, SkimmedPause):
        checked = check_resume(
            answer,
            verifier=verifier,
            interactions=interactions,
            pause=pause,
            ledger=ledger,
            now=now,
        )
        if isinstance(checked, Refusal):
            return checked
        if not checked.leave_open:  # an edit rewrites the asking round: decoded below
            written = _written_around(answer, checked, pause, topics, consumed_meta, resumed_meta)
            if written is not None:
                return written
        pause = pause.decode()
    prepared = prepare_resume(
        answer,
        verifier=verifier,
        interactions=interactions,
        pause=pause,
        ledger=ledger,
        now=now,
    )
    if isinstance(prepared, Refusal):
        return prepared
    return Accepted(
        prepared.claims, _decoded_outputs(prepared, topics, consumed_meta, resumed_meta)
    )


def _written_around(
    answer: AnswerSubmitted,
    checked: CheckedResume,
    pause: SkimmedPause,
    topics: TopicSet,
    consumed_meta: Mapping[str, Any],
    resumed_meta: Mapping[str, Any],
) -> Refusal | Accepted | None:
    """Step 7 from the stored message bytes; ``None`` when they cannot be walked."""
    checkpoint = pause.checkpoint
    try:
        found = asking_round_of(
            checkpoint.messages_raw, checkpoint.message_count, checkpoint.message_starts
        )
    except (ValueError, IndexError):
        return None
    claims = checked.claims
    try:
        added = continuation(
            checkpoint.checkpoint_id,
            found,
            claims.answered_call_id,
            checked.observation,
            leave_open=checked.leave_open,
        )
    except Refused as refused:
        return refused.refusal
    fields = ResumedFields(
        event_id=resumed_meta["event_id"],
        occurred_at=resumed_meta["occurred_at"],
        package_version=resumed_meta["package_version"],
        token_id=claims.token_id,
        answer_id=answer.answer_id,
        run_id=claims.run_id,
        session_id=claims.session_id,
        thread_id=claims.thread_id,
        checkpoint_id=claims.checkpoint_id,
        interrupt_id=claims.interrupt_id,
        tool_call_id=claims.tool_call_id,
        name=claims.interaction,
        prompt=checkpoint.prompt,
        response_json=answer.response_json,
    )
    resumed = encode_turn_resumed(
        fields, checkpoint.messages_raw, checkpoint.message_count, added, checked.answered
    )
    consumed = encode_token_consumed(
        consumed_meta,
        claims.token_id,
        answer.answer_id,
        claims.thread_id,
        claims.checkpoint_id,
        Outcome.RESUMED.value,  # the text itself: the direct writer takes exact str values
    )
    return Accepted(claims, _outputs(topics, claims, consumed, resumed))


def _decoded_outputs(
    prepared: PreparedResume,
    topics: TopicSet,
    consumed_meta: Mapping[str, Any],
    resumed_meta: Mapping[str, Any],
) -> list[Output]:
    consumed = prepared.token_consumed(**consumed_meta)
    resumed = prepared.turn_resumed(**resumed_meta)
    return _outputs(topics, prepared.claims, encode(consumed), encode(resumed))


def _outputs(
    topics: TopicSet, claims: PauseClaims, consumed: bytes, resumed: bytes
) -> list[Output]:
    return [
        (topics.consumptions, consumption_key(claims.thread_id, claims.token_id), consumed),
        (topics.resumed, claims.thread_id.encode(), resumed),
    ]
