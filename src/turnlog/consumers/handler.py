"""One answer record in, the records its transaction must write out: the worker's per-answer rules.

Everything that decides what an answer produces lives here, apart from the run loop, ownership
and the transaction (:mod:`turnlog.consumers.worker`), so the rules can be tested without a
broker. Three rules of this module are what keeps the guarantee against hostile input:

- **Route by the record.** An answer is handled only on the partition its thread maps to, with
  its key and its value naming the same thread and answer; anything else is refused as
  ``misrouted``. Handling it elsewhere would write its consumption on a partition whose owner
  never looks there -- and the rightful owner could spend the same token again.
- **Nothing unverified reaches the broker.** The unverified token id may pick a ledger row to read
  from the local store (to recognise a retry); only a token whose signature verified may make
  the worker catch up its pauses partition, and only the partition the record is on -- which
  the worker owns, because it is reading it.
- **One record never stops a worker.** Any failure while handling a record becomes an
  ``AnswerRejected`` (``answer_unprocessable`` when no rule names it) committed with the offset,
  and every output is bounded so that it fits the topic: echoed fields and details are clipped,
  and an answer whose resumed turn would not fit is refused as ``answer_too_large``. A failure of
  the catch-up read, though, is the worker's own (its broker is unwell): it propagates, and the
  worker puts the batch back and retries.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from turnlog import __version__
from turnlog.contracts.events import AnswerRejected, AnswerSubmitted, PauseRecorded
from turnlog.contracts.interactions import InteractionRegistry
from turnlog.contracts.ledger import LedgerEntry, Outcome
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.contracts.resume import PreparedResume, is_replay, prepare_resume
from turnlog.errors import DecodeError
from turnlog.kafka.partitioning import SEPARATOR, answer_key, consumption_key, partition_for
from turnlog.kafka.reader import Record
from turnlog.kafka.topics import TopicSet
from turnlog.tokens import PauseClaims, TokenVerifier, peek_claims
from turnlog.tokens.peek import ParsedToken, parse_token
from turnlog.wire.codec import decode, encode

log = logging.getLogger(__name__)

Output = tuple[str, bytes, bytes]  # topic, key, value

#: Longest identifier (answer, token, thread id) echoed into a rejection, in characters.
ID_CHARS = 256
#: Longest detail written into a rejection, in characters.
DETAIL_CHARS = 1000
#: Longest unverified token id looked up in the ledger; a real one is 32 hex digits.
_TOKEN_ID_CHARS = 256


class StoreView(Protocol):
    """What the handler reads of the worker's store."""

    def pause(self, token_id: str) -> PauseRecorded | None: ...

    def ledger(self, token_id: str) -> LedgerEntry | None: ...

    def pauses_applied(self, partition: int) -> int | None:
        """The next offset of pauses[partition] the store has applied (``None``: none)."""
        ...


#: Catch the store up on pauses[partition] to its committed end.
CatchUp = Callable[[int], Awaitable[None]]


@dataclass
class Handled:
    """What one record comes to: its outputs, and which of the counted outcomes it is."""

    outputs: list[Output] = field(default_factory=list)
    resumed: bool = False
    duplicate: bool = False
    refusal: Refusal | None = None
    #: For the worker's log line once committed (clipped; never the token).
    thread_id: str | None = None
    answer_id: str | None = None


def clip(text: str | None, limit: int) -> str:
    """``text`` made safe to encode and at most about ``limit`` characters long.

    Fields echoed from a record are attacker-sized and may hold lone surrogates (legal in JSON,
    not in UTF-8); written back unbounded they would make the rejection itself unwritable.
    """
    if text is None:
        return ""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(safe) <= limit:
        return safe
    return f"{safe[:limit]}... ({len(safe)} characters)"


class _Verified:
    """A verifier that answers with the outcome of the one verification already made."""

    __slots__ = ("_outcome",)

    def __init__(self, outcome: PauseClaims | Refused) -> None:
        self._outcome = outcome

    def verify(self, token: str, now: datetime) -> PauseClaims:
        if isinstance(self._outcome, Refused):
            raise self._outcome
        return self._outcome


@dataclass
class _Checked:
    """An answer that is routed right and not a replay, with its one token verification."""

    answer: AnswerSubmitted
    token_id: str | None
    ledger: LedgerEntry | None
    verified: PauseClaims | Refused


class AnswerHandler:
    """Applies the resume contract to one answer record; see the module docstring."""

    def __init__(
        self,
        *,
        topics: TopicSet,
        partitions: int,
        verifier: TokenVerifier,
        interactions: InteractionRegistry,
        view: StoreView,
        catch_up: CatchUp,
        max_record_bytes: int,
    ) -> None:
        self.topics = topics
        self.partitions = partitions
        self.verifier = verifier
        self.interactions = interactions
        self.view = view
        self.catch_up = catch_up
        self.max_record_bytes = max_record_bytes

    async def handle(
        self, record: Record, pending: dict[str, LedgerEntry], now: datetime
    ) -> Handled:
        """The outputs of ``record``; ``pending`` holds the tokens the open transaction spends
        (a duplicate inside the transaction is seen there) and gains this answer's."""
        if record.value is None:
            return Handled()  # a tombstone: the thread was forgotten
        try:
            checked = self._check(record, record.value, pending, now)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)
        if isinstance(checked, Handled):
            return checked
        try:
            pause, stale = self._lookup(record, checked)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)
        if stale:
            # Reading the log is the worker's own business: if it fails, the broker is unwell,
            # not the answer -- the error propagates and the batch is retried.
            await self.catch_up(record.partition)
        try:
            if stale and isinstance(checked.verified, PauseClaims):
                pause = self.view.pause(checked.verified.token_id)
            return self._finish(record, checked, pause, pending, now)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)

    # -- the steps ----------------------------------------------------------------------------

    def _check(
        self, record: Record, value: bytes, pending: Mapping[str, LedgerEntry], now: datetime
    ) -> _Checked | Handled:
        try:
            answer = decode(value, AnswerSubmitted)
        except DecodeError as exc:
            refusal = Refusal(RefusalReason.ANSWER_UNDECODABLE, f"{exc.reason}: {exc.detail}")
            return self._reject(record, refusal, now, thread_id=_key_thread(record.key))
        misrouted = self._misrouted(record, answer)
        if misrouted is not None:
            return self._reject(record, misrouted, now, answer=answer)
        # The token is parsed once: its unverified id picks the ledger row (a retry is
        # recognised before any signature work), and the same parse is then verified.
        try:
            parsed: ParsedToken | Refused = parse_token(answer.token)
        except Refused as refused:
            parsed = refused
        token_id = _jti(parsed.payload) if isinstance(parsed, ParsedToken) else None
        ledger: LedgerEntry | None = None
        if token_id is not None:
            ledger = pending.get(token_id)
            if ledger is None:
                ledger = self.view.ledger(token_id)
        if is_replay(answer, ledger):
            # A retry of the answer that resumed: nothing new.
            return Handled(
                duplicate=True,
                thread_id=clip(answer.thread_id, ID_CHARS),
                answer_id=clip(answer.answer_id, ID_CHARS),
            )
        verified: PauseClaims | Refused = (
            parsed if isinstance(parsed, Refused) else self._verify(parsed, now)
        )
        return _Checked(answer, token_id, ledger, verified)

    def _verify(self, parsed: ParsedToken, now: datetime) -> PauseClaims | Refused:
        try:
            return self.verifier.verify_parsed(parsed, now)
        except Refused as refused:
            return refused

    def _misrouted(self, record: Record, answer: AnswerSubmitted) -> Refusal | None:
        if not answer.thread_id:
            # Names no thread, so it can never spend a token (a verified token names one: step
            # 2 refuses the difference); publishers park such answers under a placeholder key.
            return None
        try:
            expected_key = answer_key(answer.thread_id, answer.answer_id)
        except (ValueError, TypeError, UnicodeEncodeError) as exc:
            return Refusal(RefusalReason.MISROUTED, f"the answer cannot be keyed: {exc}")
        if record.key != expected_key:
            return Refusal(
                RefusalReason.MISROUTED,
                "the record's key must be the value's 'thread_id NUL answer_id', got "
                f"{clip(repr(record.key), 200)}",
            )
        expected = partition_for(answer.thread_id, self.partitions)
        if expected != record.partition:
            return Refusal(
                RefusalReason.MISROUTED,
                f"thread {clip(answer.thread_id, ID_CHARS)!r} maps to partition {expected} of "
                f"{self.partitions}, the answer is on partition {record.partition}: "
                "(murmur2(utf8(thread_id)) & 0x7fffffff) % partitions",
            )
        return None

    def _lookup(self, record: Record, checked: _Checked) -> tuple[PauseRecorded | None, bool]:
        """The token's pause, and whether this partition's pauses must be caught up first (the
        answer may have overtaken its own pause) -- only ever for a verified token, and only
        the partition the record is on."""
        claims = checked.verified
        if isinstance(claims, Refused):
            return None, False
        pause = self.view.pause(claims.token_id)
        if pause is not None or claims.thread_id != checked.answer.thread_id:
            return pause, False
        p = record.partition
        if claims.pause_partition not in (None, p):
            return None, False
        applied = self.view.pauses_applied(p)
        stale = claims.pause_offset is None or applied is None or applied <= claims.pause_offset
        return None, stale

    def _finish(
        self,
        record: Record,
        checked: _Checked,
        pause: PauseRecorded | None,
        pending: dict[str, LedgerEntry],
        now: datetime,
    ) -> Handled:
        outcome = prepare_resume(
            checked.answer,
            verifier=_Verified(checked.verified),
            interactions=self.interactions,
            pause=pause,
            ledger=checked.ledger,
            now=now,
        )
        if isinstance(outcome, Refusal):
            return self._reject(record, outcome, now, answer=checked.answer)
        outputs = self._accepted(outcome, now)
        too_big = [
            (t, len(k) + len(v)) for t, k, v in outputs if len(k) + len(v) > self.max_record_bytes
        ]
        if too_big:
            topic, size = too_big[0]
            refusal = Refusal(
                RefusalReason.ANSWER_TOO_LARGE,
                f"its record on {topic} would be {size} bytes, over the limit of "
                f"{self.max_record_bytes}; answer with a shorter response",
            )
            return self._reject(record, refusal, now, answer=checked.answer)
        claims = outcome.claims
        pending[claims.token_id] = LedgerEntry(
            Outcome.RESUMED, outcome.answer.answer_id, claims.thread_id
        )
        # The INFO line is the worker's, once the transaction committed.
        log.debug(
            "answer %s resumes thread %s (partition %d, offset %d)",
            outcome.answer.answer_id, claims.thread_id, record.partition, record.offset,
        )  # fmt: skip
        return Handled(
            outputs=outputs,
            resumed=True,
            thread_id=claims.thread_id,
            answer_id=clip(outcome.answer.answer_id, ID_CHARS),
        )

    def _accepted(self, prepared: PreparedResume, now: datetime) -> list[Output]:
        claims = prepared.claims
        consumed = prepared.token_consumed(**event_meta(now))
        resumed = prepared.turn_resumed(**event_meta(now))
        return [
            (
                self.topics.consumptions,
                consumption_key(claims.thread_id, claims.token_id),
                encode(consumed),
            ),
            (self.topics.resumed, claims.thread_id.encode(), encode(resumed)),
        ]

    # -- refusals -----------------------------------------------------------------------------

    def _unprocessable(self, record: Record, exc: Exception, now: datetime) -> Handled:
        log.warning(
            "answer at %s[%d]@%d could not be handled (%s); refusing it",
            record.topic, record.partition, record.offset, type(exc).__name__, exc_info=exc,
        )  # fmt: skip
        refusal = Refusal(
            RefusalReason.ANSWER_UNPROCESSABLE, f"{type(exc).__name__}: {clip(str(exc), 500)}"
        )
        return self._reject(record, refusal, now, thread_id=_key_thread(record.key))

    def _reject(
        self,
        record: Record,
        refusal: Refusal,
        now: datetime,
        *,
        answer: AnswerSubmitted | None = None,
        thread_id: str | None = None,
    ) -> Handled:
        if answer is not None:
            answer_id: str = answer.answer_id
            thread_id = answer.thread_id or thread_id
            token_id = _token_id(answer.token)
        else:
            answer_id = f"{record.topic}:{record.partition}:{record.offset}"
            token_id = None
        thread = clip(thread_id, ID_CHARS) if thread_id else None
        event = AnswerRejected(
            **event_meta(now),
            answer_id=clip(answer_id, ID_CHARS),
            token_id=clip(token_id, ID_CHARS) if token_id else None,
            thread_id=thread,
            reason=refusal.reason.value,
            step=refusal.step,
            detail=clip(refusal.detail, DETAIL_CHARS),
        )
        log.debug(
            "answer %s is refused: %s (thread %s, partition %d, offset %d)",
            event.answer_id, event.reason, thread, record.partition, record.offset,
        )  # fmt: skip
        output = (self.topics.rejections, (thread or "").encode(), encode(event))
        return Handled(
            outputs=[output], refusal=refusal, thread_id=thread, answer_id=event.answer_id
        )


def event_meta(now: datetime) -> dict[str, Any]:
    """The fields every event the worker writes starts with."""
    return {"event_id": uuid.uuid4().hex, "occurred_at": now, "package_version": __version__}


def _key_thread(key: bytes | None) -> str | None:
    """The thread a key names (for correlating a rejection), if it can be read at all."""
    if not key:
        return None
    thread = key.partition(SEPARATOR)[0]
    try:
        return thread.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _token_id(token: str) -> str | None:
    """The token id the token *claims*, unverified: only a ledger key to look up."""
    try:
        return _jti(peek_claims(token))
    except Refused:
        return None


def _jti(payload: Mapping[str, Any]) -> str | None:
    jti = payload.get("jti")
    if not isinstance(jti, str) or not jti or len(jti) > _TOKEN_ID_CHARS:
        return None
    try:
        jti.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return jti
