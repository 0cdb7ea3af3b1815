"""Reading assigned topic-partitions from known offsets, for projections and restores.

No consumer group: a projection decides for itself which partitions it reads and where it
starts (its own stored offsets), exactly as a changelog restore does. Always ``read_committed``:
a record of an aborted or still-open transaction must never reach a store, or a zombie's
half-written batch would become a fact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnlog.errors import BrokerUnavailable, StoreError


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


class LogReader:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "turnlog-reader",
        max_poll_records: int = 2000,
        fetch_max_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
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
        if self._started:
            self._started = False
            await self._consumer.stop()

    async def __aenter__(self) -> LogReader:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def partitions_of(self, topic: str, timeout: float = 30.0) -> list[int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = self._consumer.partitions_for_topic(topic)
            if found:
                return sorted(found)
            if loop.time() > deadline:
                raise BrokerUnavailable(f"no metadata for topic {topic} after {timeout:.0f}s")
            await self._consumer._client.force_metadata_update()
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
