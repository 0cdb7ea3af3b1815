"""The notices a webhook has not taken yet, in the order they must reach it (pure: no I/O).

A notice that could not be delivered is written to the notifier's own compacted topic
(:mod:`~turnlog.notify.undelivered`) before the offset of the record that made it is
committed, and stays there until it is delivered (a tombstone) or given up (a dead letter in
its place, with its reason). :class:`Backlog` is one lane's copy in memory: the notices in the
order they were made (``seq``), and for each pause's call (its token id) whether one of its
notices waits -- a later notice of that call waits behind it, so a receiver always hears
"recorded" before "reminder" before "resumed" or "expired".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

WAITING: Final = "waiting"
DEAD: Final = "dead"
#: The version of the value's JSON; a reader refuses (skips, counted) any other.
FORMAT: Final = 1


@dataclass(frozen=True, slots=True)
class Undelivered:
    """One notice not yet taken by its webhook (or, ``state`` ``dead``, given up)."""

    lane: str
    event_id: str
    token_id: str
    kind: str
    #: the exact bytes the webhook is to receive (signed afresh at every attempt)
    body: bytes
    #: the order in which the lane made its notices
    seq: int
    first_at: datetime
    #: past this, the notice is given up: its first attempt plus the horizon (a reminder:
    #: its pause's deadline, if sooner -- a reminder after the window closed is wrong)
    give_up_at: datetime
    state: str = WAITING
    #: the last attempt's failure (waiting), or why it was given up (dead)
    reason: str = ""
    #: the notice's thread: ``turnlog forget`` finds the thread's notices by it (a notice's
    #: body is content of the thread, and a dead letter keeps it)
    thread_id: str = ""

    @property
    def key(self) -> bytes:
        return f"{self.lane}|{self.event_id}".encode()

    def dead(self, reason: str, at: datetime) -> Undelivered:
        return replace(self, state=DEAD, reason=f"{reason} ({_stamp(at)})")

    def encode(self) -> bytes:
        data = {
            "format": FORMAT,
            "lane": self.lane,
            "event_id": self.event_id,
            "token_id": self.token_id,
            "kind": self.kind,
            "body": self.body.decode("utf-8"),
            "seq": self.seq,
            "first_at": _stamp(self.first_at),
            "give_up_at": _stamp(self.give_up_at),
            "state": self.state,
            "reason": self.reason,
            "thread_id": self.thread_id,
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, value: bytes) -> Undelivered | None:
        """The record's notice; ``None`` for anything this version did not write."""
        try:
            data: Any = json.loads(value)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                return None
            return cls(
                lane=str(data["lane"]),
                event_id=str(data["event_id"]),
                token_id=str(data["token_id"]),
                kind=str(data["kind"]),
                body=str(data["body"]).encode("utf-8"),
                seq=int(data["seq"]),
                first_at=_moment(data["first_at"]),
                give_up_at=_moment(data["give_up_at"]),
                state=DEAD if data.get("state") == DEAD else WAITING,
                reason=str(data.get("reason") or ""),
                thread_id=str(data.get("thread_id") or ""),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _moment(text: Any) -> datetime:
    moment = datetime.fromisoformat(str(text))
    if moment.tzinfo is None:
        raise ValueError("a moment without its zone")
    return moment


@dataclass(slots=True)
class _Slot:
    entry: Undelivered
    #: failures of this notice while others got through (the receiver refuses this one)
    failures: int = 0
    not_before: datetime | None = None


class Backlog:
    """One lane's undelivered notices, in the order they were made."""

    def __init__(self, entries: list[Undelivered] | None = None) -> None:
        self._slots: dict[str, _Slot] = {}
        self._tokens: Counter[str] = Counter()
        self._last_seq = 0
        for entry in sorted(entries or [], key=lambda e: e.seq):
            self.add(entry)

    def add(self, entry: Undelivered) -> bool:
        """Keep ``entry``; ``False`` if a notice of its id already waits (a record read again
        after a restart makes the same notice: it waits once)."""
        if entry.event_id in self._slots:
            return False
        self._slots[entry.event_id] = _Slot(entry)
        self._tokens[entry.token_id] += 1
        self._last_seq = max(self._last_seq, entry.seq)
        return True

    def remove(self, event_id: str) -> Undelivered | None:
        slot = self._slots.pop(event_id, None)
        if slot is None:
            return None
        self._tokens[slot.entry.token_id] -= 1
        if self._tokens[slot.entry.token_id] <= 0:
            del self._tokens[slot.entry.token_id]
        return slot.entry

    def next_seq(self, clock_ns: int) -> int:
        """A ``seq`` after every one kept: the clock's nanoseconds, or one more than the last."""
        self._last_seq = max(self._last_seq + 1, clock_ns)
        return self._last_seq

    def holds(self, token_id: str) -> bool:
        """Whether a notice of the call ``token_id`` waits (a newer one must wait behind it)."""
        return token_id in self._tokens

    def of_tokens(self, tokens: set[str]) -> list[Undelivered]:
        return [s.entry for s in self._slots.values() if s.entry.token_id in tokens]

    def expired(self, now: datetime) -> list[Undelivered]:
        return [s.entry for s in self._slots.values() if s.entry.give_up_at <= now]

    def in_order(self) -> Iterator[Undelivered]:
        """The notices in the order they were made (a copy: the caller may remove as it goes)."""
        return iter([s.entry for s in self._slots.values()])

    def failed(self, event_id: str) -> int:
        """Count a failure of this notice alone; returns its failures in a row."""
        slot = self._slots[event_id]
        slot.failures += 1
        return slot.failures

    def rest(self, event_id: str, until: datetime) -> None:
        """Try this notice no sooner than ``until``."""
        self._slots[event_id].not_before = until

    def resting(self, event_id: str, now: datetime) -> bool:
        slot = self._slots.get(event_id)
        return slot is not None and slot.not_before is not None and now < slot.not_before

    def rest_ends(self) -> list[datetime]:
        return [s.not_before for s in self._slots.values() if s.not_before is not None]

    def oldest(self) -> datetime | None:
        return min((s.entry.first_at for s in self._slots.values()), default=None)

    def __len__(self) -> int:
        return len(self._slots)


@dataclass(frozen=True, slots=True)
class Summary:
    """What the topic of undelivered notices holds, over every lane: for ``turnlog status``."""

    waiting: int = 0
    oldest: datetime | None = None
    dead: int = 0


def summarize(latest: dict[bytes, Undelivered]) -> Summary:
    """The summary of the topic's latest record per key (tombstones already dropped)."""
    live = [e for e in latest.values() if e.state == WAITING]
    dead = sum(1 for e in latest.values() if e.state == DEAD)
    return Summary(len(live), min((e.first_at for e in live), default=None), dead)
