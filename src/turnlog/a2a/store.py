"""a2a-sdk's cluster mode on Kafka: a ``VersionedTaskStore`` and a ``TaskEventStream`` over one
compacted topic, ``<prefix>a2a.tasks``, keyed by task id, so any replica serves any task.

Every replica reads the whole topic (``read_committed``, from the beginning) into a
:class:`~turnlog.a2a.fold.TaskFold` in memory and writes with an idempotent producer. A save is
a record naming the version it was derived from; its outcome is the fold's, at its own offset
(the log's order decides, not a read before the write), and a void save raises the SDK's
``ConcurrentTaskModificationError``. A read first waits until the fold has reached the
partitions' ends as they were when it was asked, so a replica reads what any other replica's
acknowledged save wrote. The saved event travels in the save's own record: the event stream is
that record, read back (``publish`` has nothing left to do, as in the SDK's SQL stream).

What is kept in memory: every task of the topic, with its counted events, in every replica --
fine for thousands of live tasks, not for millions; ``delete`` tombstones a task's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING

from a2a.server.cluster.event_stream import TaskEventStream, VersionedEvent
from a2a.server.cluster.task_store import (
    ConcurrentTaskModificationError,
    StoredTask,
    VersionedTaskStore,
)
from a2a.server.cluster.version import TaskVersion
from a2a.server.owner_resolver import resolve_user_scope
from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    ListTasksResponse,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.proto_utils import to_stream_response
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from turnlog.a2a.fold import (
    CANCEL,
    DELETE,
    PAUSE,
    SAVE,
    BadTaskRecord,
    Entry,
    PauseLink,
    TaskFold,
)
from turnlog.errors import BrokerUnavailable
from turnlog.kafka import clients
from turnlog.kafka.outage import attempt_timeout, stop_producer
from turnlog.kafka.partitioning import partition_for
from turnlog.kafka.reader import LogReader
from turnlog.kafka.topics import TopicSpec, TopicState, check, describe, wait_for_leaders
from turnlog.settings import Settings

if TYPE_CHECKING:
    from a2a.server.context import ServerCallContext
    from a2a.server.events.event_queue import Event

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36
OwnerResolver = Callable[["ServerCallContext"], str]


def tasks_topic(settings: Settings) -> str:
    """The A2A tasks topic of a deployment: beside turnlog's own, with its prefix."""
    return f"{settings.topic_prefix}a2a.tasks"


def version_number(version: TaskVersion) -> int:
    """The log version a :class:`TaskVersion` of this store wraps (0: none)."""
    if version.is_missing:
        return 0
    value = version._value  # the SDK gives no public accessor
    if not isinstance(value, int):
        raise TypeError(f"a Kafka task version is an offset, not {value!r}")
    return value


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
                if record.value is None:
                    self.fold.skip(record.partition, record.offset)
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

    async def pause_of(self, task_id: str, owner: str) -> PauseLink | None:
        await self.caught_up()
        return self.fold.link(task_id, owner)

    async def changed(self) -> None:
        """Wait for the next folded batch."""
        async with self._changed:
            await self._changed.wait()


class KafkaTaskStore(VersionedTaskStore):
    """a2a-sdk's ``VersionedTaskStore`` on the tasks topic (see the module): pass it as
    ``DefaultRequestHandler(task_store=...)`` with :class:`KafkaTaskEventStream` as
    ``event_stream=``. Tasks are scoped by owner (``owner_resolver``, the SDK's default: the
    authenticated user's name): another owner's task is not found."""

    def __init__(self, tasks: TaskLog, *, owner_resolver: OwnerResolver = resolve_user_scope):
        self.tasks = tasks
        self.owner_resolver = owner_resolver

    async def save(
        self,
        task: Task,
        *,
        event: Event | None = None,
        prev: Task | None = None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        del prev
        state = TaskState.Name(task.status.state)
        kind = CANCEL if task.status.state == TaskState.TASK_STATE_CANCELED else SAVE
        entry = Entry(
            kind,
            task.id,
            self.owner_resolver(context),
            uuid.uuid4().hex,
            prev=version_number(prev_version),
            state=state,
            task=task.SerializeToString(),
            event=to_stream_response(event).SerializeToString() if event is not None else b"",
        )
        version = await self.tasks.write(entry)
        if not version:
            raise ConcurrentTaskModificationError(task.id)
        return TaskVersion(version)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        await self.tasks.caught_up()
        stored = self.tasks.fold.owned(task_id, self.owner_resolver(context))
        if stored is None:
            return None
        return StoredTask(Task.FromString(stored.task), TaskVersion(stored.version))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        await self.tasks.caught_up()
        owner = self.owner_resolver(context)
        found = []
        for stored in self.tasks.fold.tasks.values():
            if stored.owner != owner:
                continue
            task = Task.FromString(stored.task)
            if params.context_id and task.context_id != params.context_id:
                continue
            if params.status and task.status.state != params.status:
                continue
            found.append((stored.version, task))
        found.sort(key=lambda pair: pair[0], reverse=True)  # the latest written first
        size = params.page_size or 50
        start = int(params.page_token) if params.page_token.isdigit() else 0
        page = [task for _, task in found[start : start + size]]
        more = start + size < len(found)
        return ListTasksResponse(
            tasks=page,
            next_page_token=str(start + size) if more else "",
            page_size=size,
            total_size=len(found),
        )

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self.tasks.caught_up()
        owner = self.owner_resolver(context)
        if self.tasks.fold.owned(task_id, owner) is None:
            return
        keys = list(self.tasks.fold.keys.get(task_id, ()))
        await self.tasks.write(Entry(DELETE, task_id, owner, uuid.uuid4().hex))
        await self.tasks.tombstone(task_id, keys)


def _event_of(data: bytes) -> Event:
    response = StreamResponse.FromString(data)
    which = response.WhichOneof("payload")
    if which in ("task", "message", "status_update", "artifact_update"):
        event: Event = getattr(response, which)
        return event
    raise ValueError(f"a stored event with no known payload ({which!r})")


class KafkaTaskEventStream(TaskEventStream):
    """a2a-sdk's ``TaskEventStream`` on the tasks topic: a subscriber on any replica gets every
    counted save's event, in version order, from the records themselves."""

    def __init__(self, tasks: TaskLog) -> None:
        self.tasks = tasks

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Nothing to do: the event is in the save's record already."""
        del task_id, event

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        seen = version_number(after)
        await self.tasks.caught_up()
        while True:
            fresh = list(self.tasks.fold.events_after(task_id, seen))
            for version, data in fresh:
                seen = version
                yield VersionedEvent(event=_event_of(data), version=TaskVersion(version))
            if not fresh:
                await self.tasks.changed()

    async def destroy(self, task_id: str) -> None:
        """Nothing to release: a subscriber stops at the task's final event."""
        del task_id


__all__ = [
    "KafkaTaskEventStream",
    "KafkaTaskStore",
    "TaskLog",
    "tasks_topic",
    "version_number",
]
