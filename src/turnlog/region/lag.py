"""How far region B stands behind region A: what a loss of A now would leave unmirrored.

Offsets cannot be compared across the clusters (each numbers its own records, and each
transaction's markers take offsets of their own), but MirrorMaker keeps every record's
timestamp. So, per partition of the five topics: B's newest record's timestamp ``t``; A's first
record after ``t`` (``ListOffsets`` by time) is the oldest not yet mirrored, and everything from
it to A's end is behind. Two figures come out:

- ``behind``: A's committed records from that one to its end;
- ``lag_seconds``: now minus that record's timestamp -- how old the oldest unmirrored record
  is, which is the window a loss now would open (0 when B has everything).

Read from outside MirrorMaker, with two plain clients, so it measures what B's workers would
see, and it is what ``turnlog region lag`` prints and serves as ``turnlog_region_mirror_lag_*``.
Its one assumption: record timestamps grow along a partition (turnlog's producers stamp
``CreateTime`` from clocks that agree to well under a second).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnlog.errors import BrokerUnavailable
from turnlog.kafka import clients
from turnlog.kafka.internals import refresh_metadata
from turnlog.kafka.reader import close_consumer
from turnlog.kafka.topics import TopicSet

#: How far back from a partition's end B's newest record is looked for, per step.
_TAIL = 64


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    #: A's offsets from the oldest unmirrored record to A's end (0: caught up)
    behind: int
    #: now minus the oldest unmirrored record's timestamp, seconds (0: caught up)
    lag_seconds: float
    #: B's newest record's timestamp (ms), None when B's partition holds none
    newest_b_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "behind": self.behind,
            "lag_seconds": round(self.lag_seconds, 3),
            "newest_b_ms": self.newest_b_ms,
        }


def _consumer(target: clients.Target) -> AIOKafkaConsumer:
    return clients.consumer(
        target,
        client_id="turnlog-region-lag",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
    )


async def _partitions(
    consumer: AIOKafkaConsumer, names: Sequence[str], timeout: float
) -> list[TopicPartition]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    tps: list[TopicPartition] = []
    for topic in names:
        while not consumer.partitions_for_topic(topic):
            if loop.time() > deadline:
                raise BrokerUnavailable(f"no metadata for topic {topic}: does it exist?")
            await refresh_metadata(consumer)
            await asyncio.sleep(0.1)
        tps += [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    return tps


async def _read_ranges(
    consumer: AIOKafkaConsumer, ranges: Mapping[TopicPartition, tuple[int, int]], deadline: float
) -> dict[TopicPartition, list[int]]:
    """The timestamps of the committed records in ``[low, high)`` of each partition, all read
    side by side (one consumer, every partition assigned at once)."""
    stamps: dict[TopicPartition, list[int]] = {tp: [] for tp in ranges}
    todo = {tp: span for tp, span in ranges.items() if span[0] < span[1]}
    if not todo:
        return stamps
    consumer.assign(list(todo))
    for tp, (low, _) in todo.items():
        consumer.seek(tp, low)
    loop = asyncio.get_running_loop()
    while True:
        behind = [tp for tp, (_, high) in todo.items() if await consumer.position(tp) < high]
        if not behind:
            return stamps
        if loop.time() > deadline:
            tp = behind[0]
            raise BrokerUnavailable(f"could not read {tp.topic}[{tp.partition}] in time")
        batch = await consumer.getmany(*behind, timeout_ms=200)
        for tp, records in batch.items():
            high = todo[tp][1]
            stamps[tp].extend(int(r.timestamp or 0) for r in records if r.offset < high)


async def newest_timestamps(
    consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition], timeout: float
) -> dict[TopicPartition, int | None]:
    """Each partition's newest committed record's timestamp, read from its tail backwards (a
    tail of transaction markers only is looked behind, further each time)."""
    deadline = asyncio.get_running_loop().time() + timeout
    starts = await consumer.beginning_offsets(list(tps))
    ends = await consumer.end_offsets(list(tps))
    found: dict[TopicPartition, int | None] = dict.fromkeys(tps)
    spans = {tp: (max(starts[tp], ends[tp] - _TAIL), ends[tp]) for tp in tps}
    depth = _TAIL
    while spans:
        read = await _read_ranges(consumer, spans, deadline)
        for tp, stamps in read.items():
            if stamps:
                found[tp] = max(stamps)
        depth *= 4
        spans = {
            tp: (max(starts[tp], low - depth), low)
            for tp, (low, _) in spans.items()
            if found[tp] is None and low > starts[tp]
        }
    return found


async def mirror_lag(
    source: clients.Target, target: clients.Target, topics: TopicSet, *, timeout: float = 30.0
) -> list[PartitionLag]:
    """Per partition of the five topics, how far ``target`` (B) stands behind ``source`` (A)."""
    names = [spec.name for spec in topics.specs()]
    a, b = _consumer(source), _consumer(target)
    try:
        await asyncio.gather(a.start(), b.start())
        tps_b = await _partitions(b, names, timeout)
        tps_a = await _partitions(a, names, timeout)
        newest = await newest_timestamps(b, tps_b, timeout)
        ends_a = await a.end_offsets(tps_a)
        after = await a.offsets_for_times({tp: (newest.get(tp) or -1) + 1 for tp in tps_a})
        spans = {tp: (first.offset, ends_a[tp]) for tp, first in after.items() if first is not None}
        deadline = asyncio.get_running_loop().time() + timeout
        read = await _read_ranges(a, spans, deadline)
        now = time.time()
        lags = []
        for tp in tps_a:
            # Read, not counted from offsets: a transaction's commit marker is stamped after its
            # records, so the first offset after B's newest is often a marker, nothing behind.
            b_newest = newest.get(tp)
            stamps = [t for t in read.get(tp, []) if b_newest is None or t > b_newest]
            lag = max(0.0, now - min(stamps) / 1000) if stamps else 0.0
            lags.append(PartitionLag(tp.topic, tp.partition, len(stamps), lag, b_newest))
        return lags
    finally:
        await asyncio.gather(close_consumer(a), close_consumer(b))


def worst(lags: Sequence[PartitionLag]) -> tuple[int, float]:
    """The records behind in all, and the largest lag in seconds."""
    return sum(x.behind for x in lags), max((x.lag_seconds for x in lags), default=0.0)
