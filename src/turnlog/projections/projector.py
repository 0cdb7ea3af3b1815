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
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from turnlog.errors import BrokerUnavailable
from turnlog.kafka import clients
from turnlog.kafka.lifecycle import Lifecycle
from turnlog.kafka.reader import BROKER_TROUBLE, BrokerOutage, LogReader, Record
from turnlog.kafka.registry import prepare_wire
from turnlog.kafka.topics import TopicSet
from turnlog.observability.metrics import projector_metrics
from turnlog.projections.applier import ApplyStats, StoreApplier
from turnlog.projections.pending import report_pending
from turnlog.projections.store import Store
from turnlog.settings import Settings

__all__ = [
    "DEFAULT_BROKER_TIMEOUT",
    "ApplyStats",
    "CheckpointProjector",
    "Progress",
    "StoreApplier",
    "rebuild",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
_LAG_EVERY = 5.0  # seconds between the follow loop's lag reports

#: Records per fetch, hence per store batch, in a rebuild: fewer, larger batches (a few tens of
#: MB of pauses in memory at once) for a load nobody reads while it runs.
_REBUILD_BATCH = 10_000

#: The outage budget when none is given: the settings' default.
DEFAULT_BROKER_TIMEOUT = Settings().broker_timeout_seconds


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
    ``max_batch`` bounds the records of one fetch, hence of one store batch.
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
        max_batch: int = 2000,
    ) -> None:
        self.store = store
        self.topics = topics
        # A forgotten thread leaves no byte in the projection's files either; the inbox,
        # following it as a secondary, opens it again after each scrub.
        self.applier = StoreApplier(store, topics, scrub_forgotten=True)
        #: Prometheus collectors on ``registry`` (turnlog's own registry by default).
        self.metrics = projector_metrics(registry)
        #: True once a :meth:`catch_up` reached the ends of the topics.
        self.ready = False
        self._lag_at = 0.0  # when the lag was last reported while following
        self.outage = BrokerOutage(broker_timeout, "projector", log)
        self._bootstrap = clients.connection(bootstrap_servers).bootstrap_servers
        self._target = bootstrap_servers
        self._partitions = None if partitions is None else sorted(set(partitions))
        self._reader = LogReader(
            bootstrap_servers, client_id="turnlog-projector", max_poll_records=max_batch
        )
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
        if isinstance(self._target, Settings):  # the registry wire's ids, if one is set
            await prepare_wire(self._target, self.topics)
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

    async def catch_up(self, timeout: float = 600.0, *, gauges: bool = True) -> int:
        """Apply everything committed up to the ends as of now; report progress as it goes.

        Completion is decided by positions, never by a quiet period. ``timeout`` bounds the
        whole catch-up; an outage inside it is waited out (within the outage budget).
        ``gauges=False`` leaves the pending-pause gauges alone (a rebuild: no projector follows
        the store it makes, and finding the oldest pause reads thousands of them).
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
                if gauges:
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
    # A new store filled from the log: written in bulk (see Store.open), in bigger fetches.
    store = Store.open(state_dir, bulk=True)
    try:
        async with CheckpointProjector(
            bootstrap_servers,
            store,
            topics,
            on_progress=on_progress,
            broker_timeout=broker_timeout,
            max_batch=_REBUILD_BATCH,
        ) as projector:
            await projector.catch_up(gauges=False)
        return store.digest()
    finally:
        store.close()
