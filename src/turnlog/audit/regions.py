"""The cross-region judgement: what a failover from region A to region B lost or doubled.

Pure: two regions' facts in (:class:`RegionFacts`, read by :mod:`turnlog.audit.region_scan`),
a :class:`RegionReport` out. A is the region that was lost (read once its brokers are back, or
from their disks); B the region that took over.

MirrorMaker copies each record's key, value and timestamp unchanged, so a record of A is in B
exactly when a record with the same topic, partition, key, value and timestamp is. What A holds
and B lacks is the **window** -- the RPO, the mirror's lag at the loss -- and the report names
everything in it that matters:

- **answers lost**: answers A took that never reached B. B never decided them; whoever sent
  one must send it again (to B), where it is judged like any other answer.
- **pauses missing in B**: pauses recorded in A that B never had. An answer to one that
  reaches B is refused ``no_recorded_turn_state`` (counted here as refused for the window),
  never guessed at; the agent must pause again.
- **tokens resumed in both**: a token with a resumed turn in A and one B wrote itself (not a
  copy of A's: a copy has A's event id *and* A's ``occurred_at``). The event id of a resume is
  derived from its token and answer only (``derived_event_id("resumed", token, answer)``), not
  from the region, so when both regions resumed the same answer a reader that deduplicates by
  event id sees the turn once (``same_event``); when they resumed different answers it sees two
  -- exactly once broken across regions, by name, for the operator to settle.
- **resumes not mirrored**: turns A resumed whose resumed record never reached B (a reader in
  B never sees them; A's ledger said spent, B's did not know).

What is outside the window is not judged here: each region's own log is ``turnlog audit``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: The five roles, in the order the report lists them.
ROLES = ("pauses", "answers", "consumptions", "resumed", "rejections")
#: The refusal of an answer whose pause B never had (``contracts/refusals.py``).
NO_TURN_STATE = "no_recorded_turn_state"
ALREADY_CONSUMED = "already_consumed"


@dataclass(frozen=True, slots=True)
class Copy:
    """A record as MirrorMaker carries it: what makes A's record and its copy in B equal."""

    role: str
    partition: int
    key: bytes | None
    #: a digest of the value (``b""`` for a tombstone)
    digest: bytes
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Resume:
    token_id: str
    answer_id: str
    event_id: str
    #: the resume's ``occurred_at`` (milliseconds): a copy keeps it, a resume made again does not
    occurred_ms: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Refusal:
    answer_id: str
    token_id: str | None
    reason: str
    event_id: str
    occurred_ms: int
    timestamp_ms: int


@dataclass
class RegionFacts:
    """What one region's five topics hold, as far as the cross-region judgement needs."""

    name: str
    records: set[Copy] = field(default_factory=set)
    #: token id -> the pause record's timestamp (every call of a group pause has its token)
    pauses: dict[str, int] = field(default_factory=dict)
    #: answer id -> (token id, record timestamp)
    answers: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    resumes: list[Resume] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    #: partitions (``topic[p]``) a transaction still held open when they were read: what the
    #: region wrote after it was not seen
    unsettled: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Doubled:
    """A token resumed in both regions."""

    token_id: str
    answers_a: tuple[str, ...]
    answers_b: tuple[str, ...]
    #: every resume of it in B carries an event id one of A's carries: a reader deduplicating
    #: by event id sees the turn once
    same_event: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "token_id": self.token_id,
            "answers_a": list(self.answers_a),
            "answers_b": list(self.answers_b),
            "same_event": self.same_event,
        }


@dataclass
class RegionReport:
    source: str
    target: str
    #: per role, A's records that B lacks
    unmirrored: dict[str, int] = field(default_factory=dict)
    #: the first and last record timestamp (ms) of what A holds and B lacks; None: nothing
    window: tuple[int, int] | None = None
    #: (answer id, token id, timestamp ms), oldest first
    answers_lost: list[tuple[str, str | None, int]] = field(default_factory=list)
    #: (token id, timestamp ms), oldest first
    pauses_missing: list[tuple[str, int]] = field(default_factory=list)
    doubled: list[Doubled] = field(default_factory=list)
    #: (token id, answer id) of turns A resumed whose resume B never had
    resumes_unmirrored: list[tuple[str, str]] = field(default_factory=list)
    #: answers B refused itself because it never had their pause, which A had
    refused_unmirrored_pause: list[str] = field(default_factory=list)
    #: answers B refused itself as already consumed (replays the mirrored ledger stopped)
    refused_spent: int = 0
    judged: dict[str, int] = field(default_factory=dict)
    #: per region, the partitions an open transaction kept from being read to their ends
    unsettled: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Nothing lost, nothing missing, nothing resumed twice -- and both regions read to
        their ends (an open transaction hides what follows it)."""
        unread = any(self.unsettled.values())
        return not (self.answers_lost or self.pauses_missing or self.doubled or unread)

    def summary(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "window": None if self.window is None else list(self.window),
            "unmirrored": dict(self.unmirrored),
            "answers_lost": len(self.answers_lost),
            "pauses_missing": len(self.pauses_missing),
            "tokens_resumed_in_both": len(self.doubled),
            "doubled_with_distinct_events": sum(not d.same_event for d in self.doubled),
            "resumes_unmirrored": len(self.resumes_unmirrored),
            "refused_unmirrored_pause": len(self.refused_unmirrored_pause),
            "refused_spent_in_target": self.refused_spent,
            "judged": dict(self.judged),
            "unsettled": {k: list(v) for k, v in self.unsettled.items() if v},
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            **self.summary(),
            "answers_lost": [
                {"answer_id": a, "token_id": t, "timestamp_ms": ts}
                for a, t, ts in self.answers_lost
            ],
            "pauses_missing": [
                {"token_id": t, "timestamp_ms": ts} for t, ts in self.pauses_missing
            ],
            "tokens_resumed_in_both": [d.as_dict() for d in self.doubled],
            "resumes_unmirrored": [
                {"token_id": t, "answer_id": a} for t, a in self.resumes_unmirrored
            ],
            "refused_unmirrored_pause": list(self.refused_unmirrored_pause),
        }


def judge_regions(a: RegionFacts, b: RegionFacts) -> RegionReport:
    """What the failover from ``a`` to ``b`` lost and doubled (see the module docstring)."""
    report = RegionReport(a.name, b.name)
    report.unsettled = {a.name: list(a.unsettled), b.name: list(b.unsettled)}
    report.judged = {
        "records_a": len(a.records),
        "records_b": len(b.records),
        "answers_a": len(a.answers),
        "answers_b": len(b.answers),
    }
    missing = a.records - b.records
    report.unmirrored = {role: sum(1 for c in missing if c.role == role) for role in ROLES}
    if missing:
        stamps = [c.timestamp_ms for c in missing]
        report.window = (min(stamps), max(stamps))
    report.answers_lost = sorted(
        (
            (answer, token, ts)
            for answer, (token, ts) in a.answers.items()
            if answer not in b.answers
        ),
        key=lambda x: (x[2], x[0]),
    )
    report.pauses_missing = sorted(
        ((t, ts) for t, ts in a.pauses.items() if t not in b.pauses), key=lambda x: (x[1], x[0])
    )
    copies = {(r.event_id, r.occurred_ms) for r in a.resumes}
    own_b = [r for r in b.resumes if (r.event_id, r.occurred_ms) not in copies]
    report.doubled = _doubled(a.resumes, own_b)
    b_resumed = {r.token_id for r in b.resumes}
    report.resumes_unmirrored = sorted(
        {(r.token_id, r.answer_id) for r in a.resumes if r.token_id not in b_resumed}
    )
    refusal_copies = {(r.event_id, r.occurred_ms) for r in a.refusals}
    own_refusals = [r for r in b.refusals if (r.event_id, r.occurred_ms) not in refusal_copies]
    report.refused_unmirrored_pause = sorted(
        r.answer_id
        for r in own_refusals
        if r.reason == NO_TURN_STATE
        and r.token_id is not None
        and r.token_id in a.pauses
        and r.token_id not in b.pauses
    )
    report.refused_spent = sum(1 for r in own_refusals if r.reason == ALREADY_CONSUMED)
    return report


def _doubled(in_a: Iterable[Resume], own_b: Iterable[Resume]) -> list[Doubled]:
    by_token_a: dict[str, list[Resume]] = {}
    for r in in_a:
        by_token_a.setdefault(r.token_id, []).append(r)
    by_token_b: dict[str, list[Resume]] = {}
    for r in own_b:
        if r.token_id in by_token_a:
            by_token_b.setdefault(r.token_id, []).append(r)
    found = []
    for token, resumes_b in sorted(by_token_b.items()):
        events_a = {r.event_id for r in by_token_a[token]}
        found.append(
            Doubled(
                token,
                tuple(sorted({r.answer_id for r in by_token_a[token]})),
                tuple(sorted({r.answer_id for r in resumes_b})),
                all(r.event_id in events_a for r in resumes_b),
            )
        )
    return found


def window_line(report: RegionReport) -> str:
    """One line naming the window (its bounds as ISO times, what it held)."""

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"

    if report.window is None:
        return f"window: empty (every record of {report.source} is in {report.target})"
    first, last = report.window
    held = ", ".join(f"{n} {role}" for role, n in report.unmirrored.items() if n)
    return f"window: {iso(first)} .. {iso(last)} ({(last - first) / 1000:.3f} s): {held}"
