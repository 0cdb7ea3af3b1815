"""Forgetting a thread: a tombstone for every key it has on the compacted topics.

Compaction then removes the thread's records, and a store rebuilt afterwards holds nothing of
it. The keys are found by reading the thread's partition of each compacted topic rather than from
a local store, so forgetting works from any machine and misses no key a store never applied.
The resumed and rejections streams are not compacted; their records age out with retention.
"""

from __future__ import annotations

from aiokafka import AIOKafkaProducer, TopicPartition

from turnlog.errors import DecodeError
from turnlog.partitioning import partition_for, split_key
from turnlog.projections.reader import LogReader, Record
from turnlog.settings import Settings
from turnlog.topics import TopicSet


async def thread_keys(
    settings: Settings, topics: TopicSet, thread_id: str
) -> dict[str, set[bytes]]:
    """Every live key of ``thread_id`` on the compacted topics."""
    found: dict[str, set[bytes]] = {
        t: set() for t in (topics.pauses, topics.answers, topics.consumptions)
    }
    async with LogReader(settings.bootstrap_servers, client_id="turnlog-forget") as reader:
        partitions = await reader.partitions_of(topics.pauses)
        p = partition_for(thread_id, len(partitions))
        await reader.assign({TopicPartition(t, p): None for t in found})

        async def collect(records: list[Record] | tuple[Record, ...]) -> None:
            for record in records:
                if record.key is None:
                    continue
                try:
                    thread, _ = split_key(record.key)
                except DecodeError:
                    continue
                if thread != thread_id:
                    continue
                if record.value is None:
                    found[record.topic].discard(record.key)
                else:
                    found[record.topic].add(record.key)

        await reader.read_to_end(collect)  # type: ignore[arg-type]
    return found


async def forget_thread(settings: Settings, topics: TopicSet, thread_id: str) -> dict[str, int]:
    """Write the tombstones; returns how many per topic."""
    keys = await thread_keys(settings, topics, thread_id)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        partitions = len(await producer.partitions_for(topics.pauses))
        p = partition_for(thread_id, partitions)
        for topic, topic_keys in keys.items():
            for key in sorted(topic_keys):
                await producer.send(topic, None, key=key, partition=p)
        await producer.flush()
    finally:
        await producer.stop()
    return {topic: len(topic_keys) for topic, topic_keys in keys.items()}
