"""One thread's trail, from the log alone: paused, answered by whom, resumed, refused, expired,
and who continued the resumed turn (its claim, then its holder's done).

What happened to a pause is spread over five topics -- the pause, each answer (with who sent it,
as its publisher verified them), the token's consumption, the resumed turn or the refusal, an
expiry. Every one of them is keyed by the thread and lands on the thread's partition, so the
trail reads that partition of each topic ``read_committed`` from its beginning to the end it had
when the read began, keeps the thread's records and orders them by when they happened. Like
``turnlog audit`` it needs no store and no signing key; a record that does not decode is
skipped (the worker refused it already, on the rejections topic).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import TopicPartition

from turnlog.contracts.asked import asked
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    PauseExpired,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.group import calls_of
from turnlog.contracts.ledger import ClaimState, Outcome
from turnlog.contracts.refusals import Refused
from turnlog.contracts.visible import clip, visible
from turnlog.errors import DecodeError
from turnlog.kafka import clients
from turnlog.kafka.internals import refresh_metadata
from turnlog.kafka.partitioning import check_thread_id, partition_for
from turnlog.kafka.reader import close_consumer
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings
from turnlog.tokens.peek import peek_claims
from turnlog.wire.codec import decode


@dataclass(frozen=True, slots=True)
class TrailEntry:
    """One fact of the thread's trail: ``what`` happened ``at``, to which token and answer."""

    at: datetime
    what: str  # paused, answered, spent, resumed, refused, expired, forgotten
    token_id: str | None
    answer_id: str | None
    detail: str
    answered_by: str | None = None
    answered_by_issuer: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "what": self.what,
            "token_id": self.token_id,
            "answer_id": self.answer_id,
            "detail": self.detail,
            "answered_by": self.answered_by,
            "answered_by_issuer": self.answered_by_issuer,
        }


def entries_of(event: object) -> list[TrailEntry]:
    """The trail's entries for one decoded record: one a call for a pause (a pause of several
    calls waits on each with its own token), at most one for any other record."""
    if isinstance(event, PauseRecorded):
        cp = event.checkpoint
        return [
            TrailEntry(
                event.occurred_at,
                "paused",
                call.token_id,
                None,
                f"{asked(call.response_schema, call.request_json).text} -- call "
                f"{call.tool_call_id or call.interrupt_id} of checkpoint {cp.checkpoint_id}, "
                f"open until {event.expires_at.isoformat()}",
            )
            for call in calls_of(event)
        ]
    entry = entry_of(event)
    return [] if entry is None else [entry]


def entry_of(event: object) -> TrailEntry | None:
    """The trail's entry for one decoded record other than a pause (``None``: not one the
    trail shows); a pause's are :func:`entries_of`."""
    if isinstance(event, AnswerSubmitted):
        try:
            token_id = peek_claims(event.token).get("jti")
        except (Refused, RecursionError):  # unreadable: the worker refused it by name
            token_id = None
        who = event.answered_by or "someone the publisher did not name"
        via = f" (vouched for by {event.answered_by_issuer})" if event.answered_by_issuer else ""
        return TrailEntry(
            event.submitted_at,
            "answered",
            token_id if isinstance(token_id, str) else None,
            event.answer_id,
            f"by {who}{via}",
            event.answered_by,
            event.answered_by_issuer,
        )
    if isinstance(event, TokenConsumed) and event.claim_state:
        # A claim row: the same token's ledger row again, now naming who continues the turn.
        who = clip(visible(event.claimant or "an unnamed claimant"), 120)
        finished = event.claim_state == ClaimState.FINISHED
        detail = f"{'continued' if finished else 'claimed'} by {who} (claim {event.claim_id})"
        detail += ", said done" if finished else ", not said done yet"
        what = "finished" if finished else "claimed"
        return TrailEntry(event.occurred_at, what, event.token_id, event.answer_id or None, detail)
    if isinstance(event, TokenConsumed):
        spent_by: dict[str, str] = {
            Outcome.RESUMED: "spent by the answer",
            Outcome.HELD: "spent by the answer, held until the pause's other calls are answered",
        }
        detail = spent_by.get(event.outcome, "spent by its expiry")
        return TrailEntry(
            event.occurred_at, "spent", event.token_id, event.answer_id or None, detail
        )
    if isinstance(event, TurnResumed):
        detail = (
            "the turn continues (sealed: its content under a key of its own)"
            if event.sealed is not None
            else f"the turn continues ({len(event.history)} messages)"
        )
        return TrailEntry(event.occurred_at, "resumed", event.token_id, event.answer_id, detail)
    if isinstance(event, AnswerRejected):
        detail = f"{event.reason} (step {event.step}): {event.detail}"
        return TrailEntry(event.occurred_at, "refused", event.token_id, event.answer_id, detail)
    if isinstance(event, PauseExpired):
        detail = "its window closed unanswered"
        return TrailEntry(event.occurred_at, "expired", event.token_id, None, detail)
    return None


async def read_trail(
    settings: Settings,
    thread_id: str,
    *,
    topics: TopicSet | None = None,
    token_id: str | None = None,
    timeout: float = 60.0,
) -> list[TrailEntry]:
    """The thread's trail (of ``token_id``'s pause only, if given), oldest first."""
    thread = check_thread_id(thread_id)
    topic_set = topics or TopicSet.from_settings(settings)
    names = (
        topic_set.pauses,
        topic_set.answers,
        topic_set.consumptions,
        topic_set.resumed,
        topic_set.rejections,
    )
    consumer = clients.consumer(
        settings,
        client_id="turnlog-trail",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    entries: list[TrailEntry] = []
    forgot_at: datetime | None = None
    try:
        async with asyncio.timeout(timeout):
            await consumer.start()
            await refresh_metadata(consumer)  # a consumer with no subscription has none yet
            parts = []
            for name in names:
                partitions = consumer.partitions_for_topic(name) or set()
                if partitions:
                    parts.append(TopicPartition(name, partition_for(thread, len(partitions))))
            if not parts:
                return []  # no topics yet: nothing happened here
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            left = {tp for tp in parts if ends[tp] > 0}
            while left:
                batch = await consumer.getmany(*left, timeout_ms=500)
                for records in batch.values():
                    for record in records:
                        if _forgets(record, thread, topic_set):
                            at = datetime.fromtimestamp(record.timestamp / 1000, UTC)
                            forgot_at = at if forgot_at is None else max(forgot_at, at)
                        entries.extend(_entries(record.value, thread))
                for tp in list(left):
                    if await consumer.position(tp) >= ends[tp]:
                        left.discard(tp)
    finally:
        await close_consumer(consumer)
    if token_id is not None:
        entries = [e for e in entries if e.token_id == token_id or _answers(entries, e, token_id)]
    if forgot_at is not None:
        entries = _since_forget(entries, forgot_at)
    order = {
        "forgotten": 0, "paused": 0, "answered": 1, "spent": 2, "resumed": 3, "refused": 3,
        "expired": 3, "claimed": 4, "finished": 5,
    }  # fmt: skip
    return sorted(entries, key=lambda e: (e.at, order[e.what]))


def _forgets(record: Any, thread: str, topics: TopicSet) -> bool:
    """A tombstone ``forget`` wrote for the thread: on pauses, or its mark on answers (the
    answers' own tombstones -- a refused answer's -- come after it)."""
    if record.value is not None or record.key is None:
        return False
    if record.topic == topics.pauses:
        return bool(record.key.startswith(thread.encode() + b"\x00"))
    return bool(record.topic == topics.answers and record.key == thread.encode() + b"\x00")


def _since_forget(entries: list[TrailEntry], forgot_at: datetime) -> list[TrailEntry]:
    """A forgotten thread's trail says so, and shows nothing of what came before the forget
    (not yet compacted on the topics, or kept by the time-retained ones) nor after it (answers
    refused ``forgotten``), unless the thread was paused again: then from that pause on."""
    again = [e.at for e in entries if e.what == "paused" and e.at > forgot_at]
    kept = [e for e in entries if again and e.at >= min(again)]
    said = "the thread was forgotten (turnlog forget): nothing of it before is shown"
    return [TrailEntry(forgot_at, "forgotten", None, None, said), *kept]


def _answers(entries: list[TrailEntry], entry: TrailEntry, token_id: str) -> bool:
    """A refusal without a token id (a token that did not verify) still belongs to the pause
    when its answer named that token."""
    return entry.answer_id is not None and any(
        e.what == "answered" and e.answer_id == entry.answer_id and e.token_id == token_id
        for e in entries
    )


def _entries(value: bytes | None, thread: str) -> list[TrailEntry]:
    if value is None:
        return []
    try:
        event = decode(value)
    except DecodeError:
        return []
    if getattr(event, "thread_id", None) != thread and not (
        isinstance(event, PauseRecorded) and event.checkpoint.thread_id == thread
    ):
        return []
    return entries_of(event)


__all__ = ["TrailEntry", "entries_of", "entry_of", "read_trail"]
