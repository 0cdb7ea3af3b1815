"""The notifier's own topic, ``<prefix>notify.undelivered``: the notices a webhook has not
taken yet, and the dead letters of those given up (the Kafka edge of
:mod:`~turnlog.notify.waiting`).

Compacted and keyed by ``<lane>|<notice id>`` (the lane is the webhook's consumer group): one
record per notice, its latest state kept -- waiting, then a tombstone once delivered, or a dead
letter with its reason. A notice is written here before the offset of the record that made it
is committed, so a notifier killed in an outage loses nothing: the next one reads this topic at
its start and goes on trying. It is on the log, not in a local file, because the notifier keeps
no state directory (any host can run it) and because a webhook down for a day holds thousands
of notices a restart must not lose. Its partition count is the deployment's (that of
``pauses``): the deployment's operators have sized that for its volume, and a reader of every
topic of a deployment finds one count. Nothing reads it by partition: every lane reads it all.
The value is JSON (``format`` 1), not Avro: it is the notifier's private state, never a
contract another program reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from turnlog.errors import TopicMismatch
from turnlog.kafka import clients
from turnlog.kafka.outage import attempt_timeout, ride_out
from turnlog.kafka.reader import LogReader, Record
from turnlog.kafka.topics import TopicSpec, check, describe, wait_for_leaders
from turnlog.notify.waiting import Summary, Undelivered, summarize
from turnlog.settings import Settings

#: Topic already exists (a concurrent notifier made it first).
_ALREADY_EXISTS: Final = 36


def topic_name(settings: Settings) -> str:
    return f"{settings.topic_prefix}notify.undelivered"


def _spec(settings: Settings) -> TopicSpec:
    isr = settings.min_insync_replicas
    return TopicSpec(
        topic_name(settings),
        "notify.undelivered",
        True,
        {"min.insync.replicas": str(isr)} if isr else {},
    )


async def ensure(settings: Settings, partitions: int) -> None:
    """The topic exists, compacted, with ``partitions`` partitions (made if it may be)."""
    spec = _spec(settings)

    async def attempt() -> None:
        admin = clients.admin(settings, client_id="turnlog-notify")
        try:
            await admin.start()
            found = await describe(admin, [spec.name])
            if spec.name not in found:
                if not settings.create_topics:
                    raise TopicMismatch(
                        "topic_missing",
                        f"{spec.name} missing, and this process does not create topics "
                        f"(TURNLOG_CREATE_TOPICS=false): create it compacted, with "
                        f"{partitions} partitions",
                    )
                new = NewTopic(
                    spec.name,
                    partitions,
                    settings.replication_factor,
                    topic_configs=spec.all_configs(),
                )
                response = await admin.create_topics([new])
                for name, code, message in response.topic_errors:
                    if code not in (0, _ALREADY_EXISTS):
                        raise TopicMismatch(
                            "topic_creation_failed", f"{name}: error {code} {message or ''}"
                        )
                found = await describe(admin, [spec.name])
            if spec.name in found:
                check(spec, found[spec.name], partitions, settings.replication_factor)
            await wait_for_leaders(admin, [spec.name])
        finally:
            await admin.close()

    await ride_out(attempt, settings=settings, who="notifier readiness")


async def _latest(settings: Settings) -> dict[bytes, Undelivered]:
    """The latest record of every key (tombstoned keys dropped; unreadable values skipped)."""
    latest: dict[bytes, Undelivered] = {}
    reader = LogReader(settings, client_id="turnlog-notify-undelivered")
    try:
        await reader.start()
        topic = topic_name(settings)
        partitions = await reader.partitions_of(topic)
        await reader.assign({TopicPartition(topic, p): None for p in partitions})

        async def apply(records: Sequence[Record]) -> None:
            for record in records:
                if record.key is None:
                    continue
                found = None if record.value is None else Undelivered.decode(record.value)
                if found is None:
                    latest.pop(record.key, None)
                else:
                    latest[record.key] = found

        await reader.read_to_end(apply)
    finally:
        await reader.stop()
    return latest


async def load(settings: Settings, lane: str) -> list[Undelivered]:
    """The notices still waiting for ``lane``, in the order they were made."""
    latest = await ride_out(
        lambda: _latest(settings), settings=settings, who="notifier undelivered notices"
    )
    waiting = [e for e in latest.values() if e.lane == lane and e.state != "dead"]
    return sorted(waiting, key=lambda e: e.seq)


async def summary(settings: Settings) -> Summary | None:
    """What waits and what was given up, over every lane; ``None`` when the topic does not
    exist (no notifier ever ran in this deployment)."""
    admin = clients.admin(settings, client_id="turnlog-status")
    try:
        await admin.start()
        if topic_name(settings) not in await describe(admin, [topic_name(settings)]):
            return None
    finally:
        await admin.close()
    return summarize(await _latest(settings))


class Outbox:
    """Writes a lane's undelivered notices (acks from every in-sync replica, idempotent)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = topic_name(settings)
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        # Made here, not in __init__: an unstarted aiokafka client warns when collected.
        self._producer = clients.producer(
            self.settings, client_id="turnlog-notify", acks="all", enable_idempotence=True
        )
        await self._producer.start()

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def _write(self, key: bytes, value: bytes | None) -> None:
        producer = self._producer
        if producer is None:
            raise RuntimeError("the outbox is not started")

        async def attempt() -> None:
            await producer.send_and_wait(self.topic, value, key=key)

        await ride_out(
            attempt,
            settings=self.settings,
            who="notifier undelivered notices",
            timeout=attempt_timeout(self.settings),
        )

    async def keep(self, entry: Undelivered) -> None:
        """``entry`` is on the log (a waiting notice, or its dead letter)."""
        await self._write(entry.key, entry.encode())

    async def drop(self, entry: Undelivered) -> None:
        """``entry`` was delivered (or its thread forgotten): a tombstone for its key."""
        await self._write(entry.key, None)


@dataclass(frozen=True, slots=True)
class ThreadNotices:
    """A thread's notices on the topic (:func:`of_thread`)."""

    #: the keys whose latest record still holds a notice of the thread (to tombstone)
    live: frozenset[bytes]
    #: the records holding a notice of the thread, older versions included (bytes the broker
    #: keeps until it compacts)
    holding: int
    #: every key that ever held a notice of the thread (a record under each rolls its partition)
    every: frozenset[bytes] = frozenset()


async def of_thread(settings: Settings, thread_id: str) -> ThreadNotices | None:
    """``thread_id``'s notices on the topic; ``None`` when the topic does not exist. Nothing
    here is written in a transaction, so ``read_committed`` sees every record."""
    admin = clients.admin(settings, client_id="turnlog-forget")
    try:
        await admin.start()
        if topic_name(settings) not in await describe(admin, [topic_name(settings)]):
            return None
    finally:
        await admin.close()
    latest: dict[bytes, bool] = {}
    holding = 0
    reader = LogReader(settings, client_id="turnlog-forget-notices")
    try:
        await reader.start()
        topic = topic_name(settings)
        partitions = await reader.partitions_of(topic)
        await reader.assign({TopicPartition(topic, p): None for p in partitions})

        async def apply(records: Sequence[Record]) -> None:
            nonlocal holding
            for record in records:
                if record.key is None:
                    continue
                found = None if record.value is None else Undelivered.decode(record.value)
                if found is not None and found.thread_id == thread_id:
                    latest[record.key] = True
                    holding += 1
                elif record.key in latest:
                    latest[record.key] = False  # tombstoned (or overwritten) since

        await reader.read_to_end(apply)
    finally:
        await reader.stop()
    live = frozenset(k for k, alive in latest.items() if alive)
    return ThreadNotices(live, holding, frozenset(latest))
