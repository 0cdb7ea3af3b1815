"""The checkpoint projection: pauses and consumptions, folded into the local store.

Each fetched batch becomes one atomic store write holding both the facts and the next offset of
every partition it touched, so a crash at any moment leaves data and offsets agreeing: a restart
continues from the stored offsets and applies nothing twice. Bytes that are not a turnlog record
are counted, logged with their partition and offset, and skipped -- one bad record on a topic
must never stop the projection of everything behind it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from aiokafka import TopicPartition

from turnlog.codec import decode
from turnlog.contracts.events import PauseRecorded, TokenConsumed
from turnlog.errors import DecodeError
from turnlog.partitioning import split_key
from turnlog.projections.reader import LogReader, Record
from turnlog.projections.store import Batch, LedgerEntry, Store
from turnlog.topics import TopicSet

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Spent:
    """A token's final record, as the store keeps it (thread, outcome, answer)."""

    thread_id: str
    outcome: str
    answer_id: str


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

    def record_consumptions(self, spent: Mapping[str, Spent]) -> None:
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


class CheckpointProjector:
    """Follows pauses and consumptions (read_committed) into a store.

    ``partitions`` limits the projection to some partitions (a worker owns only some); by default
    every partition of the topics is projected.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        store: Store,
        topics: TopicSet,
        *,
        partitions: Iterable[int] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.applier = StoreApplier(store, topics)
        self._partitions = None if partitions is None else sorted(set(partitions))
        self._reader = LogReader(bootstrap_servers, client_id="turnlog-projector")
        self._on_progress = on_progress
        self._stop = asyncio.Event()

    @property
    def stats(self) -> ApplyStats:
        return self.applier.stats

    async def start(self) -> None:
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

    async def __aenter__(self) -> CheckpointProjector:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def request_stop(self) -> None:
        self._stop.set()

    async def catch_up(self, timeout: float = 600.0) -> int:
        """Apply everything committed up to the ends as of now; report progress as it goes."""
        ends = await self._reader.end_offsets()
        started = time.monotonic()
        total = 0

        async def apply(records: Sequence[Record]) -> None:
            nonlocal total
            self.applier.apply_now(records)
            total += len(records)
            if self._on_progress is not None:
                remaining = 0
                for tp, end in ends.items():
                    remaining += max(0, end - await self._reader.position(tp))
                elapsed = max(time.monotonic() - started, 1e-6)
                self._on_progress(Progress(total, remaining, total / elapsed))

        await self._reader.read_to_end(apply, ends=ends, timeout=timeout)
        return total

    async def follow(self, poll_ms: int = 200) -> None:
        """Apply new records as they are committed, until :meth:`request_stop`."""
        while not self._stop.is_set():
            records = await self._reader.poll(timeout_ms=poll_ms)
            if records:
                self.applier.apply_now(records)


async def rebuild(
    bootstrap_servers: str,
    state_dir: Path,
    topics: TopicSet,
    *,
    on_progress: Callable[[Progress], None] | None = None,
) -> str:
    """Drop the store and replay the compacted topics from the earliest offsets; its digest."""
    if state_dir.exists():  # noqa: ASYNC240 - once, before anything runs
        await asyncio.to_thread(shutil.rmtree, state_dir)
    store = Store.open(state_dir)
    try:
        async with CheckpointProjector(
            bootstrap_servers, store, topics, on_progress=on_progress
        ) as projector:
            await projector.catch_up()
        return store.digest()
    finally:
        store.close()
