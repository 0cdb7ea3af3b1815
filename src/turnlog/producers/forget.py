"""Forgetting a thread: a tombstone for every key it has on the compacted topics.

Compaction then removes the thread's records, and a store rebuilt afterwards holds nothing of
it. The keys are found by reading the thread's partition of each compacted topic rather than from
a local store, so forgetting works from any machine and misses no key a store never applied.
The resumed and rejections streams are not compacted; their records age out with retention.

Every compacted topic keyed by the thread (``thread NUL ...``, on the thread's partition) is one
entry of :func:`thread_topics`: turnlog's own, and the protocol doors' -- a gated MCP tool's
recorded result (``<prefix>mcp-results``) and an A2A task's records (``<prefix>a2a.tasks``; the
door pauses a task under the thread id that is its task id) -- which exist only where a door
ran. The notifier's topic of undelivered notices (``<prefix>notify.undelivered``, when a
notifier ran) is partitioned by key and holds notice bodies -- the question's summary -- so
the thread's notices there, found by their value, get tombstones too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, KafkaTimeoutError

from turnlog.errors import DecodeError, DeliveryFailed
from turnlog.kafka import clients
from turnlog.kafka.outage import (
    abandon,
    attempt_timeout,
    request_timeout_ms,
    ride_out,
    stop_producer,
)
from turnlog.kafka.partitioning import answer_key, partition_for, split_key
from turnlog.kafka.reader import LogReader, Record
from turnlog.kafka.topics import TopicSet, describe
from turnlog.notify import undelivered
from turnlog.settings import Settings


def thread_topics(settings: Settings, topics: TopicSet) -> dict[str, bool]:
    """Every compacted topic whose keys name the thread (``thread NUL ...``), each written to
    the thread's partition (:func:`partition_for` of its own partition count), with whether it
    is always there. A further topic of that kind is one entry here: ``forget`` finds and
    tombstones its keys, ``--check`` counts it, ``--erase-within`` lowers its settings and
    rolls it."""
    prefix = settings.topic_prefix
    return {
        topics.pauses: True,
        topics.answers: True,
        topics.consumptions: True,
        # turnlog.mcp.results: a gated tool's recorded result, keyed thread NUL token id
        f"{prefix}mcp-results": False,
        # turnlog.a2a.tasklog: a task's messages and artifacts, keyed task id NUL write id
        f"{prefix}a2a.tasks": False,
        # a sealing worker's (TURNLOG_SEAL) key of each resumed turn, keyed thread NUL event
        # id: tombstoned, every copy of the thread's resumed turns opens for no one
        topics.keys: False,
    }


async def present_thread_topics(settings: Settings, topics: TopicSet) -> list[str]:
    """:func:`thread_topics` that exist: a door's topic is made only where the door ran, and a
    missing one holds nothing to forget."""
    wanted = thread_topics(settings, topics)
    optional = [name for name, always in wanted.items() if not always]
    admin = clients.admin(settings, client_id="turnlog-forget")
    try:
        await admin.start()
        found = await describe(admin, optional)
    finally:
        await admin.close()
    return [name for name, always in wanted.items() if always or name in found]


async def thread_keys(
    settings: Settings, topics: TopicSet, thread_id: str
) -> dict[str, set[bytes]]:
    """Every live key of ``thread_id`` on the compacted topics keyed by thread."""
    names = await present_thread_topics(settings, topics)
    found: dict[str, set[bytes]] = {t: set() for t in names}
    # Not "async with": a start that fails half-way must still close what it opened.
    reader = LogReader(settings.connection, client_id="turnlog-forget")
    try:
        await reader.start()
        start: dict[TopicPartition, int | None] = {}
        for name in names:
            count = len(await reader.partitions_of(name))
            start[TopicPartition(name, partition_for(thread_id, count))] = None
        await reader.assign(start)

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
    finally:
        await reader.stop()
    return found


async def forget_thread(settings: Settings, topics: TopicSet, thread_id: str) -> dict[str, int]:
    """Write the tombstones; returns how many per topic (:func:`forget_keys`)."""
    keys = await forget_keys(settings, topics, thread_id)
    return {topic: len(topic_keys) for topic, topic_keys in keys.items()}


async def forget_keys(
    settings: Settings, topics: TopicSet, thread_id: str
) -> dict[str, set[bytes]]:
    """Write the tombstones; returns the keys tombstoned, per topic.

    Every send is awaited: a tombstone that was not acknowledged leaves the thread's content on
    the log, which must be said (:class:`DeliveryFailed` with how many failed) rather than
    reported as forgotten. Running ``forget`` again is safe: a tombstone is idempotent. An
    unreachable broker is ridden out for ``settings.broker_timeout_seconds`` before anything is
    sent; the tombstones themselves are not retried silently.
    """
    keys = await ride_out(
        lambda: thread_keys(settings, topics, thread_id), settings=settings, who="forget"
    )
    # The notifier's own topic keeps notices not yet delivered, and dead letters: their bodies
    # are the thread's content too.
    notices = await ride_out(
        lambda: undelivered.of_thread(settings, thread_id), settings=settings, who="forget"
    )
    if notices is not None:
        keys[undelivered.topic_name(settings)] = set(notices.live)
    await write_tombstones(settings, topics, thread_id, keys)
    # Last, once every other tombstone is acknowledged: the forget mark, a tombstone on the
    # thread's answers partition (under an answer id no publisher uses). The worker reads that
    # partition in order and catches its store up with the pauses when it meets one, so every
    # answer published after ``forget`` finds the thread forgotten -- refused as such, its
    # record tombstoned -- even if the worker's store still held the pause. Not counted.
    await write_tombstones(settings, topics, thread_id, {topics.answers: {forget_mark(thread_id)}})
    return keys


def forget_mark(thread_id: str) -> bytes:
    """The key of a thread's forget mark on the answers topic."""
    return answer_key(thread_id, "")


async def write_tombstones(
    settings: Settings, topics: TopicSet, thread_id: str, keys: dict[str, set[bytes]]
) -> None:
    """A tombstone for each of ``keys`` (per topic) on ``thread_id``'s partition, each
    acknowledged, or :class:`DeliveryFailed` saying how many were not."""
    wait = attempt_timeout(settings)

    by_thread = thread_topics(settings, topics)

    async def open_producer() -> tuple[AIOKafkaProducer, dict[str, int]]:
        producer = clients.producer(
            settings,
            client_id="turnlog-forget",
            enable_idempotence=True,
            acks="all",
            request_timeout_ms=request_timeout_ms(settings),
        )
        try:
            await producer.start()
            # The thread's partition of each topic keyed by thread; the notifier's topic is
            # partitioned by key (None: the producer's partitioner).
            where = {
                topic: partition_for(thread_id, len(await producer.partitions_for(topic)))
                for topic, found in keys.items()
                if topic in by_thread and found
            }
        except BaseException:
            await producer.stop()
            raise
        return producer, where

    producer, where = await ride_out(open_producer, settings=settings, who="forget", timeout=wait)
    failures: list[BaseException] = []
    deliveries: list[asyncio.Future[Any]] = []
    total = 0
    try:
        for topic, topic_keys in keys.items():
            for key in sorted(topic_keys):
                total += 1
                try:
                    sent = await producer.send(topic, None, key=key, partition=where.get(topic))
                    deliveries.append(sent)
                except KafkaError as exc:
                    failures.append(exc)
        failures += await _undelivered(deliveries, wait)
    finally:
        # An idempotent producer waits for a vanished broker forever; stop without it then.
        await (abandon(producer) if failures else stop_producer(producer, patience=wait))
    if failures:
        raise DeliveryFailed(len(failures), total, "tombstones", failures[0])


async def _undelivered(deliveries: list[asyncio.Future[Any]], wait: float) -> list[BaseException]:
    """The failures among ``deliveries``, counting one not acknowledged within ``wait``."""
    if not deliveries:
        return []
    done, waiting = await asyncio.wait(deliveries, timeout=wait)
    failed: list[BaseException] = []
    for delivery in done:
        exc = delivery.exception()
        if exc is not None:
            failed.append(exc)
    failed += [KafkaTimeoutError(f"not acknowledged within {wait:.0f}s") for _ in waiting]
    return failed
