"""The tasks topic, ``<prefix>a2a.tasks``, as one replica sees it: created if missing (compacted,
the deployment's partition count), read from the beginning (``read_committed``) into a
:class:`~turnlog.a2a.fold.TaskFold` in memory, and written with an idempotent producer.

A write's outcome is the fold's at the write's own offset: the log's order decides, not a read
before the write. A read waits until the fold has reached the partitions' ends as they were when
it was asked, so a replica reads what any other replica's acknowledged write put there. Every
task of the topic is kept in memory, with its counted events, in every replica -- fine for
thousands of live tasks, not for millions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from turnlog.a2a.fold import CONTINUED, PAUSE, BadTaskRecord, Entry, PauseLink, TaskFold
from turnlog.errors import BrokerUnavailable
from turnlog.kafka import clients
from turnlog.kafka.outage import attempt_timeout, stop_producer
from turnlog.kafka.partitioning import partition_for
from turnlog.kafka.reader import LogReader
from turnlog.kafka.topics import TopicSpec, TopicState, check, describe, wait_for_leaders
from turnlog.settings import Settings

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36


def tasks_topic(settings: Settings) -> str:
    """The A2A tasks topic of a deployment: beside turnlog's own, with its prefix."""
    return f"{settings.topic_prefix}a2a.tasks"


class TaskLog:
    """The tasks topic, folded: one per replica, shared by its store, event stream and door."""

    def __init__(self, settings: Settings, *, read_timeout: float = 30.0) -> None:
        self.settings = settings
        self.topic = tasks_topic(settings)
        self.fold = TaskFold()
        self.read_timeout = read_timeout
        self._changed = asyncio.Condition()
        self._reader: LogReader | None = None
        self._producer: AIOKafkaProducer | None = None
        self._partitions: list[int] = []
        self._follow: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Make sure the topic exists (compacted, the deployment's partition count), then read
        it from the beginning. Idempotent."""
        async with self._lock:
            if self._follow is not None:
                return
            await self._ensure_topic()
            producer = clients.producer(
                self.settings, enable_idempotence=True, acks="all", client_id="turnlog-a2a"
            )
            count = await clients.started(producer, self.topic)
            reader = LogReader(self.settings, client_id="turnlog-a2a-reader")
            try:
                await reader.start()
                self._partitions = list(range(count))
                await reader.assign({TopicPartition(self.topic, p): None for p in range(count)})
            except BaseException:
                await reader.stop()
                await stop_producer(producer, patience=1.0)
                raise
            self._producer, self._reader = producer, reader
            self._follow = asyncio.create_task(self._run(), name=f"follow:{self.topic}")

    async def _ensure_topic(self) -> None:
        spec = TopicSpec(self.topic, "a2a.tasks", True)
        partitions = self.settings.partitions
        admin = clients.admin(self.settings, client_id="turnlog-a2a-admin")
        await admin.start()
        try:
            existing = await describe(admin, [self.topic])
            if self.topic not in existing:
                new = NewTopic(
                    self.topic,
                    partitions,
                    self.settings.replication_factor,
                    topic_configs=spec.all_configs(),
                )
                response = await admin.create_topics([new])
                for _name, code, message in response.topic_errors:
                    if code not in (0, _TOPIC_ALREADY_EXISTS):
                        raise BrokerUnavailable(f"creating {self.topic}: error {code} {message}")
                # Another replica may have created it a moment ago: its metadata comes later.
                existing = await self._described(admin)
            check(spec, existing[self.topic], partitions, self.settings.replication_factor)
            await wait_for_leaders(admin, [self.topic])
        finally:
            await admin.close()

    async def _described(self, admin: AIOKafkaAdminClient) -> dict[str, TopicState]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout
        while self.topic not in (found := await describe(admin, [self.topic])):
            if loop.time() > deadline:
                raise BrokerUnavailable(
                    f"{self.topic} not described {self.read_timeout:.0f}s after its creation"
                )
            await asyncio.sleep(0.1)  # metadata has no event to wait on
        return found

    async def stop(self) -> None:
        follow, self._follow = self._follow, None
        if follow is not None:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follow
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None
        if self._producer is not None:
            await stop_producer(self._producer, patience=attempt_timeout(self.settings))
            self._producer = None

    async def __aenter__(self) -> TaskLog:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        reader = self._reader
        if reader is None:
            return
        while True:
            try:
                records = await reader.poll(200)
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError) as exc:  # the broker away: read on once it is back
                log.warning("reading %s: %s: %s", self.topic, type(exc).__name__, exc)
                await asyncio.sleep(0.5)
                continue
            if not records:
                # A poll that read nothing still says the reader is at the end it saw.
                await self._note_positions(reader)
                continue
            for record in records:
                if record.value is None:  # a deletion's or a forget's tombstone
                    self.fold.tombstone(record.key or b"", record.partition, record.offset)
                    continue
                try:
                    entry = Entry.decode(record.value)
                except BadTaskRecord as bad:
                    log.warning("%s[%d]@%d skipped: %s", self.topic, record.partition,
                                record.offset, bad)  # fmt: skip
                    self.fold.skip(record.partition, record.offset)
                    continue
                self.fold.apply(entry, record.partition, record.offset, record.key or b"")
            async with self._changed:
                self._changed.notify_all()

    async def _note_positions(self, reader: LogReader) -> None:
        moved = False
        for p in self._partitions:
            position = await reader.position(TopicPartition(self.topic, p))
            if position > self.fold.applied.get(p, 0):
                self.fold.applied[p] = position  # past transaction markers and compacted gaps
                moved = True
        if moved:
            async with self._changed:
                self._changed.notify_all()

    async def _wait(self, done: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(self.read_timeout):
                async with self._changed:
                    await self._changed.wait_for(done)
        except TimeoutError:
            raise BrokerUnavailable(
                f"{self.topic}: {what} not read within {self.read_timeout:.0f}s"
            ) from None

    async def caught_up(self) -> None:
        """Wait until the fold holds every record written before this call returned ends."""
        await self.start()
        reader = self._reader
        if reader is None:
            raise BrokerUnavailable(f"{self.topic}: not reading")
        tps = [TopicPartition(self.topic, p) for p in self._partitions]
        ends = {tp.partition: end for tp, end in (await reader.end_offsets(tps)).items()}
        await self._wait(
            lambda: all(self.fold.applied.get(p, 0) >= end for p, end in ends.items()),
            "the tasks written so far",
        )

    async def write(self, entry: Entry) -> int:
        """Append ``entry`` and fold up to it: the version it got, 0 when it was void."""
        await self.start()
        producer = self._producer
        if producer is None:
            raise BrokerUnavailable(f"{self.topic}: no producer")
        partition = partition_for(entry.task_id, len(self._partitions))
        key = f"{entry.task_id}\x00{entry.write_id}".encode()
        self.fold.awaited[entry.write_id] = None
        try:
            sent = await producer.send_and_wait(
                self.topic, entry.encode(), key=key, partition=partition
            )
            await self._wait(
                lambda: self.fold.applied.get(partition, 0) > sent.offset,
                f"the write at offset {sent.offset}",
            )
            return self.fold.awaited.get(entry.write_id) or 0
        finally:
            self.fold.awaited.pop(entry.write_id, None)

    async def tombstone(self, task_id: str, keys: list[bytes]) -> None:
        producer = self._producer
        if producer is None:
            raise BrokerUnavailable(f"{self.topic}: no producer")
        partition = partition_for(task_id, len(self._partitions))
        for key in keys:
            await producer.send_and_wait(self.topic, None, key=key, partition=partition)

    async def link_pause(self, task_id: str, owner: str, link: PauseLink) -> None:
        """Record the turnlog pause ``task_id`` now waits on (server side only)."""
        await self.write(Entry(PAUSE, task_id, owner, uuid.uuid4().hex, link=link))

    async def note_continued(
        self, task_id: str, owner: str, link: PauseLink, message_id: str
    ) -> None:
        """Record that ``message_id`` won the claim of the pause ``link`` names: a later copy
        of the message is then a retry of it, never an answer to a newer pause."""
        entry = Entry(CONTINUED, task_id, owner, uuid.uuid4().hex, link=link, message_id=message_id)
        await self.write(entry)

    async def pause_of(self, task_id: str, owner: str) -> PauseLink | None:
        await self.caught_up()
        return self.fold.link(task_id, owner)

    async def changed(self) -> None:
        """Wait for the next folded batch."""
        async with self._changed:
            await self._changed.wait()


__all__ = ["TaskLog", "tasks_topic"]
