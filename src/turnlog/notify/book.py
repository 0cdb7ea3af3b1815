"""What the notifier knows of the pauses, and the reminders it owes (pure: no I/O, no clock).

A reminder is no event on any topic, so where a lane stands with them is kept beside its
offsets: the committed offset of each pauses partition carries, as its metadata, the
:class:`Mark` of the last reminder handled there -- reminders are handled in the order they
fall due, so every reminder of that partition up to the mark is done. At a start, the pauses
replayed from the log (:class:`Book`) and the marks read back say which reminders are still
owed: none is kept only in a timer.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from turnlog.notify.payload import PauseFacts

_MARK_PREFIX: Final = "turnlog-notify/1 remind<="


@dataclass(frozen=True, slots=True, order=True)
class Mark:
    """A reminder's place in due order: when it fell due, then its token id (ties)."""

    due: datetime
    token_id: str = ""

    def encode(self) -> str:
        stamp = self.due.astimezone(UTC).isoformat(timespec="microseconds")
        return f"{_MARK_PREFIX}{stamp}|{self.token_id}"

    @classmethod
    def decode(cls, text: str | None) -> Mark | None:
        """The mark in a committed offset's metadata; ``None`` for anything else."""
        if not text or not text.startswith(_MARK_PREFIX):
            return None
        stamp, _, token_id = text[len(_MARK_PREFIX) :].partition("|")
        try:
            due = datetime.fromisoformat(stamp)
        except ValueError:
            return None
        return cls(due, token_id) if due.tzinfo is not None else None


@dataclass(slots=True)
class Book:
    """The pauses seen (by token id), the records that hold them, and the tokens spent."""

    pauses: dict[str, PauseFacts] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)
    #: the pauses record key of each pause's tokens (several for a pause of several calls)
    keys: dict[bytes, list[str]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    #: the offset of each pause's record on its pauses partition: a closing notice waits
    #: until a lane has handled it (the pause's own notice goes first)
    offsets: dict[str, int] = field(default_factory=dict)
    #: every call (token id) of each call's pause, in the order of the calls
    calls: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def learn(
        self,
        facts: PauseFacts,
        partition: int,
        key: bytes | None,
        offset: int = -1,
        calls: tuple[str, ...] = (),
    ) -> None:
        self.pauses[facts.token_id] = facts
        self.partitions[facts.token_id] = partition
        self.offsets[facts.token_id] = offset
        self.calls[facts.token_id] = calls or (facts.token_id,)
        if key is not None:
            tokens = self.keys.setdefault(key, [])
            if facts.token_id not in tokens:
                tokens.append(facts.token_id)

    def forget(self, key: bytes | None) -> list[str]:
        """A tombstone on the pauses topic: the thread was forgotten; so is its pause here.
        Returns the token ids forgotten."""
        forgotten = list(self.keys.get(key, [])) if key is not None else []
        for token_id in self.keys.pop(key, []) if key is not None else []:
            self.pauses.pop(token_id, None)
            self.partitions.pop(token_id, None)
            self.offsets.pop(token_id, None)
            self.calls.pop(token_id, None)
        return forgotten

    def close(self, token_id: str) -> None:
        self.closed.add(token_id)

    def is_open(self, token_id: str) -> bool:
        return token_id in self.pauses and token_id not in self.closed

    def open_pauses(self) -> list[tuple[PauseFacts, int]]:
        return [(f, self.partitions[t]) for t, f in self.pauses.items() if t not in self.closed]

    def copy(self) -> Book:
        keys = {key: list(tokens) for key, tokens in self.keys.items()}
        return Book(
            dict(self.pauses),
            dict(self.partitions),
            keys,
            set(self.closed),
            dict(self.offsets),
            dict(self.calls),
        )


@dataclass(frozen=True, slots=True)
class Due:
    """A reminder whose moment came: ``facts`` is ``None`` when there is nothing to send any
    more (answered, expired or forgotten meanwhile), but its mark advances all the same."""

    partition: int
    mark: Mark
    facts: PauseFacts | None


class Reminders:
    """The reminders one lane owes, in due order, and how far each partition's are done."""

    def __init__(self, lead: timedelta | None, marks: dict[int, Mark | None]) -> None:
        self.lead = lead
        self.marks = dict(marks)
        self._heap: list[tuple[Mark, int]] = []
        self._queued: set[str] = set()

    def due_at(self, facts: PauseFacts) -> datetime | None:
        """When ``facts``' reminder falls due; ``None`` when it has none: no lead, or a window
        no longer than the lead (the notice of the pause already says how little time is left)."""
        if self.lead is None:
            return None
        due = facts.deadline - self.lead
        return due if due > facts.recorded_at else None

    def offer(self, facts: PauseFacts, partition: int) -> bool:
        """Owe ``facts``' reminder unless it has none, is queued, or its partition's mark says
        it was handled. Returns whether it is now owed."""
        due = self.due_at(facts)
        if due is None or facts.token_id in self._queued:
            return False
        mark = Mark(due, facts.token_id)
        done = self.marks.get(partition)
        if done is not None and mark <= done:
            return False
        heapq.heappush(self._heap, (mark, partition))
        self._queued.add(facts.token_id)
        return True

    def next_due(self) -> datetime | None:
        return self._heap[0][0].due if self._heap else None

    def pop_due(self, now: datetime, book: Book) -> Due | None:
        """The earliest reminder due by ``now``, if any; its facts only if its pause is still
        open and inside its window."""
        if not self._heap or self._heap[0][0].due > now:
            return None
        mark, partition = heapq.heappop(self._heap)
        self._queued.discard(mark.token_id)
        facts = book.pauses.get(mark.token_id)
        live = facts is not None and book.is_open(mark.token_id) and now < facts.deadline
        return Due(partition, mark, facts if live else None)

    def done(self, due: Due) -> None:
        current = self.marks.get(due.partition)
        if current is None or due.mark > current:
            self.marks[due.partition] = due.mark

    def metadata(self, partition: int) -> str:
        """What the commit of ``pauses[partition]`` carries: its mark (empty: none yet)."""
        mark = self.marks.get(partition)
        return mark.encode() if mark is not None else ""

    def __len__(self) -> int:
        return len(self._heap)
