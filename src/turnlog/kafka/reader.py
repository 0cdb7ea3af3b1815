"""Reading assigned topic-partitions from known offsets, for projections and restores.

No consumer group: a projection decides for itself which partitions it reads and where it
starts (its own stored offsets), exactly as a changelog restore does. Always ``read_committed``:
a record of an aborted or still-open transaction must never reach a store, or a zombie's
half-written batch would become a fact.

Also what a long-running reader needs to ride out its broker: aiokafka never says that the
broker has gone -- a fetch just comes back empty, a commit or an offset lookup waits, a new
client fails to bootstrap -- so a reader probes with a metadata request when it has heard
nothing for a while, and :class:`BrokerOutage` turns the answers into one line when the broker
goes, one when it is back, and :class:`BrokerUnavailable` once the outage outlasts its budget.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from turnlog.errors import BrokerUnavailable, StoreError
from turnlog.kafka import clients
from turnlog.kafka.internals import (
    close_after_cancelled_stop,
    refresh_metadata,
    topic_unauthorized,
)
from turnlog.kafka.lifecycle import Lifecycle

#: What an unreachable broker raises from a client call (retried through an outage), as
#: opposed to a refusal or a bug. ``TimeoutError`` is a call that did not finish in time.
BROKER_TROUBLE: tuple[type[BaseException], ...] = (KafkaError, OSError, TimeoutError)
#: What the broker says when this principal may not do something, or is not who it claims:
#: no outage (a retry gets the same answer), so it is raised at once, never waited out.
NOT_AUTHORIZED: tuple[type[BaseException], ...] = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailedError,
    SaslAuthenticationFailed,
    AuthenticationFailedError,
)
#: The longest wait between two attempts to reach a broker that has gone.
MAX_BACKOFF_SECONDS = 2.0


class BrokerOutage:
    """One line when the broker goes, one when it is back, and a budget for how long it may be gone.

    ``failed`` is called for every attempt that could not reach the broker and returns how long
    to wait before the next (0.2 s doubling up to :data:`MAX_BACKOFF_SECONDS`); past the budget
    it raises :class:`BrokerUnavailable` instead. ``ok`` is called for every sign of life. Only
    the first failure and the first sign of life after it are logged: a reader retrying every
    two seconds for five minutes must not write 150 lines.

    ``never_reached``: the address has not answered this process yet, so the budget is the
    first-contact one (``setting`` names it) and the lines say so, with what plain connections
    to the servers found (``tried``, set by the caller) -- "connection refused" or "the name
    does not resolve" is the answer a person needs, not "unable to bootstrap".

    ``service``: the service waiting (a worker, the notifier, ...), which waits out a broker it
    never reached under the outage budget, not ready meanwhile; its line says so.
    """

    def __init__(
        self,
        budget_seconds: float,
        who: str,
        logger: logging.Logger,
        *,
        setting: str = "TURNLOG_BROKER_TIMEOUT",
        never_reached: bool = False,
        service: str | None = None,
    ) -> None:
        self.budget_seconds = budget_seconds
        self.who = who
        self.outages = 0
        self.setting = setting
        self.never_reached = never_reached
        self.service = service
        #: What plain connections to the bootstrap servers found, for the lines (first contact).
        self.tried: str | None = None
        self._log = logger
        self._since: float | None = None
        self._backoff = 0.0

    @property
    def down(self) -> bool:
        return self._since is not None

    def went(self, why: str, began: float | None = None) -> None:
        """Date the outage from ``began`` (default: now) and say so, once per outage."""
        if self._since is not None:
            return
        now = asyncio.get_running_loop().time()
        self._since = now if began is None else min(began, now)
        self.outages += 1
        if self.never_reached:
            tried = f"{self.tried}; " if self.tried else ""
            waits = (
                f"; the {self.service} waits it out as an outage, not ready meanwhile"
                if self.service is not None
                else ""
            )
            self._log.warning(
                "%s: broker unreachable, never reached yet (%s%s); trying for up to %gs (%s)%s",
                self.who,
                tried,
                why,
                round(self.budget_seconds, 1),
                self.setting,
                waits,
            )
            return
        self._log.warning(
            "%s: broker unreachable (%s); retrying for up to %.0fs",
            self.who,
            why,
            self.budget_seconds,
        )

    def failed(self, exc: BaseException, began: float | None = None) -> float:
        """``began``: when the failed attempt started (loop time), if it took a while -- a call
        that timed out -- so the outage is dated from then rather than from its timeout."""
        if isinstance(exc, NOT_AUTHORIZED):
            raise exc
        now = asyncio.get_running_loop().time()
        why = describe_error(exc)
        if self._since is None:
            self.went(why, began)
        elif now - self._since > self.budget_seconds:
            if self.never_reached:
                tried = f": {self.tried}" if self.tried else ""
                raise BrokerUnavailable(
                    f"{self.who}: never reached in {now - self._since:.0f}s "
                    f"({self.setting}={self.budget_seconds:g}){tried}; last error: {why}",
                    never_reached=True,
                ) from exc
            raise BrokerUnavailable(
                f"{self.who}: the broker has been unreachable for {now - self._since:.0f}s "
                f"(budget {self.budget_seconds:.0f}s, TURNLOG_BROKER_TIMEOUT); last error: {why}"
            ) from exc
        self._backoff = min(MAX_BACKOFF_SECONDS, max(0.2, self._backoff * 2))
        return self._backoff

    def ok(self) -> None:
        if self._since is not None:
            took = asyncio.get_running_loop().time() - self._since
            self._log.warning("%s: broker reachable again after %.1fs; continuing", self.who, took)
            self._since = None
        self._backoff = 0.0


_BOOTSTRAP_TUPLES = re.compile(r"(?<=Unable to bootstrap) from \[\(.*\)\]$")


def describe_error(exc: BaseException) -> str:
    """``Type: text`` of ``exc``, once (aiokafka's errors already start their text with it),
    without the address tuples of aiokafka's "Unable to bootstrap from [...]": the line names
    the address already."""
    name, text = type(exc).__name__, _BOOTSTRAP_TUPLES.sub("", str(exc))
    if not text:
        return name
    return text if text.startswith(f"{name}: ") or text == name else f"{name}: {text}"


async def broker_reachable(consumer: AIOKafkaConsumer, timeout: float) -> bool:
    """Whether a metadata request through ``consumer``'s client is answered within ``timeout``.

    The cheapest question a broker answers, and one aiokafka reports instead of retrying: its
    metadata update returns False when no known broker could be reached.
    """
    try:
        return await asyncio.wait_for(refresh_metadata(consumer), timeout)
    except BROKER_TROUBLE:
        return False


async def close_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, finished even when the broker is unreachable.

    aiokafka 0.14's fetcher cancels its in-flight fetch tasks on close and awaits them; a task
    cancelled while it sleeps off a failed fetch (an unreachable broker) re-raises the
    ``CancelledError`` out of ``stop()``, leaving the rest of the fetcher and the client's
    connections open. That error is not ours to propagate unless this task is being cancelled.
    """
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        await close_after_cancelled_stop(consumer)


class Record(Protocol):
    """The fields of a consumed Kafka record turnlog reads (aiokafka ships no type hints)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


ApplyBatch = Callable[[Sequence[Record]], Awaitable[None]]


class LogReader(Lifecycle):
    def __init__(
        self,
        bootstrap_servers: clients.Target,
        *,
        client_id: str = "turnlog-reader",
        max_poll_records: int = 2000,
        fetch_max_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        self._consumer = clients.consumer(
            bootstrap_servers,
            client_id=client_id,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_poll_records=max_poll_records,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=8 * 1024 * 1024,
            # The broker answers one request per connection at a time, and an idle fetch waits
            # fetch_max_wait_ms: at the default (500) every end_offsets/position call of a
            # restore queued behind it, so each restore took about a second.
            fetch_max_wait_ms=20,
        )
        self._started = False
        self._assigned: list[TopicPartition] = []

    async def start(self) -> None:
        if not self._started:
            await self._consumer.start()
            self._started = True

    async def stop(self) -> None:
        # Also after a start that failed half-way (the broker went): the client it opened
        # must be closed, and an unreachable broker must not make stopping raise.
        self._started = False
        await close_consumer(self._consumer)

    async def reachable(self, timeout: float = 10.0) -> bool:
        """Whether the broker answers a metadata request within ``timeout`` (the outage probe)."""
        return await broker_reachable(self._consumer, timeout)

    async def partitions_of(self, topic: str, timeout: float = 30.0) -> list[int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        asked = False
        while True:
            found = self._consumer.partitions_for_topic(topic)
            if found:
                return sorted(found)
            if not asked:
                # Asked once; a broker that cannot answer now leaves it to the wait below.
                try:
                    denied = await asyncio.wait_for(
                        topic_unauthorized(self._consumer, topic),
                        max(0.1, min(5.0, deadline - loop.time())),
                    )
                    asked = True
                except (KafkaError, OSError, TimeoutError):
                    denied = False
                if denied:
                    raise TopicAuthorizationFailedError(topic)
            if loop.time() > deadline:
                raise BrokerUnavailable(f"no metadata for topic {topic} after {timeout:.0f}s")
            await refresh_metadata(self._consumer)
            await asyncio.sleep(0.1)

    async def assign(self, start: Mapping[TopicPartition, int | None]) -> None:
        """Read exactly these partitions, each from its stored next offset (``None``: earliest).

        A stored offset beyond the partition's end means the store belongs to another log (the
        topic was deleted and re-created, or the wrong state directory) -- said loudly rather
        than silently reading nothing.
        """
        tps = list(start)
        self._assigned = tps
        self._consumer.assign(tps)
        if not tps:
            return
        ends = await self._consumer.end_offsets(tps)
        for tp in tps:
            offset = start[tp]
            if offset is None:
                await self._consumer.seek_to_beginning(tp)
                continue
            if offset > ends[tp]:
                raise StoreError(
                    f"the store has applied {tp.topic}[{tp.partition}] up to offset {offset}, "
                    f"beyond the partition's end {ends[tp]}: this state directory was built from "
                    "another log; rebuild it"
                )
            self._consumer.seek(tp, offset)

    async def end_offsets(
        self, tps: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Last stable offsets (read_committed): the end a restore must reach."""
        targets = list(tps) if tps is not None else self._assigned
        if not targets:
            return {}
        ends: dict[TopicPartition, int] = await self._consumer.end_offsets(targets)
        return ends

    async def position(self, tp: TopicPartition) -> int:
        pos: int = await self._consumer.position(tp)
        return pos

    async def poll(self, timeout_ms: int = 200) -> list[Record]:
        """One fetch across the assigned partitions, in offset order within each partition."""
        batch = await self._consumer.getmany(timeout_ms=timeout_ms)
        records: list[Record] = []
        for messages in batch.values():
            records.extend(messages)
        return records

    async def read_to_end(
        self,
        apply: ApplyBatch,
        *,
        ends: Mapping[TopicPartition, int] | None = None,
        timeout: float = 300.0,
    ) -> int:
        """Apply every committed record up to ``ends`` (default: the ends now). Returns the count.

        Completion is decided by positions, never by a quiet period: a slow broker makes this
        wait, it does not make it stop early.
        """
        targets = dict(ends) if ends is not None else await self.end_offsets()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        applied = 0
        while True:
            behind = [tp for tp, end in targets.items() if await self.position(tp) < end]
            if not behind:
                return applied
            if loop.time() > deadline:
                raise BrokerUnavailable(
                    f"restore did not reach the end of {behind} within {timeout:.0f}s"
                )
            records = await self.poll(timeout_ms=200)
            if records:
                await apply(records)
                applied += len(records)
