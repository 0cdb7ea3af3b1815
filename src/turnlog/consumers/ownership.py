"""Owning answers partitions: a fenced transactional producer, then a restored state.

The order is the whole point. A new owner first starts a producer under the partition's stable
transactional id: the broker's ``InitProducerId`` bumps the epoch, aborts whatever the previous
owner had open (its records stay invisible to ``read_committed``) and refuses that owner's later
sends and commits with ``ProducerFenced``; aiokafka's ``start()`` returns only once that
succeeded, so :meth:`PartitionOwner.fence` has fenced on return. Only then is the partition's
state read to its committed end -- reading first would let a zombie commit a consumption after
the read, which the new owner would never see and could then repeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from aiokafka import AIOKafkaProducer

from turnlog.kafka import clients
from turnlog.kafka.internals import died_of_fence

log = logging.getLogger(__name__)


def transactional_id(application_id: str, answers_topic: str, partition: int) -> str:
    """Stable per input partition, so whoever owns partition p next fences whoever owned it."""
    return f"{application_id}.resume.{answers_topic}.{partition}"


class PartitionOwner:
    """The producer side of owning one answers partition."""

    def __init__(
        self,
        bootstrap_servers: clients.Target,
        application_id: str,
        answers_topic: str,
        partition: int,
        *,
        transaction_timeout_ms: int = 30000,
        linger_ms: int = 5,
    ) -> None:
        self.partition = partition
        self.transactional_id = transactional_id(application_id, answers_topic, partition)
        self.producer = clients.producer(
            bootstrap_servers,
            transactional_id=self.transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            linger_ms=linger_ms,
            max_batch_size=256 * 1024,
            # aiokafka's default retry backoff (100 ms). A 20 ms backoff cut an answer's latency
            # at half load (a partition's next transaction often waits on CONCURRENT_TRANSACTIONS
            # while the last one's markers are written), but with it, and with the offsets sent
            # while records were in flight, the outage chaos test wrote a refusal twice in 2 of
            # about 15 runs (none in 18 runs without them): correctness first (bench/README.md).
            client_id=f"turnlog-resume-{partition}",
        )
        self._started = False
        self.fenced = False

    async def fence(self) -> None:
        """Start the producer: InitProducerId fences every earlier owner of this partition."""
        if not self._started:
            self._started = True  # set first: a start that fails half-way must still be closed
            await self.producer.start()

    def was_fenced(self) -> bool:
        """Whether the producer died of a fence. aiokafka learns of it in its background sender,
        which then stops; a later send reports only "not in transaction", not the fence."""
        return died_of_fence(self.producer)

    async def close(self) -> None:
        if self._started:
            self._started = False
            try:
                await self.producer.stop()
            except Exception as exc:  # noqa: BLE001 - closing must not raise past revocation
                log.warning("closing producer %s: %s", self.transactional_id, exc)


class Ownership:
    """The answers partitions one worker owns, each with its fenced producer.

    Taking runs in the order of the module docstring: fence every partition, restore their state
    together (``restore``), and only then own them. A partition whose take fails, or whose
    producer is lost, is left unowned with a time before which it is not taken again: soon after
    a failure, a session timeout after a fence (the fencer is most likely the rightful owner and
    our own revocation is on its way; taking it straight back would fence it in turn).
    """

    def __init__(
        self,
        bootstrap_servers: clients.Target,
        application_id: str,
        answers_topic: str,
        *,
        restore: Callable[[list[int]], Awaitable[object]],
        refence_after: float,
    ) -> None:
        self._bootstrap = clients.connection(bootstrap_servers)
        self._application_id = application_id
        self._topic = answers_topic
        self._restore = restore
        self._refence_after = refence_after
        self._owners: dict[int, PartitionOwner] = {}
        self._retry_at: dict[int, float] = {}

    @property
    def owned(self) -> list[int]:
        return sorted(self._owners)

    def __contains__(self, partition: object) -> bool:
        return partition in self._owners

    def producer(self, partition: int) -> AIOKafkaProducer:
        return self._owners[partition].producer

    def was_fenced(self, partition: int) -> bool:
        owner = self._owners.get(partition)
        return owner is not None and owner.was_fenced()

    def due(self, assigned: Iterable[int]) -> list[int]:
        """The assigned partitions not owned and no longer waiting to be taken again."""
        now = asyncio.get_running_loop().time()
        return [p for p in assigned if p not in self._owners and self._retry_at.get(p, 0.0) <= now]

    async def take(self, partitions: Iterable[int], *, now: bool = False) -> None:
        """Fence, restore, own. ``now`` (a fresh assignment) ignores any wait to retake."""
        loop = asyncio.get_running_loop()
        fenced: dict[int, PartitionOwner] = {}
        taking = sorted(set(partitions) - set(self._owners))
        for p in taking:
            if now:
                self._retry_at.pop(p, None)
        owners = [
            PartitionOwner(self._bootstrap, self._application_id, self._topic, p) for p in taking
        ]
        # Side by side: each fence is a round trip to the transaction coordinator (and waits
        # for the previous owner's transaction to be aborted), and a takeover of twelve
        # partitions one after another spent most of its time here.
        results = await asyncio.gather(*(o.fence() for o in owners), return_exceptions=True)
        for owner, result in zip(owners, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    await asyncio.gather(*(o.close() for o in owners))
                    raise result  # a cancellation: nothing is owned
                log.error(
                    "fencing answers partition %d failed; will retry", owner.partition,
                    exc_info=result,
                )  # fmt: skip
                await owner.close()
                self._retry_at[owner.partition] = loop.time() + 1.0
                continue
            fenced[owner.partition] = owner
        if not fenced:
            return
        try:
            await self._restore(sorted(fenced))
        except Exception:
            log.exception("restoring partitions %s failed; will retry", sorted(fenced))
            await asyncio.gather(*(owner.close() for owner in fenced.values()))
            for p in fenced:
                self._retry_at[p] = loop.time() + 1.0
            return
        for p, owner in fenced.items():
            self._owners[p] = owner
            log.info(
                "owning answers partition %d", p,
                extra={"event": "ownership", "change": "owned", "partition": p},
            )  # fmt: skip

    async def lose(self, partition: int, *, fenced: bool = False) -> None:
        """Give up a partition whose producer failed; after a fence, wait before retaking it."""
        owner = self._owners.pop(partition, None)
        if owner is not None:
            await owner.close()
        if fenced:
            loop = asyncio.get_running_loop()
            self._retry_at[partition] = loop.time() + self._refence_after

    async def release(self, partitions: Iterable[int]) -> None:
        """Revoked: close the producers (their transactions are all committed or aborted)."""
        closing = []
        for p in partitions:
            self._retry_at.pop(p, None)
            owner = self._owners.pop(p, None)
            if owner is not None:
                closing.append(owner)
        # Side by side (each close flushes and leaves its connections); close never raises.
        await asyncio.gather(*(owner.close() for owner in closing))
        for owner in closing:
            log.info(
                "released answers partition %d", owner.partition,
                extra={"event": "ownership", "change": "released", "partition": owner.partition},
            )  # fmt: skip

    async def close(self) -> None:
        await self.release(list(self._owners))
