"""The checkpoint projection: pauses and consumptions, folded into the local store.

Each fetched batch becomes one atomic store write holding both the facts and the next offset of
every partition it touched, so a crash at any moment leaves data and offsets agreeing: a restart
continues from the stored offsets and applies nothing twice. Bytes that are not a turnlog record
are counted, logged with their partition and offset, and skipped -- one bad record on a topic
must never stop the projection of everything behind it.

A projector rides out its broker: while the broker is unreachable it keeps retrying with
backoff, says so once when the broker goes and once when it is back, and continues from the
positions it had -- the consumer's positions, like the store's offsets, do not move while
nothing is fetched, so nothing is skipped and nothing applied twice. Only an outage longer than
its budget (``Settings.broker_timeout_seconds``) ends it, with :class:`BrokerUnavailable`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from turnlog.contracts.events import PauseRecorded, TokenConsumed
from turnlog.contracts.ledger import LedgerEntry
from turnlog.errors import BrokerUnavailable, DecodeError
from turnlog.kafka import clients
from turnlog.kafka.lifecycle import Lifecycle
from turnlog.kafka.partitioning import split_key
from turnlog.kafka.reader import BROKER_TROUBLE, BrokerOutage, LogReader, Record
from turnlog.kafka.topics import TopicSet
from turnlog.observability.metrics import projector_metrics
from turnlog.projections.pending import report_pending
from turnlog.projections.store import Batch, Store
from turnlog.settings import Settings
from turnlog.wire.codec import decode

log = logging.getLogger(__name__)

T = TypeVar("T")
_LAG_EVERY = 5.0  # seconds between the follow loop's lag reports

#: The outage budget when none is given: the settings' default.
DEFAULT_BROKER_TIMEOUT = Settings().broker_timeout_seconds


@dataclass
class ApplyStats:
    applied: int = 0
    skipped: int = 0
    skipped_at: list[tuple[str, int, int, str]] = field(default_factory=list)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class StoreApplier:
    """Turns records of the pauses and consumptions topics into store changes."""

    def __init__(self, store: Store, topics: TopicSet) -> None:
        self.store = store
        self.topics = topics
        self.stats = ApplyStats()

    async def apply(self, records: Sequence[Record]) -> None:
        self.apply_now(records)

    def apply_now(self, records: Iterable[Record]) -> None:
        ends: dict[tuple[str, int], int] = {}
        with self.store.batch() as batch:
            for record in records:
                self._apply_one(batch, record)
                ends[record.topic, record.partition] = record.offset + 1
            # The same atomic batch: one offset per partition, the last one applied.
            for (topic, partition), end in ends.items():
                batch.set_offset(topic, partition, end)

    def _apply_one(self, batch: Batch, record: Record) -> None:
        try:
            if record.topic == self.topics.pauses:
                self._pause(batch, record)
            elif record.topic == self.topics.consumptions:
                self._consumption(batch, record)
            else:
                raise DecodeError("unexpected_topic", f"{record.topic} is not projected here")
        except (DecodeError, ValueError) as exc:
            self.stats.skipped += 1
            where = (record.topic, record.partition, record.offset, str(exc))
            if len(self.stats.skipped_at) < 1000:
                self.stats.skipped_at.append(where)
            log.warning(
                "skipping %s[%d]@%d: %s", record.topic, record.partition, record.offset, exc
            )
            return
        self.stats.applied += 1

    def _pause(self, batch: Batch, record: Record) -> None:
        if record.value is None:
            if record.key is None:
                raise DecodeError("tombstone_without_key", "a pauses tombstone must have a key")
            thread_id, checkpoint_id = split_key(record.key)
            batch.delete_pause(thread_id, checkpoint_id)
            return
        pause = decode(record.value, PauseRecorded)
        cp = pause.checkpoint
        batch.put_pause(
            cp.thread_id,
            cp.checkpoint_id,
            cp.sequence,
            record.value,
            token_id=pause.token_id,
            expires_at_ms=_ms(pause.expires_at),
        )

    def _consumption(self, batch: Batch, record: Record) -> None:
        if record.value is None:
            if record.key is None:
                raise DecodeError("tombstone_without_key", "a consumptions tombstone needs a key")
            thread_id, token_id = split_key(record.key)
            batch.delete_consumption(thread_id, token_id)
            return
        consumed = decode(record.value, TokenConsumed)
        batch.put_consumption(
            consumed.thread_id, consumed.token_id, consumed.outcome, consumed.answer_id
        )

    # -- reads used by the resume worker --------------------------------------------------------

    def pause(self, token_id: str) -> PauseRecorded | None:
        info = self.store.pause_for_token(token_id)
        if info is None:
            return None
        return decode(info.value, PauseRecorded)

    def ledger(self, token_id: str) -> LedgerEntry | None:
        return self.store.ledger(token_id)

    def expired(self, now: datetime) -> list[PauseRecorded]:
        found = []
        for open_pause in self.store.expired(_ms(now)):
            pause = self.pause(open_pause.token_id)
            if pause is not None:
                found.append(pause)
        return found

    def record_consumptions(self, spent: Mapping[str, LedgerEntry]) -> None:
        """What a committed transaction consumed; written after the commit, never before."""
        if not spent:
            return
        with self.store.batch() as batch:
            for token_id, entry in spent.items():
                batch.put_consumption(entry.thread_id, token_id, entry.outcome, entry.answer_id)


@dataclass(frozen=True, slots=True)
class Progress:
    applied: int
    remaining: int
    rate: float  # records per second since the start

    @property
    def eta_seconds(self) -> float | None:
        return self.remaining / self.rate if self.rate > 0 else None


class CheckpointProjector(Lifecycle):
    """Follows pauses and consumptions (read_committed) into a store.

    ``partitions`` limits the projection to some partitions (a worker owns only some); by default
    every partition of the topics is projected. ``broker_timeout`` is how long an unreachable
    broker is waited for (pass ``settings.broker_timeout_seconds``); ``probe_seconds`` how long
    the projector may hear nothing before it asks the broker whether it is still there.
    """

    def __init__(
        self,
        bootstrap_servers: clients.Target,
        store: Store,
        topics: TopicSet,
        *,
        partitions: Iterable[int] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        broker_timeout: float = DEFAULT_BROKER_TIMEOUT,
        probe_seconds: float = 1.0,
        call_timeout: float = 10.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.applier = StoreApplier(store, topics)
        #: Prometheus collectors on ``registry`` (turnlog's own registry by default).
        self.metrics = projector_metrics(registry)
        #: True once a :meth:`catch_up` reached the ends of the topics.
        self.ready = False
        self._lag_at = 0.0  # when the lag was last reported while following
        self.outage = BrokerOutage(broker_timeout, "projector", log)
        self._bootstrap = clients.connection(bootstrap_servers).bootstrap_servers
        self._partitions = None if partitions is None else sorted(set(partitions))
        self._reader = LogReader(bootstrap_servers, client_id="turnlog-projector")
        self._on_progress = on_progress
        self._probe_seconds = probe_seconds
        self._call_timeout = call_timeout
        self._heard_at = 0.0
        self._stop = asyncio.Event()

    @property
    def stats(self) -> ApplyStats:
        return self.applier.stats

    async def start(self) -> None:
        """Connect and position every partition at the store's offsets, waiting out an outage."""
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                await asyncio.wait_for(self._start_once(), self._call_timeout * 4)
                break
            except BROKER_TROUBLE as exc:
                await self._wait_out(exc, began)
        self._heard()

    async def _start_once(self) -> None:
        await self._reader.start()
        parts = self._partitions
        if parts is None:
            parts = await self._reader.partitions_of(self.topics.pauses)
        offsets = self.store.offsets()
        start: dict[TopicPartition, int | None] = {}
        for topic in (self.topics.pauses, self.topics.consumptions):
            for p in parts:
                start[TopicPartition(topic, p)] = offsets.get((topic, p))
        await self._reader.assign(start)

    async def stop(self) -> None:
        self._stop.set()
        await self._reader.stop()

    def request_stop(self) -> None:
        self._stop.set()

    async def catch_up(self, timeout: float = 600.0) -> int:
        """Apply everything committed up to the ends as of now; report progress as it goes.

        Completion is decided by positions, never by a quiet period. ``timeout`` bounds the
        whole catch-up; an outage inside it is waited out (within the outage budget).
        """
        ends = await self._broker(self._reader.end_offsets)
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        total = 0
        while True:
            positions = {tp: await self._position(tp) for tp in ends}
            self._report_lag(ends, positions)
            behind = [tp for tp, end in ends.items() if positions[tp] < end]
            if not behind:
                self.ready = True
                self.metrics.caught_up.set(1)
                report_pending(self.metrics, self.applier.store)
                return total
            if loop.time() > deadline:
                raise BrokerUnavailable(
                    f"catch-up did not reach the end of {behind} within {timeout:.0f}s"
                )
            records = await self._poll(200)
            if not records:
                continue
            self._apply(records)
            total += len(records)
            if self._on_progress is not None:
                remaining = 0
                for tp, end in ends.items():
                    remaining += max(0, end - await self._position(tp))
                elapsed = max(time.monotonic() - started, 1e-6)
                self._on_progress(Progress(total, remaining, total / elapsed))

    async def follow(self, poll_ms: int = 200) -> None:
        """Apply new records as they are committed, until :meth:`request_stop`.

        Returns only when asked to; raises :class:`BrokerUnavailable` when the broker stayed
        unreachable for longer than the outage budget.
        """
        while not self._stop.is_set():
            records = await self._poll(poll_ms)
            if records:
                self._apply(records)
            now = asyncio.get_running_loop().time()
            if now - self._lag_at >= _LAG_EVERY and not self.outage.down:
                self._lag_at = now
                ends = await self._broker(self._reader.end_offsets)
                self._report_lag(ends, {tp: await self._position(tp) for tp in ends})
                report_pending(self.metrics, self.applier.store)

    def _apply(self, records: Sequence[Record]) -> None:
        skipped = self.applier.stats.skipped
        self.applier.apply_now(records)
        self.metrics.skipped.inc(self.applier.stats.skipped - skipped)
        for topic, n in collections.Counter(r.topic for r in records).items():
            self.metrics.applied.labels(self._role(topic)).inc(n)

    def _role(self, topic: str) -> str:
        return "pauses" if topic == self.topics.pauses else "consumptions"

    def _report_lag(
        self, ends: Mapping[TopicPartition, int], at: Mapping[TopicPartition, int]
    ) -> None:
        for tp, end in ends.items():
            self.metrics.lag.labels(self._role(tp.topic), str(tp.partition)).set(end - at[tp])

    # -- riding out the broker ------------------------------------------------------------------

    def _heard(self) -> None:
        self._heard_at = asyncio.get_running_loop().time()
        self.outage.ok()

    async def _wait_out(self, exc: BaseException, began: float | None = None) -> None:
        """Count a failed attempt (raising past the budget) and wait its backoff, or less if
        a stop is requested."""
        delay = self.outage.failed(exc, began)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay)

    async def _broker(self, call: Callable[[], Awaitable[T]], *, remote: bool = True) -> T:
        """One broker call, bounded in time and repeated until the broker answers it.

        ``remote=False``: a call that is usually answered locally (a known position), so its
        success says nothing about the broker and must not end an outage.
        """
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                result = await asyncio.wait_for(call(), self._call_timeout)
            except BROKER_TROUBLE as exc:
                await self._wait_out(exc, began)
                continue
            if remote:
                self._heard()
            return result

    async def _position(self, tp: TopicPartition) -> int:
        # Known locally once a partition is positioned; a lookup only after a reset.
        return await self._broker(lambda: self._reader.position(tp), remote=False)

    async def _poll(self, poll_ms: int) -> list[Record]:
        """One fetch. A fetch says nothing about the broker when it comes back empty (aiokafka
        retries an unreachable broker inside it), so a quiet projector asks the broker itself."""
        records = await self._reader.poll(timeout_ms=poll_ms)
        if records:
            self._heard()
            return records
        now = asyncio.get_running_loop().time()
        if self.outage.down or now - self._heard_at >= self._probe_seconds:
            if await self._reader.reachable(self._call_timeout):
                self._heard()
            else:
                gone = BrokerUnavailable(f"no answer from {self._bootstrap}")
                await self._wait_out(gone, now)
        return []


async def rebuild(
    bootstrap_servers: clients.Target,
    state_dir: Path,
    topics: TopicSet,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    broker_timeout: float = DEFAULT_BROKER_TIMEOUT,
) -> str:
    """Drop the store and replay the compacted topics from the earliest offsets; its digest.

    An outage during the replay is waited out for up to ``broker_timeout`` seconds."""
    if state_dir.exists():  # noqa: ASYNC240 - once, before anything runs
        await asyncio.to_thread(shutil.rmtree, state_dir)
    store = Store.open(state_dir)
    try:
        async with CheckpointProjector(
            bootstrap_servers,
            store,
            topics,
            on_progress=on_progress,
            broker_timeout=broker_timeout,
        ) as projector:
            await projector.catch_up()
        return store.digest()
    finally:
        store.close()
