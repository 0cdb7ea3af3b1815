"""The exact count of the chaos tests: what the answers log obliges the workers to write, and
every difference between that and what they wrote.

- The answers topic itself is the list of inputs. Read back at the end, in partition order, it
  says what each record must produce (:func:`expected_from_log`): the first routed answer of a
  token resumes it; a later record of that same answer id produces nothing (a retry, or a
  duplicate publish); any other answer for the token is refused ``already_consumed``; and a
  record on another partition than its thread's is refused ``misrouted``, whatever else it is.
  Pauses that are never answered must expire, once.
- The outputs (``TokenConsumed``, ``TurnResumed``, ``PauseExpired``, ``AnswerRejected``) are
  read ``read_committed`` and compared with that as multisets (:func:`check_outputs`), so an
  output written twice -- such as the rejection a new owner repeats because it re-read answers
  from before the previous owner's last commit -- is a difference just like a missing one.

Counting against the log rather than against what a test meant to publish keeps the count exact
when a publish is retried (a retry may write its record twice) and whatever the race between
competing publishers: the winner is whichever answer the log holds first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import ConsumerRecord

from tests.deployment import Deployment
from tests.integration.worker_support import committed_events, of_type
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    PauseExpired,
    TokenConsumed,
    TurnResumed,
)
from turnlog.kafka.partitioning import partition_for
from turnlog.tokens import peek_claims
from turnlog.wire.codec import decode


@dataclass(frozen=True)
class AnswerRecord:
    """One record of the answers topic, as far as the count needs it."""

    partition: int
    offset: int
    answer_id: str
    thread_id: str
    token_id: str
    submitted: float = 0.0  # unix time the answer was made (to measure how long it waited)

    @classmethod
    def of(cls, record: ConsumerRecord[bytes, bytes]) -> AnswerRecord:
        a = decode(record.value, AnswerSubmitted)
        token_id = peek_claims(a.token)["jti"]
        submitted = a.submitted_at.timestamp()
        return cls(record.partition, record.offset, a.answer_id, a.thread_id, token_id, submitted)


@dataclass
class Expected:
    """What the answers log obliges the workers to write."""

    #: token id -> the answer id that must resume it (the first routed answer of the token)
    resumes: dict[str, str] = field(default_factory=dict)
    #: (answer id, reason, token id) -> how many rejections of it (one per refused record)
    rejections: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: token ids that must be expired (no answer was ever published for them)
    expired: set[str] = field(default_factory=set)
    #: records that must produce nothing: later copies of the answer that resumed
    replays: int = 0
    #: records on another partition than their thread's
    misrouted: int = 0


def expected_from_log(
    answers: Iterable[AnswerRecord], partitions: int, expiring: Iterable[str]
) -> Expected:
    """The outputs the resume contract demands of ``answers`` -- each signed and stated right,
    so that only routing, order and repetition decide -- and of the ``expiring`` pauses."""
    expected = Expected(expired=set(expiring))
    spent: dict[str, str] = {}
    for a in sorted(answers, key=lambda a: (a.partition, a.offset)):
        if a.token_id in expected.expired:
            raise ValueError(f"an expiring pause must never be answered: {a}")
        if partition_for(a.thread_id, partitions) != a.partition:
            expected.rejections[(a.answer_id, "misrouted", a.token_id)] += 1
            expected.misrouted += 1
        elif a.token_id not in spent:
            spent[a.token_id] = a.answer_id
        elif spent[a.token_id] == a.answer_id:
            expected.replays += 1
        else:
            expected.rejections[(a.answer_id, "already_consumed", a.token_id)] += 1
    expected.resumes = spent
    return expected


@dataclass
class Outputs:
    """Everything the workers committed, as multisets."""

    consumed: Counter[tuple[str, str, str]]  # (token id, answer id, outcome)
    resumed: Counter[tuple[str, str]]  # (token id, answer id)
    expired: Counter[str]  # token id
    rejections: Counter[tuple[str, str, str]]  # (answer id, reason, token id)
    #: answer id -> unix time its resume was made (the worker's clock as it handled the batch)
    resumed_at: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, events: Iterable[Any]) -> Outputs:
        events = list(events)
        turns = of_type(events, TurnResumed)
        return cls(
            consumed=Counter(
                (c.token_id, c.answer_id, c.outcome) for c in of_type(events, TokenConsumed)
            ),
            resumed=Counter((t.token_id, t.answer_id) for t in turns),
            expired=Counter(e.token_id for e in of_type(events, PauseExpired)),
            rejections=Counter(
                (r.answer_id, r.reason, r.token_id or "") for r in of_type(events, AnswerRejected)
            ),
            resumed_at={t.answer_id: t.occurred_at.timestamp() for t in turns},
        )

    @classmethod
    async def read(cls, bootstrap: str, dep: Deployment) -> Outputs:
        events: list[Any] = []
        for topic in (dep.topics.consumptions, dep.topics.resumed, dep.topics.rejections):
            events += await committed_events(bootstrap, topic)
        return cls.of(events)


def _differences(name: str, want: Counter[Any], got: Counter[Any]) -> list[str]:
    missing, extra = want - got, got - want
    found = []
    if missing:
        found.append(f"{name}: {sum(missing.values())} missing, e.g. {sorted(missing)[:3]}")
    if extra:
        found.append(
            f"{name}: {sum(extra.values())} written beyond what the inputs call for, e.g. "
            + ", ".join(f"{k} {got[k]} times, not {want[k]}" for k in sorted(extra)[:3])
        )
    return found


def check_outputs(expected: Expected, outputs: Outputs) -> list[str]:
    """Every difference between what the inputs call for and what was written; [] is exact."""
    consumed = Counter({(t, a, "resumed"): 1 for t, a in expected.resumes.items()})
    consumed.update({(t, "", "expired"): 1 for t in expected.expired})
    return [
        *_differences("TokenConsumed", consumed, outputs.consumed),
        *_differences("TurnResumed", Counter(expected.resumes.items()), outputs.resumed),
        *_differences("PauseExpired", Counter(expected.expired), outputs.expired),
        *_differences("AnswerRejected", expected.rejections, outputs.rejections),
    ]
