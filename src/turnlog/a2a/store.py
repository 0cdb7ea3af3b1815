"""a2a-sdk's cluster mode on Kafka: a ``VersionedTaskStore`` and a ``TaskEventStream`` over the
tasks topic (:mod:`turnlog.a2a.tasklog`), so any replica serves any task.

A save is a record naming the version it was derived from; a void one (another save from that
version came first on the log) raises the SDK's ``ConcurrentTaskModificationError``. The saved
event travels in the save's own record: the event stream is that record, read back
(``publish`` has nothing left to do, as in the SDK's SQL stream).
"""

from __future__ import annotations

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

from turnlog.a2a.fold import CANCEL, DELETE, SAVE, Entry
from turnlog.a2a.tasklog import TaskLog

if TYPE_CHECKING:
    from a2a.server.context import ServerCallContext
    from a2a.server.events.event_queue import Event

OwnerResolver = Callable[["ServerCallContext"], str]


def version_number(version: TaskVersion) -> int:
    """The log version a :class:`TaskVersion` of this store wraps (0: none)."""
    if version.is_missing:
        return 0
    value = version._value  # the SDK gives no public accessor
    if not isinstance(value, int):
        raise TypeError(f"a Kafka task version is an offset, not {value!r}")
    return value


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


__all__ = ["KafkaTaskEventStream", "KafkaTaskStore", "OwnerResolver", "version_number"]
