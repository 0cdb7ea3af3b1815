"""Recording a pause: the fact first, the token after -- and nothing written that has no token.

The ``PauseRecorded`` record is committed in a Kafka transaction (acks=all, idempotent) before
the token exists, so nobody can hold a token for a pause the log does not have. The token then
carries the partition and offset where the pause was written: the owner that receives the answer
catches up at least that far before it would ever call the pause missing, so an answer published
milliseconds after its pause cannot lose the race.

The converse matters as much: a pause committed and then refused a token (a negative TTL, an
unknown interaction, a field of the wrong type) is a turn nobody can ever resume, waiting until
it expires. So everything is checked before the transaction -- the checkpoint field by field, the
request, the interaction against the registry, the window, the record's size, and a trial
signature -- and a bad pause is :class:`~turnlog.errors.PauseInvalid` naming the field.

A broker that cannot be reached is ridden out (:func:`~turnlog.kafka.outage.ride_out`): retried
with backoff for ``Settings.broker_timeout_seconds``, one log line when it goes and one when it
comes back, then :class:`~turnlog.errors.BrokerUnavailable`. A transaction that fails on an
outage is redone with the same pause (same token id and key: the same fact) on a producer with
the same transactional id, whose start fences the old one and aborts its open transaction.

It is one module, at the usual length limit, because the checks are kept beside the transaction
they guard: they exist for the recorder's one promise (no pause without a token). Riding out the
broker is :mod:`turnlog.kafka.outage`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer

from turnlog._version import __version__
from turnlog.clock import utc_now
from turnlog.contracts.checkpoint import TURN_STATE_VERSION, TurnCheckpoint, doubled_calls
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.group import (
    CallToPause,
    PausedCall,
    call_name,
    call_order,
    calls_of,
    view_for_token,
)
from turnlog.contracts.interactions import InteractionRegistry, default_interactions
from turnlog.contracts.messages import normalize_message
from turnlog.contracts.refusals import Refused
from turnlog.contracts.rehydration import rehydrate
from turnlog.contracts.resume import request_hash
from turnlog.errors import PauseInvalid, TurnlogError
from turnlog.kafka import clients
from turnlog.kafka.finalization import unfinalized_header
from turnlog.kafka.outage import (
    abandon,
    attempt_timeout,
    request_timeout_ms,
    ride_out,
    stop_producer,
)
from turnlog.kafka.partitioning import check_thread_id, partition_for, pause_key
from turnlog.kafka.registry import prepare_wire
from turnlog.kafka.topics import TopicSet, admin_client, ensure_topics
from turnlog.observability import tracing
from turnlog.settings import Settings
from turnlog.tokens import PauseClaims, TokenIssuer
from turnlog.wire.codec import encode

T = TypeVar("T")


# -- what a pause must be before it is written ---------------------------------------------------

_TEXT_FIELDS = (
    "run_id",
    "session_id",
    "thread_id",
    "checkpoint_id",
    "scope_hash",
    "tool_call_id",
    "interrupt_id",
    "name",
    "prompt",
    "tenant_id",
    "package_version",
)
_LONG = 2**63
#: How many failed writes a recorder keeps for its next flush to report (the rest are counted
#: in their own callers' errors).
_KEPT_FAILURES = 1000


def _json_type(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "text"}
    names.update({list: "a list", dict: "an object", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def check_checkpoint(checkpoint: TurnCheckpoint) -> None:
    """Raise :class:`PauseInvalid` naming the first field a pause cannot be recorded with."""
    for name in _TEXT_FIELDS:
        value = getattr(checkpoint, name)
        if not isinstance(value, str):
            raise PauseInvalid(name, f"must be text, got {_json_type(value)}")
    sequence = checkpoint.sequence
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise PauseInvalid("sequence", f"must be a whole number, got {_json_type(sequence)}")
    if not -_LONG <= sequence < _LONG:
        raise PauseInvalid("sequence", f"must fit in 64 bits, got {sequence}")
    if not isinstance(checkpoint.safe_boundary, bool):
        raise PauseInvalid("safe_boundary", "must be true or false")
    if not isinstance(checkpoint.created_at, datetime) or checkpoint.created_at.tzinfo is None:
        raise PauseInvalid("created_at", "must be a timezone-aware time")
    try:
        check_thread_id(checkpoint.thread_id)
    except ValueError as exc:
        raise PauseInvalid("thread_id", str(exc)) from None
    if not checkpoint.checkpoint_id:
        raise PauseInvalid("checkpoint_id", "a checkpoint to pause on needs a checkpoint_id")
    if not (checkpoint.tool_call_id or checkpoint.interrupt_id):
        raise PauseInvalid(
            "tool_call_id", "a pause must name the call it stopped: tool_call_id or interrupt_id"
        )
    check_asking_round(checkpoint)


def check_asking_round(checkpoint: TurnCheckpoint) -> None:
    """Refuse a pause no answer could ever resume: the worker rebuilds the turn with this same
    rule (step 5), so a checkpoint whose messages reserve no round for the paused call would
    be refused ``asking_round_missing`` at every answer, until it expired -- and one that
    reserves a call twice while it is open, which no answer could make whole."""
    doubled = doubled_calls(checkpoint.messages)
    if doubled:
        raise PauseInvalid(
            "messages",
            f"call {doubled[0]!r} is reserved twice (the asking round appended to a list "
            "that already held it?): keep one assistant message asking for it",
        )
    try:
        rehydrate(checkpoint, checkpoint.tool_call_id or checkpoint.interrupt_id, "")
    except Refused as refused:
        raise PauseInvalid("messages", f"{refused.reason.value}: {refused.detail}") from None


def read_checkpoint(raw: str | bytes) -> TurnCheckpoint:
    """A checkpoint from its canonical JSON body (a file, a request), checked field by field.

    :meth:`TurnCheckpoint.decode` reads what turnlog wrote itself and turns any value into
    text; a body written by hand deserves a refusal that names the field instead.
    """
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise PauseInvalid("checkpoint", f"is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise PauseInvalid("checkpoint", f"must be a JSON object, got {_json_type(body)}")
    known = set(TurnCheckpoint().body())
    unknown = sorted(set(body) - known)
    if unknown:
        raise PauseInvalid(unknown[0], "is not a checkpoint field")
    version = body.get("version", TURN_STATE_VERSION)
    if version != TURN_STATE_VERSION or isinstance(version, bool):
        raise PauseInvalid("version", f"must be {TURN_STATE_VERSION}, got {version!r}")
    for name in _TEXT_FIELDS:
        if name in body and not isinstance(body[name], str):
            raise PauseInvalid(name, f"must be text, got {_json_type(body[name])}")
    values: dict[str, Any] = {name: body[name] for name in _TEXT_FIELDS if name in body}
    if "sequence" in body:
        sequence = body["sequence"]
        if isinstance(sequence, bool) or not isinstance(sequence, int):
            raise PauseInvalid("sequence", f"must be a whole number, got {_json_type(sequence)}")
        values["sequence"] = sequence
    if "safe_boundary" in body:
        if not isinstance(body["safe_boundary"], bool):
            got = _json_type(body["safe_boundary"])
            raise PauseInvalid("safe_boundary", f"must be true or false, got {got}")
        values["safe_boundary"] = body["safe_boundary"]
    if "created_at" in body:
        created = body["created_at"]
        try:
            values["created_at"] = datetime.fromisoformat(created)
        except (TypeError, ValueError):
            raise PauseInvalid("created_at", f"must be an ISO 8601 time, got {created!r}") from None
        if values["created_at"].tzinfo is None:
            raise PauseInvalid("created_at", "must say its offset (e.g. +00:00)")
    messages = body.get("messages", [])
    if not isinstance(messages, list):
        raise PauseInvalid("messages", f"must be a list, got {_json_type(messages)}")
    normalized = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise PauseInvalid(where, f"must be an object, got {_json_type(message)}")
        try:
            normalized.append(normalize_message(message))
        except (ValueError, TypeError, RecursionError) as exc:
            raise PauseInvalid(where, str(exc)) from None
    checkpoint = TurnCheckpoint(**values, messages=tuple(normalized))
    check_checkpoint(checkpoint)
    return checkpoint


@dataclass(frozen=True, slots=True)
class RecordedPause:
    """A durable pause and the token that may resume it."""

    token: str
    pause: PauseRecorded
    partition: int
    offset: int
    #: The W3C traceparent on the pause record: hand it on with the token (one trace).
    traceparent: str | None = None
    #: Written in the crash window (``record(..., finalized=False)``): ``token`` is empty until
    #: :meth:`PauseRecorder.finalize` writes the pause again and issues it.
    unfinalized: bool = False

    @property
    def token_id(self) -> str:
        return self.pause.token_id

    @property
    def thread_id(self) -> str:
        return self.pause.checkpoint.thread_id


class PauseRecorder:
    """The agent runtime's writer. Also a checkpoint-service driver (ensure_ready/flush/close).

    ``interactions`` is the registry the workers answer against: a pause naming an interaction
    it does not hold is refused now rather than spending a token on a question no worker can
    check the answer to.
    """

    def __init__(
        self,
        settings: Settings,
        issuer: TokenIssuer,
        *,
        topics: TopicSet | None = None,
        create_topics: bool | None = None,
        interactions: InteractionRegistry | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.topics = topics or TopicSet.from_settings(settings)
        self._issuer = issuer
        # None: the settings decide (TURNLOG_CREATE_TOPICS); False verifies the topics only.
        self._create_topics = settings.create_topics if create_topics is None else create_topics
        self._interactions = interactions if interactions is not None else default_interactions()
        self._clock = clock
        self._producer: AIOKafkaProducer | None = None
        self._partitions: int | None = None
        self._topics_ready = False
        # One transactional id for the recorder's life: a producer re-made after an outage
        # fences its predecessor and aborts the transaction it left open, at once -- a fresh id
        # would leave that transaction holding back read_committed readers until it timed out.
        self._transactional_id = f"{settings.application_id}.pauses.{uuid.uuid4().hex}"
        self._lock = asyncio.Lock()
        # One transaction at a time on the one producer: concurrent pauses of one recorder
        # would otherwise begin a transaction inside another's (aiokafka asserts on it).
        self._transaction = asyncio.Lock()
        #: The writes under way, each done when its commit returned or failed: what a flush
        #: waits for, and reports when the broker has not taken it by the flush's end.
        self._in_flight: dict[asyncio.Future[None], tuple[str, str]] = {}
        #: The writes that failed since the last flush, as text (reported by the next one).
        self._failed: list[str] = []

    async def ensure_ready(self) -> None:
        """Create or verify the topics, then start the transactional producer. Idempotent.

        An unreachable broker is retried for ``broker_timeout_seconds``, then
        :class:`BrokerUnavailable` (a ``TurnlogError``), never aiokafka's own exception:
        callers must be able to tell it from a bug without importing the client library.
        """
        await ride_out(
            self._open,
            settings=self.settings,
            who="pause recorder",
            timeout=attempt_timeout(self.settings),
        )

    async def _open(self) -> tuple[AIOKafkaProducer, int]:
        async with self._lock:
            if self._producer is not None and self._partitions is not None:
                return self._producer, self._partitions
            if not self._topics_ready:
                admin = admin_client(self.settings)
                try:
                    await admin.start()
                    await ensure_topics(admin, self.topics, create=self._create_topics)
                finally:
                    await admin.close()
                await prepare_wire(self.settings, self.topics)
                self._topics_ready = True
            producer = clients.producer(
                self.settings,
                transactional_id=self._transactional_id,
                client_id="turnlog-pause-recorder",
                request_timeout_ms=request_timeout_ms(self.settings),
            )
            partitions = await clients.started(producer, self.topics.pauses)
            self._producer, self._partitions = producer, partitions
            return producer, partitions

    async def _discard(self, producer: AIOKafkaProducer) -> None:
        """Drop a producer whose transaction failed: its state is unknown. The next one, with
        the same transactional id, fences it and aborts what it left open."""
        async with self._lock:
            if self._producer is producer:
                self._producer, self._partitions = None, None
        await abandon(producer)

    start = ensure_ready

    async def flush(self) -> list[str]:
        """Wait for the writes under way, up to one attempt's time, and say which did not reach
        the broker: each write that failed since the last flush, and each still waiting for
        the broker at the end (``thread ..., checkpoint ...: why``). Never raises.

        aiokafka's own ``flush`` waits for the pending batches and raises none of their errors,
        so a failure is seen here, on each write's own outcome.
        """
        patience = attempt_timeout(self.settings)
        waiting = list(self._in_flight)
        if waiting:
            await asyncio.wait(waiting, timeout=patience)
        failures, self._failed = self._failed, []
        for done, (thread_id, checkpoint_id) in list(self._in_flight.items()):
            if not done.done():
                failures.append(
                    f"thread {thread_id}, checkpoint {checkpoint_id}: not acknowledged by the "
                    f"broker {patience:.0f}s into the flush (the write is still being retried)"
                )
        return failures

    async def close(self) -> None:
        async with self._lock:
            producer, self._producer, self._partitions = self._producer, None, None
            if producer is not None:
                await stop_producer(producer, patience=attempt_timeout(self.settings))

    stop = close

    async def __aenter__(self) -> PauseRecorder:
        await self.ensure_ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _window(self, ttl: timedelta | None) -> timedelta:
        window = ttl if ttl is not None else timedelta(seconds=self.settings.token_ttl_seconds)
        if not isinstance(window, timedelta) or window < timedelta(seconds=1):
            got = (  # in seconds: the repr of -5 s is timedelta(days=-1, seconds=86395)
                f"{window.total_seconds():f}".rstrip("0").rstrip(".") + " seconds"
                if isinstance(window, timedelta)
                else repr(window)
            )
            raise PauseInvalid("ttl", f"a pause's window must be at least one second, got {got}")
        return window

    def _encoded(self, pause: PauseRecorded) -> tuple[bytes, bytes]:
        """The pause's value and key, or :class:`PauseInvalid` for one that cannot be written
        or would not fit in a record."""
        try:
            value = encode(pause)
        except (TypeError, ValueError, OverflowError) as exc:
            raise PauseInvalid("checkpoint", f"cannot be written: {exc}") from None
        cp = pause.checkpoint
        key = pause_key(cp.thread_id, cp.checkpoint_id)
        size = len(key) + len(value)
        if size > self.settings.max_record_bytes:
            raise PauseInvalid(
                "checkpoint",
                f"the pause record would be {size} bytes, over the {self.settings.max_record_bytes}"
                " a record may have (TURNLOG_MAX_RECORD_BYTES)",
            )
        return value, key

    def prepare(
        self,
        checkpoint: TurnCheckpoint,
        *,
        request_json: str | None = None,
        interaction: str | None = None,
        ttl: timedelta | None = None,
    ) -> tuple[PauseRecorded, bytes, bytes]:
        """The pause, its key and its encoded value -- or :class:`PauseInvalid`. No I/O."""
        check_checkpoint(checkpoint)
        given = request_json is not None
        if request_json is None:  # what the model asked: the paused call's own arguments
            request_json = checkpoint.call_arguments() or "{}"
        if not isinstance(request_json, str):
            raise PauseInvalid("request_json", "must be JSON text")
        try:
            hashed = request_hash(request_json)
        except ValueError as exc:
            raise PauseInvalid("request_json", str(exc)) from None
        name = interaction if interaction is not None else checkpoint.name
        if name not in self._interactions:
            known = ", ".join(self._interactions.names) or "none"
            raise PauseInvalid(
                "interaction", f"no interaction {name!r} is registered here (known: {known})"
            )
        # A request the interaction could bind no answer to would refuse every answer: no token.
        problem = self._interactions.get(name).request_problem(request_json)
        if problem is not None:
            whose = "" if given else f" (none given: call {checkpoint.tool_call_id}'s arguments)"
            raise PauseInvalid("request_json", f"{name} cannot ask it{whose}: {problem}")
        window = self._window(ttl)
        # Tokens carry whole seconds; the recorded window must be the token's own.
        issued_at = self._clock().replace(microsecond=0)
        pause = PauseRecorded(
            event_id=uuid.uuid4().hex,
            occurred_at=issued_at,
            package_version=__version__,
            checkpoint=checkpoint,
            token_id=uuid.uuid4().hex,
            request_json=request_json,
            request_hash=hashed,
            response_schema=name,
            expires_at=issued_at + window,
        )
        value, key = self._encoded(pause)
        # A trial signature: whatever would stop the token after the commit stops it now.
        try:
            self._issuer.issue(PauseClaims.for_pause(pause, pause_partition=0, pause_offset=0))
        except (ValueError, TypeError, TurnlogError) as exc:
            raise PauseInvalid("checkpoint", f"no token can be issued for it: {exc}") from None
        return pause, key, value

    async def record(
        self,
        checkpoint: TurnCheckpoint,
        *,
        request_json: str | None = None,
        interaction: str | None = None,
        ttl: timedelta | None = None,
        traceparent: str | tracing.TraceParent | None = None,
        finalized: bool = True,
    ) -> RecordedPause:
        """Check the pause, write it, wait for its commit, and return its signed token. Its
        ``traceparent`` header is the one given, else the current OpenTelemetry span's, else new.

        ``finalized=False`` opens the crash window: the pause is written marked unfinalized
        (:mod:`turnlog.kafka.finalization`) and no token is issued until :meth:`finalize`; a
        writer that dies first leaves a pause its owner expires, never resumes."""
        # The framing the settings name before the first encode (the registry wire's ids).
        await prepare_wire(self.settings, self.topics)
        pause, key, value = self.prepare(
            checkpoint, request_json=request_json, interaction=interaction, ttl=ttl
        )
        partition, offset, trace = await self._write(
            pause, key, value, traceparent, finalized=finalized
        )
        if not finalized:
            return RecordedPause("", pause, partition, offset, trace, unfinalized=True)
        claims = PauseClaims.for_pause(pause, pause_partition=partition, pause_offset=offset)
        return RecordedPause(self._issuer.issue(claims), pause, partition, offset, trace)

    async def finalize(
        self, pause: PauseRecorded, traceparent: str | tracing.TraceParent | None = None
    ) -> RecordedPause:
        """Close the crash window of a pause written with ``finalized=False``: write it again,
        the same record under the same key without the mark, and issue its token (which points
        at this write, so its owner has read it before it ever answers)."""
        if pause.group:
            raise PauseInvalid("pause", "a pause of several calls is written finalized")
        await prepare_wire(self.settings, self.topics)
        value, key = self._encoded(pause)
        partition, offset, trace = await self._write(pause, key, value, traceparent)
        claims = PauseClaims.for_pause(pause, pause_partition=partition, pause_offset=offset)
        return RecordedPause(self._issuer.issue(claims), pause, partition, offset, trace)

    def prepare_calls(
        self,
        checkpoint: TurnCheckpoint,
        calls: Sequence[CallToPause],
        *,
        ttl: timedelta | None = None,
    ) -> tuple[PauseRecorded, bytes, bytes]:
        """A pause of several calls of one asking round (:mod:`turnlog.contracts.group`): one
        record, one token per call, the calls in the order the model made them. Each call is
        checked as a pause of one call is; :class:`PauseInvalid` names the call and the field.
        The checkpoint's own call fields are taken from the first call. No I/O."""
        if isinstance(calls, str | bytes) or not isinstance(calls, Sequence):
            raise PauseInvalid("calls", "must be a list of CallToPause")
        if len(calls) < 2:
            raise PauseInvalid(
                "calls", f"a pause of several calls needs two or more, got {len(calls)}: "
                "pause one call with pause()"
            )  # fmt: skip
        order = call_order(checkpoint)
        seen: set[str] = set()
        for index, call in enumerate(calls):
            if not isinstance(call, CallToPause):
                got = type(call).__name__
                raise PauseInvalid(f"calls[{index}]", f"must be a CallToPause, got {got}")
            if call.tool_call_id not in order:
                raise PauseInvalid(
                    f"calls[{index}].tool_call_id",
                    f"{call.tool_call_id!r} is not a call of the asking round "
                    f"(its calls: {', '.join(order) or 'none'})",
                )
            if call.tool_call_id in seen:
                raise PauseInvalid(
                    f"calls[{index}].tool_call_id", f"{call.tool_call_id!r} is named twice"
                )
            seen.add(call.tool_call_id)
        ordered = sorted(calls, key=lambda c: order[c.tool_call_id])
        window = self._window(ttl)
        issued_at = self._clock().replace(microsecond=0)
        group: list[dict[str, str]] = []
        for call in ordered:
            where = f"call {call.tool_call_id}"
            name = call.interaction
            if name is None:
                name = call_name(checkpoint, call.tool_call_id) or ""
            given = call.request is not None
            if call.request is None:
                request_json = checkpoint.call_arguments(call.tool_call_id) or "{}"
            elif isinstance(call.request, str):
                request_json = call.request
            else:
                try:
                    request_json = json.dumps(call.request, sort_keys=True, ensure_ascii=False)
                except (TypeError, ValueError) as exc:
                    raise PauseInvalid(f"{where}: request", f"is not JSON: {exc}") from None
            try:
                hashed = request_hash(request_json)
            except ValueError as exc:
                raise PauseInvalid(f"{where}: request", str(exc)) from None
            if name not in self._interactions:
                known = ", ".join(self._interactions.names) or "none"
                raise PauseInvalid(
                    f"{where}: interaction",
                    f"no interaction {name!r} is registered here (known: {known})",
                )
            problem = self._interactions.get(name).request_problem(request_json)
            if problem is not None:
                whose = "" if given else " (none given: its arguments)"
                raise PauseInvalid(f"{where}: request", f"{name} cannot ask it{whose}: {problem}")
            group.append(
                PausedCall(
                    call.tool_call_id, call.interrupt_id, uuid.uuid4().hex, request_json,
                    hashed, name,
                ).record()
            )  # fmt: skip
        first = PausedCall.of(group[0])
        checkpoint = dataclasses.replace(
            checkpoint,
            tool_call_id=first.tool_call_id,
            interrupt_id=first.interrupt_id,
            name=first.response_schema,
        )
        check_checkpoint(checkpoint)
        pause = PauseRecorded(
            event_id=uuid.uuid4().hex,
            occurred_at=issued_at,
            package_version=__version__,
            checkpoint=checkpoint,
            token_id=first.token_id,
            request_json=first.request_json,
            request_hash=first.request_hash,
            response_schema=first.response_schema,
            expires_at=issued_at + window,
            group=tuple(group),
        )
        value, key = self._encoded(pause)
        for paused in calls_of(pause):  # a trial signature of every call's token
            try:
                view = view_for_token(pause, paused.token_id)
                self._issuer.issue(PauseClaims.for_pause(view, pause_partition=0, pause_offset=0))
            except (ValueError, TypeError, TurnlogError) as exc:
                raise PauseInvalid(
                    f"call {paused.tool_call_id}", f"no token can be issued for it: {exc}"
                ) from None
        return pause, key, value

    async def record_calls(
        self,
        checkpoint: TurnCheckpoint,
        calls: Sequence[CallToPause],
        *,
        ttl: timedelta | None = None,
        traceparent: str | tracing.TraceParent | None = None,
    ) -> list[RecordedPause]:
        """:meth:`prepare_calls`, written as :meth:`record` writes a pause: one record, one
        commit; then one signed token per call, in the order of the calls. Each
        :class:`RecordedPause` is its call's (its ``pause`` is that call's view)."""
        await prepare_wire(self.settings, self.topics)
        pause, key, value = self.prepare_calls(checkpoint, calls, ttl=ttl)
        partition, offset, trace = await self._write(pause, key, value, traceparent)
        recorded = []
        for call in calls_of(pause):
            view = view_for_token(pause, call.token_id)
            claims = PauseClaims.for_pause(view, pause_partition=partition, pause_offset=offset)
            recorded.append(
                RecordedPause(self._issuer.issue(claims), view, partition, offset, trace)
            )
        return recorded

    async def _write(
        self,
        pause: PauseRecorded,
        key: bytes,
        value: bytes,
        traceparent: str | tracing.TraceParent | None,
        *,
        finalized: bool = True,
    ) -> tuple[int, int, str]:
        """Write one checked pause in a transaction; its partition, offset and traceparent.
        The write is in flight (for :meth:`flush`) until it returns or fails."""
        trace = tracing.start(traceparent)
        thread_id = pause.checkpoint.thread_id
        headers = trace.header() + ([] if finalized else [unfinalized_header()])

        async def attempt() -> tuple[int, int]:
            # Not ``async with producer.transaction()``: its exit aborts, and an abort waits for
            # a broker that may be gone. A failed transaction is left to the next producer
            # (taken under the lock, so no waiting write goes on with a discarded one).
            async with self._transaction:
                producer, partitions = await self._open()
                partition = partition_for(thread_id, partitions)
                try:
                    await producer.begin_transaction()
                    sent = await producer.send(
                        self.topics.pauses, value, key=key, partition=partition, headers=headers
                    )
                    # Awaited before the commit: a commit does not wait for a failed delivery.
                    metadata = await sent
                    await producer.commit_transaction()
                except BaseException:
                    await self._discard(producer)
                    raise
            return partition, int(metadata.offset)

        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._in_flight[done] = (thread_id, pause.checkpoint.checkpoint_id)
        try:
            partition, offset = await ride_out(
                attempt,
                settings=self.settings,
                who="pause recorder",
                timeout=attempt_timeout(self.settings),
            )
        except BaseException as exc:
            why = (
                "cancelled"
                if isinstance(exc, asyncio.CancelledError)
                else f"{type(exc).__name__}: {exc}"
            )
            if len(self._failed) < _KEPT_FAILURES:
                self._failed.append(
                    f"thread {thread_id}, checkpoint {pause.checkpoint.checkpoint_id}: {why}"
                )
            raise
        finally:
            del self._in_flight[done]
            done.set_result(None)
        return partition, offset, str(trace)
