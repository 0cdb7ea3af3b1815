"""The few places turnlog reaches into aiokafka's private attributes, all here, each with why.

aiokafka 0.14 offers no public way to do these three things, and each matters:

- ask for fresh metadata and learn whether any broker answered (``consumer._client``): the
  cheapest probe of an unreachable broker, and how a topic's partitions are learnt without
  waiting for the next periodic refresh;
- close a consumer whose ``stop()`` was interrupted by its own fetch tasks' cancellation
  (``consumer._fetcher``, ``consumer._client``): otherwise its connections stay open;
- tell whether a transactional producer died of a fence (``producer._sender``): a later send
  reports only "not in transaction", and the owner must know to wait before retaking;
- stop a producer whose broker is gone: aiokafka's idempotent producer never expires a batch, so
  ``stop()`` would wait forever for pending sends -- their batches are failed
  (``producer._message_accumulator``) and the sender's tasks cancelled (``producer._sender``).

``tests/unit/test_kafka_internals.py`` checks that each attribute still exists with the shape
used here, so a client upgrade that moves one fails there, by name, not in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, ProducerFenced
from aiokafka.protocol.metadata import MetadataRequest

_TOPIC_AUTHORIZATION_FAILED = 29


async def refresh_metadata(consumer: AIOKafkaConsumer) -> bool:
    """Ask a broker for metadata now; False when no known broker could be reached."""
    client: Any = consumer._client
    return bool(await client.force_metadata_update())


async def close_after_cancelled_stop(consumer: AIOKafkaConsumer) -> None:
    """Finish closing a consumer whose ``stop()`` raised its fetch task's ``CancelledError``."""
    fetcher: Any = consumer._fetcher
    for pending in list(getattr(fetcher, "_pending_tasks", ())):
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
    client: Any = consumer._client
    await client.close()


async def topic_unauthorized(consumer: AIOKafkaConsumer, topic: str) -> bool:
    """Whether the broker refuses this principal any metadata of ``topic``. A metadata request
    for all topics leaves such a topic out, and aiokafka then reports it as merely absent, so a
    caller waiting for its partitions would wait for nothing: this asks for the topic by name,
    with auto-creation off (aiokafka's own requests allow it: on a cluster with
    ``auto.create.topics.enable`` the question would create the topic with the broker's default
    partition count), and leaves the consumer's metadata untouched."""
    client: Any = consumer._client
    node = client.get_random_node()
    if node is None:
        return False
    response: Any = await client.send(
        node, MetadataRequest([topic], allow_auto_topic_creation=False)
    )
    return any(t[0] == _TOPIC_AUTHORIZATION_FAILED and t[1] == topic for t in response.topics)


def died_of_fence(producer: AIOKafkaProducer) -> bool:
    """Whether the producer's background sender stopped because the producer was fenced."""
    sender: Any = producer._sender
    task = sender.sender_task
    if task is None or not task.done() or task.cancelled():
        return False
    return isinstance(task.exception(), ProducerFenced)


def fail_pending(accumulator: Any) -> None:
    """Fail every batch not yet acknowledged, and mark the failures seen: nobody is left to
    await them, and asyncio would log each one as "never retrieved"."""
    if accumulator is None:
        return
    batches = [b for queue in accumulator._batches.values() for b in queue]
    batches += list(accumulator._pending_batches)
    accumulator.fail_all(KafkaConnectionError("abandoned after the broker went away"))
    for batch in batches:
        waiters = [batch.future, batch._drain_waiter, *(f for f, _ in batch._msg_futures)]
        for waiter in waiters:
            if waiter.done() and not waiter.cancelled():
                waiter.exception()


def cancel_sender_tasks(producer: AIOKafkaProducer) -> None:
    """Cancel the tasks of ``producer``'s sender (its routine, produce requests, coordinator
    lookups): found by the ``self`` of each task's coroutine, as aiokafka keeps no list."""
    sender = getattr(producer, "_sender", None)
    if sender is None:
        return
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        if not inspect.iscoroutine(coro):
            continue
        owner = inspect.getcoroutinelocals(coro).get("self")
        if owner is producer:
            continue  # the stop itself
        if owner is sender or getattr(owner, "_sender", None) is sender:
            task.cancel()
