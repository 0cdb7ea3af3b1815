"""Small helpers for integration tests: read a topic to its end, poll for a condition."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord


async def _partitions_of(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    partitions = consumer.partitions_for_topic(topic)
    if partitions is None:
        await consumer._client.force_metadata_update()
        partitions = consumer.partitions_for_topic(topic) or set()
    return [TopicPartition(topic, p) for p in sorted(partitions)]


async def read_to_end(
    bootstrap: str,
    topic: str,
    *,
    isolation_level: str = "read_committed",
    timeout: float = 30.0,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` from the beginning up to its end offsets at call time.

    The loop ends on position (every partition reached its end offset), never on a quiet period,
    so a slow broker makes the helper wait rather than return too little.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = await _partitions_of(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[ConsumerRecord[bytes, bytes]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                break
            if loop.time() > deadline:
                raise TimeoutError(f"{topic}: reached {positions}, ends {ends}")
            batch = await consumer.getmany(*tps, timeout_ms=200)
            for messages in batch.values():
                records.extend(messages)
        return records
    finally:
        await consumer.stop()


async def eventually(
    check: Callable[[], Awaitable[Any]], *, timeout: float = 30.0, interval: float = 0.1
) -> Any:
    """Poll ``check`` until it returns a truthy value; fail with the last value at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")


async def wait_until_consumed(
    bootstrap: str, group: str, topic: str, *, timeout: float = 60.0
) -> dict[int, int]:
    """Wait until ``group`` has committed every partition of ``topic`` up to its end offset.

    This is how a test knows a worker has *processed* everything published (duplicates and
    refusals included), rather than merely that something appeared downstream.
    """
    from aiokafka.admin import AIOKafkaAdminClient

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        tps = await _partitions_of(consumer, topic)
        ends = await consumer.end_offsets(tps)

        async def done() -> dict[int, int] | None:
            committed = await admin.list_consumer_group_offsets(group, partitions=tps)
            got = {tp.partition: (committed[tp].offset if tp in committed else -1) for tp in tps}
            if all(got[tp.partition] >= ends[tp] for tp in tps if ends[tp] > 0):
                return got
            return None

        result: dict[int, int] = await eventually(done, timeout=timeout, interval=0.2)
        return result
    finally:
        await admin.close()
        await consumer.stop()
