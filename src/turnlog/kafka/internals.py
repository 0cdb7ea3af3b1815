"""The few places turnlog reaches into aiokafka's private attributes, all here, each with why.

aiokafka 0.14 offers no public way to do these three things, and each matters:

- ask for fresh metadata and learn whether any broker answered (``consumer._client``): the
  cheapest probe of an unreachable broker, and how a topic's partitions are learnt without
  waiting for the next periodic refresh;
- close a consumer whose ``stop()`` was interrupted by its own fetch tasks' cancellation
  (``consumer._fetcher``, ``consumer._client``): otherwise its connections stay open;
- tell whether a transactional producer died of a fence (``producer._sender``): a later send
  reports only "not in transaction", and the owner must know to wait before retaking.

``tests/unit/test_kafka_internals.py`` checks that each attribute still exists with the shape
used here, so a client upgrade that moves one fails there, by name, not in production.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import ProducerFenced


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


def died_of_fence(producer: AIOKafkaProducer) -> bool:
    """Whether the producer's background sender stopped because the producer was fenced."""
    sender: Any = producer._sender
    task = sender.sender_task
    if task is None or not task.done() or task.cancelled():
        return False
    return isinstance(task.exception(), ProducerFenced)
