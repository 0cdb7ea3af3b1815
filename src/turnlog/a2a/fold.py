"""The A2A task log's rules, with no Kafka and no A2A SDK in them: what a record on the tasks
topic is, and which records count.

A replica's compare-and-swap is a record that says which version it was derived from. The
partition's leader appends records in one order, and every replica folds them in that order by
the same rule: a save counts only if the task is still at the version it names, so of two saves
derived from one version the first on the log wins and the second is void -- whoever reads the
log, whenever. Nothing is decided by a read followed by a write; the writer learns its outcome by
folding the log up to its own record. A task's version is its last counted record's offset + 1,
so versions only grow (a task lives on one partition).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

SAVE, CANCEL, PAUSE, DELETE = "save", "cancel", "pause", "delete"
#: A message that won the claim of a pause: which message continued which pause of a task.
CONTINUED = "continued"
KINDS = frozenset({SAVE, CANCEL, PAUSE, DELETE, CONTINUED})
#: The A2A task states after which nothing continues a task (the SDK's terminal states).
TERMINAL = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
)
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
#: The envelope's version: a record of another version is refused by name, never guessed.
ENVELOPE = 1


class BadTaskRecord(ValueError):
    """A record on the tasks topic that is no envelope of this version: skipped, never
    applied, and never a reason to stop folding."""


@dataclass(frozen=True, slots=True)
class PauseLink:
    """The turnlog pause an ``input-required`` task waits on: the token stays on the log, on
    the server side (it is never part of the A2A task a client reads)."""

    token: str
    token_id: str
    call_id: str
    interaction: str
    tool: str = ""
    arguments_json: str = ""


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of the tasks topic: a task written (``save``, ``cancel``), a pause linked,
    or a task deleted. ``task`` and ``event`` are the A2A SDK's protobuf bytes (a ``Task`` and
    a ``StreamResponse``), kept as they are."""

    kind: str
    task_id: str
    owner: str
    write_id: str
    prev: int = 0
    state: str = ""
    task: bytes = b""
    event: bytes = b""
    link: PauseLink | None = None
    #: For ``continued``: the message that continued the pause ``link.token_id`` names.
    message_id: str = ""

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "v": ENVELOPE,
            "kind": self.kind,
            "task_id": self.task_id,
            "owner": self.owner,
            "write_id": self.write_id,
            "prev": self.prev,
            "state": self.state,
            "task": base64.b64encode(self.task).decode(),
            "event": base64.b64encode(self.event).decode(),
            "message_id": self.message_id,
        }
        if self.link is not None:
            body["link"] = {
                "token": self.link.token,
                "token_id": self.link.token_id,
                "call_id": self.link.call_id,
                "interaction": self.link.interaction,
                "tool": self.link.tool,
                "arguments_json": self.link.arguments_json,
            }
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> Entry:
        try:
            body = json.loads(value)
            if not isinstance(body, dict) or body.get("v") != ENVELOPE:
                raise BadTaskRecord(f"not an A2A task envelope of version {ENVELOPE}")
            kind = body["kind"]
            if kind not in KINDS:
                raise BadTaskRecord(f"unknown record kind {kind!r}")
            raw_link = body.get("link")
            link = (
                PauseLink(**{k: str(raw_link[k]) for k in PauseLink.__slots__})
                if isinstance(raw_link, dict)
                else None
            )
            return cls(
                kind=kind,
                task_id=str(body["task_id"]),
                owner=str(body["owner"]),
                write_id=str(body["write_id"]),
                prev=int(body["prev"]),
                state=str(body["state"]),
                task=base64.b64decode(body["task"]),
                event=base64.b64decode(body["event"]),
                link=link,
                message_id=str(body.get("message_id", "")),
            )
        except BadTaskRecord:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise BadTaskRecord(f"unreadable A2A task record: {exc}") from exc


@dataclass(slots=True)
class StoredTask:
    """A task as the log has it: its latest counted snapshot, version and counted events."""

    owner: str
    version: int
    state: str
    task: bytes
    events: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class TaskFold:
    """Every task of the topic, folded in log order; one per replica, fed by its reader."""

    tasks: dict[str, StoredTask] = field(default_factory=dict)
    links: dict[str, tuple[str, PauseLink]] = field(default_factory=dict)
    #: Per task: each message that continued one of its pauses, and that pause's token id.
    continued: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Every record key of a task id, counted or void: what deleting the task tombstones.
    keys: dict[str, list[bytes]] = field(default_factory=dict)
    #: The next offset to fold, per partition.
    applied: dict[int, int] = field(default_factory=dict)
    #: Writes this replica waits on: write id -> the version it got (0: void), once folded.
    awaited: dict[str, int | None] = field(default_factory=dict)

    def apply(self, entry: Entry, partition: int, offset: int, key: bytes = b"") -> bool:
        """Fold one record; whether it counted."""
        self.applied[partition] = max(self.applied.get(partition, 0), offset + 1)
        if key:
            self.keys.setdefault(entry.task_id, []).append(key)
        counted = self._apply(entry, offset + 1)
        if entry.write_id in self.awaited:
            self.awaited[entry.write_id] = offset + 1 if counted else 0
        return counted

    def skip(self, partition: int, offset: int) -> None:
        """A record that is no entry (a tombstone, a bad record): only the position moves."""
        self.applied[partition] = max(self.applied.get(partition, 0), offset + 1)

    def tombstone(self, key: bytes, partition: int, offset: int) -> None:
        """A tombstone: the position moves, and the task whose record it ends is dropped whole
        -- only a deletion (after its ``delete`` record) and ``turnlog forget`` write one, and
        after ``forget`` no replica may still serve the task from memory."""
        self.skip(partition, offset)
        task_id = key.split(b"\x00", 1)[0].decode("utf-8", "replace")
        if key in self.keys.get(task_id, ()):
            self._drop(task_id)

    def _drop(self, task_id: str) -> None:
        self.tasks.pop(task_id, None)
        self.links.pop(task_id, None)
        self.continued.pop(task_id, None)
        self.keys.pop(task_id, None)

    def _apply(self, entry: Entry, version: int) -> bool:
        current = self.tasks.get(entry.task_id)
        if current is not None and current.owner != entry.owner:
            return False  # another owner's task id: nobody writes over it
        if entry.kind == DELETE:
            self._drop(entry.task_id)
            return current is not None
        if entry.kind == PAUSE:
            if entry.link is None:
                return False
            self.links[entry.task_id] = (entry.owner, entry.link)
            return True
        if entry.kind == CONTINUED:
            if current is None or entry.link is None or not entry.message_id:
                return False
            self.continued.setdefault(entry.task_id, {})[entry.message_id] = entry.link.token_id
            return True
        if entry.kind == CANCEL:
            # A cancel overwrites any unfinished task without a version check, as the SDK's
            # contract says; a finished or unknown one stays as it is.
            if current is None or current.state in TERMINAL:
                return False
        elif entry.prev == 0:
            if current is not None:
                return False  # two first writes of one task id: the first on the log wins
        elif current is None or current.version != entry.prev:
            return False
        stored = current or StoredTask(entry.owner, 0, "", b"")
        stored.version, stored.state, stored.task = version, entry.state, entry.task
        if entry.event:
            stored.events.append((version, entry.event))
        self.tasks[entry.task_id] = stored
        return True

    def owned(self, task_id: str, owner: str) -> StoredTask | None:
        """The task, if ``owner`` owns it (another owner's task is as good as absent)."""
        stored = self.tasks.get(task_id)
        return stored if stored is not None and stored.owner == owner else None

    def link(self, task_id: str, owner: str) -> PauseLink | None:
        found = self.links.get(task_id)
        return found[1] if found is not None and found[0] == owner else None

    def continued_pause(self, task_id: str, owner: str, message_id: str) -> str | None:
        """The token id of the pause ``message_id`` continued on ``task_id``, if it did."""
        if self.owned(task_id, owner) is None:
            return None
        return self.continued.get(task_id, {}).get(message_id)

    def events_after(self, task_id: str, after: int) -> Iterator[tuple[int, bytes]]:
        stored = self.tasks.get(task_id)
        for version, event in stored.events if stored is not None else ():
            if version > after:
                yield version, event


__all__ = [
    "CANCEL",
    "CONTINUED",
    "DELETE",
    "INPUT_REQUIRED",
    "PAUSE",
    "SAVE",
    "TERMINAL",
    "BadTaskRecord",
    "Entry",
    "PauseLink",
    "StoredTask",
    "TaskFold",
]
