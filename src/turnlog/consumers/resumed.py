"""Reading resumed turns downstream, and continuing them.

An agent worker iterates :class:`ResumedTurns` and continues each turn through its own ``run``,
``stream`` or typed-stream callable. The offset of a turn is committed only after the caller's
handling of it returns, so a worker that crashes mid-turn gets the turn again (at-least-once
downstream; the resume itself happened exactly once upstream). The history handed to the
callable already holds the answer: there is no way to enter the agent first and rehydrate after.

A downstream worker rides out its broker: an unreachable broker is retried with backoff, logged
once when it goes and once when it is back, and the iteration continues where it was; only an
outage longer than ``settings.broker_timeout_seconds`` ends it, with :class:`BrokerUnavailable`.

One thread's continuation -- a request handler waiting for its thread's turn, a one-shot script
-- is :func:`read_thread_turn` instead: a group reader that skips other threads' turns commits
them too, and they are lost to the agents that should continue them (issue 28). The thread's
read assigns the thread's partition alone, with no group: it commits, skips and takes nothing.

It is one module because the group's iterator and the thread's read are the two ways to read
the same records, with the same decoding and the same history conversions around them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, ConsumerStoppedError, IllegalStateError
from prometheus_client import CollectorRegistry

from turnlog.consumers.content_keys import KeyRing, opened
from turnlog.contracts.events import AskUserAnswered, PauseExpired, TurnResumed
from turnlog.errors import BrokerUnavailable, ContentShredded, DecodeError, TurnlogError
from turnlog.kafka import clients
from turnlog.kafka.lifecycle import Lifecycle
from turnlog.kafka.partitioning import check_thread_id, partition_for
from turnlog.kafka.reader import (
    BROKER_TROUBLE,
    NOT_AUTHORIZED,
    BrokerOutage,
    broker_reachable,
    close_consumer,
)
from turnlog.kafka.registry import prepare_wire
from turnlog.kafka.topics import TopicSet
from turnlog.observability import tracing
from turnlog.observability.metrics import resumed_turns_metrics
from turnlog.settings import Settings
from turnlog.wire.codec import decode

log = logging.getLogger(__name__)

#: A commit the group refused because membership changed (or the partition was just taken).
_REBALANCED = (CommitFailedError, IllegalStateError)
_GIVE_UP: tuple[type[BaseException], ...] = (*BROKER_TROUBLE, BrokerUnavailable)


def history_dicts(turn: TurnResumed) -> list[dict[str, Any]]:
    """The history as plain role/content/tool-call dicts (OpenAI-style), ``None`` keys dropped."""
    out: list[dict[str, Any]] = []
    for message in turn.history:
        item: dict[str, Any] = {"role": message["role"], "content": message["content"]}
        if message.get("tool_calls"):
            item["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in message["tool_calls"]
            ]
        if message.get("tool_call_id") is not None:
            item["tool_call_id"] = message["tool_call_id"]
        if message.get("name") is not None:
            item["name"] = message["name"]
        out.append(item)
    return out


def history_langchain(turn: TurnResumed) -> list[Any]:
    """The history as langchain-core messages (needs the ``langchain`` extra)."""
    try:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    except ImportError as exc:
        raise ImportError("history_langchain needs `pip install turnlog[langchain]`") from exc
    import json

    messages: list[Any] = []
    for m in turn.history:
        role, content = m["role"], m["content"]
        if role == "system":
            messages.append(SystemMessage(content=content))
        elif role == "user":
            messages.append(HumanMessage(content=content))
        elif role == "assistant":
            calls = [
                {"id": c["id"], "name": c["name"], "args": json.loads(c["arguments"] or "{}")}
                for c in m.get("tool_calls") or ()
            ]
            messages.append(AIMessage(content=content, tool_calls=calls))
        else:
            messages.append(ToolMessage(content=content, tool_call_id=m["tool_call_id"] or ""))
    return messages


class _Joined(ConsumerRebalanceListener):  # type: ignore[misc]
    """Set once the group has given this member its first assignment (possibly empty)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.event.set()


@dataclass(frozen=True, slots=True)
class Delivery:
    """One downstream record: a resumed turn, or the news that a pause expired unanswered."""

    event: TurnResumed | PauseExpired
    partition: int
    offset: int
    #: The record's W3C traceparent (``None``: none, or a malformed one): continue the turn in
    #: a span that is its child, and the pause, the answer and the continuation are one trace.
    traceparent: str | None = None


class ResumedTurns(Lifecycle):
    """An async iterator over the resumed topic (``read_committed``, its own consumer group).

    ``async for turn in turns`` commits a turn's offset when the loop asks for the next one, i.e.
    after the body handled it. A loop that leaves after handling a turn (``break``, ``return``)
    calls :meth:`commit` first, or the turn is delivered again. Undecodable records are skipped
    and counted, never raised.

    A commit the group refuses because it rebalanced meanwhile (a long outage ends the member's
    session) is kept and made again once the partition is back; the consumer, positioned at the
    group's older offset, then fetches turns this iterator already handed out, and those are
    passed over, so a turn is not handed out twice by one iterator.

    Stopping it (:meth:`stop`, leaving ``async with``, or ``Turnlog.close()``) ends a loop over
    it at its next step, as ``async for`` over a stopped aiokafka consumer ends: a service loop
    in a task finishes when its ``Turnlog`` closes. A record fetched as it stops is not handed
    out (its offset could no longer be committed), and a stopped iterator is never restarted.

    It reads every thread's turns: a continuation of one thread is ``Turnlog.resumed_turn``
    (:func:`read_thread_turn`), since a turn this loop passes over is committed all the same.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        group_id: str,
        topics: TopicSet | None = None,
        include_expired: bool = False,
        from_beginning: bool = True,
        probe_seconds: float = 1.0,
        call_timeout: float = 10.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.topics = topics or TopicSet.from_settings(settings)
        self._settings = settings
        self.include_expired = include_expired
        self.skipped = 0
        #: Prometheus collectors on ``registry`` (turnlog's own registry by default).
        self.metrics = resumed_turns_metrics(registry)
        self.outage = BrokerOutage(settings.broker_timeout_seconds, "resumed turns", log)
        self._bootstrap = settings.bootstrap_servers
        self._probe_seconds = probe_seconds
        self._call_timeout = call_timeout
        self._heard_at = 0.0
        #: Per partition, the offset after the last record handed out and handled here.
        self._handled: dict[TopicPartition, int] = {}
        #: Per partition, the offset after the turn handed out and not yet confirmed handled.
        self._given: dict[TopicPartition, int] = {}
        #: Handled offsets whose commit has not gone through yet.
        self._uncommitted: dict[TopicPartition, int] = {}
        #: Of those, the ones the group refused once: checked against its offset before retrying.
        self._refused: set[TopicPartition] = set()
        # Subscribed after start: start() then only connects, which fails fast and can be
        # retried, and the join is waited for where an outage can be noticed.
        self._joined = _Joined()
        self._consumer = clients.consumer(
            settings,
            group_id=group_id,
            client_id=f"turnlog-resumed-{uuid.uuid4().hex[:6]}",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
        )
        self._started = False
        self._stopped = False
        #: Opens sealed turns (``TURNLOG_SEAL``); a Kafka reader only once it meets one.
        self._keys = KeyRing(settings, self.topics)

    async def start(self) -> None:
        """Join the group, waiting out an unreachable broker (up to the outage budget)."""
        if self._started or self._stopped:
            return
        await prepare_wire(self._settings, self.topics)  # the registry wire's ids, if set
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                await self._consumer.start()
                break
            except BROKER_TROUBLE as exc:
                await asyncio.sleep(self.outage.failed(exc, began))
        self._started = True
        self._consumer.subscribe([self.topics.resumed], listener=self._joined)
        while not self._joined.event.is_set():
            try:
                await asyncio.wait_for(self._joined.event.wait(), self._probe_seconds)
            except TimeoutError:
                await self._probe()
        self._heard()

    async def stop(self) -> None:
        """Leave the group; a handled turn whose commit is still owed gets one bounded try."""
        if self._started and self._uncommitted and not self.outage.down:
            try:
                await asyncio.wait_for(self._commit_owed(), self._call_timeout)
            except _GIVE_UP as exc:
                owed = self._uncommitted
                log.warning("resumed turns: offsets %s left uncommitted: %s", owed, exc)
        self._started = False
        self._stopped = True
        await close_consumer(self._consumer)
        await self._keys.close()

    async def deliveries(self) -> AsyncIterator[Delivery]:
        await self.start()
        while not self._stopped:
            try:
                record = await self._next()
            except ConsumerStoppedError:
                return
            if self._stopped:
                return  # stopped during the fetch: its offset can no longer be committed
            tp = TopicPartition(record.topic, record.partition)
            if record.offset < self._handled.get(tp, 0):
                continue  # handed out and handled here before; its commit is owed, not lost
            try:
                event = decode(record.value) if record.value is not None else None
                if isinstance(event, TurnResumed) and event.sealed is not None:
                    event = await self._keys.open(event, record.partition)
            except ContentShredded as exc:
                # Its thread was forgotten: nothing of it is handed out, as of any record
                # that is not a turn.
                log.info("resumed turns: %s[%d]@%d skipped: %s", record.topic,
                         record.partition, record.offset, exc)  # fmt: skip
                event = None
            except DecodeError:
                event = None
            if isinstance(event, TurnResumed) or (
                self.include_expired and isinstance(event, PauseExpired)
            ):
                kind = "resumed" if isinstance(event, TurnResumed) else "expired"
                self.metrics.delivered.labels(kind).inc()
                trace = tracing.from_headers(getattr(record, "headers", None))
                self._given[tp] = record.offset + 1
                yield Delivery(
                    event, record.partition, record.offset, None if trace is None else str(trace)
                )
            elif not isinstance(event, PauseExpired):
                self.skipped += 1
                self.metrics.skipped.inc()
            # Reached only when the caller asks for the next item: its handling is done.
            self._given.pop(tp, None)
            self._handled[tp] = self._uncommitted[tp] = record.offset + 1
            await self._commit_owed()

    async def commit(self) -> None:
        """Mark the turns handed out so far as handled and commit their offsets now.

        For a loop that leaves after a turn: ``async for`` commits a turn only when it asks for
        the next one, so without this a ``break`` or ``return`` leaves the last turn to be
        delivered again (to this group's next reader). A commit the group refuses because it
        rebalanced stays owed, as in the loop.
        """
        for tp, offset in self._given.items():
            self._handled[tp] = self._uncommitted[tp] = offset
        self._given.clear()
        if self._uncommitted:
            await self._commit_owed()

    # -- riding out the broker ------------------------------------------------------------------

    def _heard(self) -> None:
        self._heard_at = asyncio.get_running_loop().time()
        self.outage.ok()

    async def _commit_owed(self) -> None:
        """Commit the owed offsets of the partitions held now, waiting out an outage.

        A commit refused because the group rebalanced stays owed: the next poll rejoins, and it
        is made after that -- unless the group's offset has meanwhile moved past it (another
        member held the partition and went further), which it must never be moved back from.
        """
        loop = asyncio.get_running_loop()
        while not self._stopped:
            held = self._consumer.assignment()
            offsets = {tp: o for tp, o in self._uncommitted.items() if tp in held}
            if not offsets:
                return
            began = loop.time()
            try:
                for tp in self._refused & offsets.keys():
                    group_at = await asyncio.wait_for(
                        self._consumer.committed(tp), self._call_timeout
                    )
                    self._refused.discard(tp)
                    if group_at is not None and group_at >= offsets[tp]:
                        del offsets[tp], self._uncommitted[tp]
                if offsets:
                    await asyncio.wait_for(self._consumer.commit(offsets), self._call_timeout)
            except _REBALANCED as exc:
                log.info(
                    "resumed turns: commit %s refused (%s); retried after the rejoin", offsets, exc
                )
                self._refused.update(offsets)
                self.metrics.commit_refusals.inc()
                return
            except BROKER_TROUBLE as exc:
                await asyncio.sleep(self.outage.failed(exc, began))
                continue
            self._heard()
            for tp, offset in offsets.items():
                if self._uncommitted.get(tp) == offset:
                    del self._uncommitted[tp]
            return

    async def _next(self) -> Any:
        """The next record. A fetch comes back empty whether the broker is idle or gone
        (aiokafka retries inside it), so a quiet iterator asks the broker itself."""
        while True:
            batch = await self._consumer.getmany(timeout_ms=500, max_records=1)
            for records in batch.values():
                if records:
                    self._heard()
                    return records[0]
            if self._uncommitted:
                await self._commit_owed()
            quiet = asyncio.get_running_loop().time() - self._heard_at
            if self.outage.down or quiet >= self._probe_seconds:
                await self._probe()

    async def _probe(self) -> None:
        """Ask the broker whether it is there; if not, count it and wait the backoff."""
        began = asyncio.get_running_loop().time()
        if await broker_reachable(self._consumer, self._call_timeout):
            self._heard()
        else:
            gone = BrokerUnavailable(f"no answer from {self._bootstrap}")
            await asyncio.sleep(self.outage.failed(gone, began))

    def __aiter__(self) -> AsyncIterator[TurnResumed | PauseExpired]:
        return self._events()

    async def _events(self) -> AsyncIterator[TurnResumed | PauseExpired]:
        async for delivery in self.deliveries():
            yield delivery.event


# -- one thread's turn -------------------------------------------------------------------------


class ResumedTurnTimeout(TurnlogError, TimeoutError):
    """No resumed turn of the thread (of the pause asked for) arrived within the timeout.

    Also a :class:`TimeoutError`, as :meth:`Turnlog.outcome`'s is: a request handler answers
    "not yet" to either. Nothing was taken by the wait: the turn, once resumed, is still there
    for the next call, and for every group reader.
    """

    def __init__(self, thread_id: str, timeout: float, *, wanted: str = "", why: str = "") -> None:
        super().__init__(
            f"no resumed turn of thread {thread_id!r}{wanted} within {timeout:g}s: "
            + (why or "is a worker running, and was the pause answered?")
        )
        self.thread_id = thread_id
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class _Wanted:
    """Which records of the thread's partition are the turn asked for."""

    thread_id: str
    token_id: str | None
    checkpoint_id: str | None
    include_expired: bool

    def __str__(self) -> str:
        named = [f"token {self.token_id!r}"] if self.token_id is not None else []
        named += [f"checkpoint {self.checkpoint_id!r}"] if self.checkpoint_id is not None else []
        return f" ({', '.join(named)})" if named else ""

    def event_of(self, key: bytes | None, value: bytes | None) -> TurnResumed | PauseExpired | None:
        """The record's event when it is one asked for. The key is the thread id: another
        thread's record is passed over without being decoded."""
        if value is None or (key is not None and key != self.thread_id.encode()):
            return None
        try:
            event = decode(value)
        except DecodeError:
            return None
        if not isinstance(event, TurnResumed | PauseExpired) or not (
            event.thread_id == self.thread_id
            and (self.token_id is None or self.token_id in tokens_of(event))
            and self.checkpoint_id in (None, event.checkpoint_id)
        ):
            return None
        return event


def tokens_of(event: TurnResumed | PauseExpired) -> tuple[str, ...]:
    """The token ids a resumed turn answers: its own, and for a pause of several calls every
    call's (the turn carries the token of the call answered last, and each call's in
    ``answers``) -- so whichever call's token a continuation holds finds the group's turn."""
    if isinstance(event, TurnResumed) and event.answers:
        return (event.token_id, *(str(a.get("token_id", "")) for a in event.answers))
    return (event.token_id,)


async def read_thread_turn(
    settings: Settings,
    topics: TopicSet,
    thread_id: str,
    *,
    token_id: str | None = None,
    checkpoint_id: str | None = None,
    since: datetime | None = None,
    include_expired: bool = False,
    timeout: float = 30.0,
) -> TurnResumed | PauseExpired:
    """The thread's resumed turn, read from the thread's partition alone, with no group.

    Which turn: the one of ``token_id`` (one pause's, resumed at most once; of a pause of
    several calls, any call's token finds the group's one turn), else the newest of
    the thread -- of ``checkpoint_id`` if given -- on the log when the read began, else the
    first to arrive. ``PauseExpired`` counts only with ``include_expired``. The read starts at
    the partition's first record written at ``since`` or later (less the deployment's clock
    leeway, ``token_leeway_seconds``, since the worker's clock wrote the time), else at its
    beginning: ``since`` bounds how much of the partition's retention a call reads.

    Nothing is committed or taken, so a second call for the same thread returns the same turn,
    and a group reader (:class:`ResumedTurns`) still gets every turn, this one included.
    :class:`ResumedTurnTimeout` when nothing asked for arrived in ``timeout`` seconds,
    :class:`BrokerUnavailable` when the broker did not answer in that time.
    """
    wanted = _Wanted(check_thread_id(thread_id), token_id, checkpoint_id, include_expired)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    consumer = clients.consumer(
        settings,
        client_id=f"turnlog-thread-turn-{uuid.uuid4().hex[:6]}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        # A fetch that finds nothing waits this long before the deadline is looked at again.
        fetch_max_wait_ms=200,
    )
    try:
        tp = await _thread_partition(consumer, settings, topics.resumed, wanted, deadline)
        if tp is None:
            why = f"there is no topic {topics.resumed} (no worker or pause has run here yet?)"
            raise ResumedTurnTimeout(thread_id, timeout, wanted=str(wanted), why=why)
        # The end first: a turn written between the two lookups is then at or past it, and read
        # (taken the other way round, a lookup finding nothing sought past that turn).
        end = (await consumer.end_offsets([tp]))[tp]
        if since is not None:
            leeway = timedelta(seconds=settings.token_leeway_seconds)
            at_ms = max(0, int((since - leeway).timestamp() * 1000))
            found_at = (await consumer.offsets_for_times({tp: at_ms}))[tp]
            consumer.seek(tp, min(found_at.offset, end) if found_at is not None else end)
        else:
            await consumer.seek_to_beginning(tp)
        newest: TurnResumed | PauseExpired | None = None
        expired_unasked = False
        while True:
            if newest is not None and await consumer.position(tp) >= end:
                # read to where the log was when the call began
                return await _opened(settings, topics, newest, tp.partition)
            left = deadline - loop.time()
            if left <= 0:
                break
            batch = await consumer.getmany(tp, timeout_ms=max(1, int(min(left, 0.5) * 1000)))
            for record in batch.get(tp, ()):
                event = wanted.event_of(record.key, record.value)
                if isinstance(event, PauseExpired) and not include_expired:
                    expired_unasked = True
                elif event is not None and (token_id is not None or record.offset >= end):
                    # the pause's one turn, or the first after the call began
                    return await _opened(settings, topics, event, tp.partition)
                elif event is not None:
                    newest = event
        if newest is not None:
            why = "the partition's records up to the read's start took longer than that"
            raise ResumedTurnTimeout(thread_id, timeout, wanted=str(wanted), why=why)
        if not await broker_reachable(consumer, 1.0):
            raise BrokerUnavailable(
                f"resumed turn of thread {thread_id!r}: no answer from "
                f"{settings.bootstrap_servers} within {timeout:g}s"
            )
        why = "its pause expired unanswered (include_expired=True returns the expiry)"
        raise ResumedTurnTimeout(
            thread_id, timeout, wanted=str(wanted), why=why if expired_unasked else ""
        )
    finally:
        await close_consumer(consumer)


async def _opened(
    settings: Settings, topics: TopicSet, event: TurnResumed | PauseExpired, partition: int
) -> TurnResumed | PauseExpired:
    return (
        event
        if isinstance(event, PauseExpired)
        else await opened(settings, topics, event, partition)
    )


async def _thread_partition(
    consumer: AIOKafkaConsumer, settings: Settings, topic: str, wanted: _Wanted, deadline: float
) -> TopicPartition | None:
    """Connect and assign the thread's partition of ``topic`` -- waiting, up to the deadline,
    for a broker that does not answer yet or a topic not created yet (a continuation may begin
    waiting before the deployment's first pause). ``None``: the topic never appeared."""
    loop = asyncio.get_running_loop()
    started = False
    last: BaseException | None = None
    while loop.time() < deadline:
        try:
            if not started:
                await asyncio.wait_for(consumer.start(), max(0.1, deadline - loop.time()))
                started = True
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:  # ask the broker again: the topic may have been created since
                await broker_reachable(consumer, max(0.1, deadline - loop.time()))
                partitions = consumer.partitions_for_topic(topic)
            if partitions:
                tp = TopicPartition(topic, partition_for(wanted.thread_id, len(partitions)))
                consumer.assign([tp])
                return tp
        except NOT_AUTHORIZED:
            raise
        except BROKER_TROUBLE as exc:
            if last is None:  # a refused login reads as "Unable to bootstrap": say which it is
                await clients.check_credentials(
                    settings, timeout=max(0.1, min(10.0, deadline - loop.time()))
                )
            last = exc
        await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))
    if not started:
        raise BrokerUnavailable(
            f"resumed turn of thread {wanted.thread_id!r}: {settings.bootstrap_servers} not "
            f"reached before the deadline{_last_error(last)}"
        )
    return None


def _last_error(exc: BaseException | None) -> str:
    return "" if exc is None else f"; last error: {type(exc).__name__}: {exc}"


# -- continuing a resumed turn -----------------------------------------------------------------


def answered_event(turn: TurnResumed) -> AskUserAnswered | None:
    """The answered record owed first on the typed surface (``ask_user`` with answers only)."""
    return turn.answered


async def resume_run(run: Callable[..., Awaitable[Any]], turn: TurnResumed, **options: Any) -> Any:
    """Continue through a blocking ``run(prompt, *, run_id, session_id, history, **options)``."""
    return await run(
        turn.prompt,
        run_id=turn.run_id,
        session_id=turn.session_id,
        history=history_dicts(turn),
        **options,
    )


def resume_stream(
    stream: Callable[..., AsyncIterator[Any]], turn: TurnResumed, **options: Any
) -> AsyncIterator[Any]:
    """Continue through a streaming callable; same arguments as :func:`resume_run`."""
    return stream(
        turn.prompt,
        run_id=turn.run_id,
        session_id=turn.session_id,
        history=history_dicts(turn),
        **options,
    )


async def resume_stream_typed(
    stream_typed: Callable[..., AsyncIterator[Any]], turn: TurnResumed, **options: Any
) -> AsyncIterator[Any]:
    """Continue through a typed stream; the answered record comes first, as callers expect."""
    answered = answered_event(turn)
    if answered is not None:
        yield answered
    events = resume_stream(stream_typed, turn, **options)
    try:
        async for event in events:
            yield event
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
