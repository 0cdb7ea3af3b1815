"""Owning one answers partition: a fenced transactional producer, then a restored state.

The order is the whole point. A new owner first starts a producer under the partition's stable
transactional id: the broker bumps the epoch, aborts whatever the previous owner had open and
refuses that owner's later commits. Only then is the partition's state read to its committed
end -- reading first would let a zombie commit a consumption after the read, which the new owner
would never see and could then repeat.
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaProducer

log = logging.getLogger(__name__)


def transactional_id(application_id: str, answers_topic: str, partition: int) -> str:
    """Stable per input partition, so whoever owns partition p next fences whoever owned it."""
    return f"{application_id}.resume.{answers_topic}.{partition}"


class PartitionOwner:
    """The producer side of owning one answers partition."""

    def __init__(
        self,
        bootstrap_servers: str,
        application_id: str,
        answers_topic: str,
        partition: int,
        *,
        transaction_timeout_ms: int = 30000,
        linger_ms: int = 5,
    ) -> None:
        self.partition = partition
        self.transactional_id = transactional_id(application_id, answers_topic, partition)
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            transactional_id=self.transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            linger_ms=linger_ms,
            max_batch_size=256 * 1024,
            client_id=f"turnlog-resume-{partition}",
        )
        self._started = False
        self.fenced = False

    async def fence(self) -> None:
        """Start the producer: InitProducerId fences every earlier owner of this partition."""
        if not self._started:
            await self.producer.start()
            self._started = True

    async def close(self) -> None:
        if self._started:
            self._started = False
            try:
                await self.producer.stop()
            except Exception as exc:  # noqa: BLE001 - closing must not raise past revocation
                log.warning("closing producer %s: %s", self.transactional_id, exc)
