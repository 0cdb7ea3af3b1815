"""The exactly-once invariant, judged from what the topics hold -- pure, no Kafka.

:mod:`turnlog.audit.scan` reads the five topics ``read_committed`` and hands each partition's
facts here; :func:`judge` says whether the log is what the resume contract promises and, where
it is not, every violation with the ids an operator needs to find it. The rules are those of
``docs/guarantees.md``:

- every answer below the worker group's committed offset has exactly one outcome: resumed (a
  ``TokenConsumed`` and its ``TurnResumed``) or refused (one ``AnswerRejected``). The outcome
  of an answer is written on the partition the answer was read from, so an answer is known by
  its partition and its answer id; a retry of the same answer id adds no second resume (a
  retry of a refused answer is refused again, so an answer may be refused once per record);
  an answer to one call of a pause of several is *held* (its ``TokenConsumed`` says
  ``held``) until the last call's answer resumes the turn;
- every ``TokenConsumed`` that says ``resumed`` has exactly one ``TurnResumed``, and the reverse;
  no token is consumed twice, resumed twice, or both resumed and expired;
- each expiry once: a ``PauseExpired`` with its ``TokenConsumed`` (``expired``), once;
- nothing is resumed for a thread after it was forgotten;
- every claim on a resumed turn (a ``ContinuationRequested``) below the committed offset has
  its decision: a ledger row naming its claim id, or one ``AnswerRejected`` naming it; and a
  resumed turn has one holder at a time -- a row that moves the claim to another claimant
  comes from a ``retake`` of a claim never finished, never from a plain ``claim``. The ledger
  rows a claim writes repeat the spend they extend (same token, answer and outcome): they are
  claim rows, not second spends, and after compaction the newest of them is the spend's
  evidence.

What the log can no longer show is not judged: ``resumed`` and ``rejections`` age out with their
retention, so on a partition whose output topics have lost their first records the answers
written before the oldest record left are counted as beyond retention; a thread without any
pause left on the pauses topic was forgotten (its tombstones and compaction removed the facts
the pairing needs), so its outputs are not paired. Both are counted in the report, never
silently dropped.

The ledger is bounded (``contracts/ledger.py``): a consumption whose token expired before the
retirement line has been tombstoned by its owner, so a ``TurnResumed`` or ``PauseExpired`` of
such a token without its consumption is a retired row, counted as ``retired``, not a missing
one; and a later copy of its answer, refused by the clock (``token_expired``), is no second
outcome. The line is the one the workers use, from the auditor's settings and clock.

Two ``TurnResumed`` (or ``AnswerRejected``) records with the same ``event_id`` are one event
delivered twice -- what a partly visible transaction, or a repair racing one, can leave -- and
a reader that deduplicates on the event id sees it once. They are still reported (kind
``*_twice`` with ``same_event`` in the ids), since the invariant is about the log.

It is one module, a little over the usual length, because every rule reads the same grouped
outputs of one partition: side by side, the rules read as the list above.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from turnlog.contracts.events import AnswerRejected, PauseExpired, TokenConsumed, TurnResumed


class Kind(StrEnum):
    """Every way the log can break the invariant, by the name the audit reports."""

    #: an answer below the committed offset with neither a resume nor a refusal (skipped)
    ANSWER_WITHOUT_OUTCOME = "answer_without_outcome"
    #: an answer that both resumed its turn and was refused
    ANSWER_RESUMED_AND_REFUSED = "answer_resumed_and_refused"
    #: one answer refused more often than it was published (each record at most once)
    REFUSED_TWICE = "refused_twice"
    #: a token spent by an answer whose resumed turn is not on the log (a lost resume)
    CONSUMED_WITHOUT_RESUME = "consumed_without_resume"
    #: a resumed turn whose token's consumption is not on the log
    RESUMED_WITHOUT_CONSUMPTION = "resumed_without_consumption"
    #: more than one consumption of one token
    TOKEN_CONSUMED_TWICE = "token_consumed_twice"
    #: more than one resumed turn for one token
    RESUMED_TWICE = "resumed_twice"
    #: a token both resumed and expired
    EXPIRED_AND_RESUMED = "expired_and_resumed"
    #: more than one ``PauseExpired`` for one token
    EXPIRED_TWICE = "expired_twice"
    #: a ``PauseExpired`` without its consumption, or an expiry's consumption without the event
    EXPIRY_INCOMPLETE = "expiry_incomplete"
    #: a turn resumed for a thread after its pause was forgotten
    RESUMED_AFTER_FORGET = "resumed_after_forget"
    #: a record on an output topic that is not a turnlog event of that topic
    OUTPUT_UNDECODABLE = "output_undecodable"
    #: a claim on a resumed turn below the committed offset with neither a grant nor a refusal
    CLAIM_WITHOUT_DECISION = "claim_without_decision"
    #: a resumed turn whose claim passed to another claimant without a retake, or after done
    CONTINUED_TWICE = "continued_twice"


@dataclass(frozen=True, slots=True)
class Place:
    """Where a record is: its partition, offset and record timestamp (milliseconds)."""

    partition: int
    offset: int
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class AnswerSeen:
    """One answers record, as far as the audit reads it. ``answer_id`` is the value's, or --
    for a record that does not decode -- the ``topic:partition:offset`` id the worker's refusal
    of it carries; ``token_id`` the token's unverified ``jti`` (None when unreadable)."""

    place: Place
    answer_id: str
    thread_id: str | None = None
    token_id: str | None = None
    #: the token's unverified ``exp``, in milliseconds (None when unreadable)
    expires_at_ms: int | None = None
    #: for a claim (``ContinuationRequested``): its action, claim / retake / finish; its
    #: ``answer_id`` is then the claim id, which its decision names
    claim_action: str | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    kind: Kind
    partition: int
    detail: str
    ids: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "partition": self.partition,
            "detail": self.detail,
            **dict(self.ids),
        }

    def line(self) -> str:
        ids = " ".join(f"{k}={v}" for k, v in self.ids.items())
        return f"{self.kind.value} partition {self.partition}: {self.detail}" + (
            f" ({ids})" if ids else ""
        )


@dataclass
class PartitionFacts:
    """What partition ``partition`` of every topic holds, read ``read_committed``."""

    partition: int
    #: the worker group's committed offset on answers[p]; None: nothing committed yet
    committed: int | None = None
    answers: list[AnswerSeen] = field(default_factory=list)
    consumed: list[tuple[Place, TokenConsumed]] = field(default_factory=list)
    resumed: list[tuple[Place, TurnResumed]] = field(default_factory=list)
    expired: list[tuple[Place, PauseExpired]] = field(default_factory=list)
    rejected: list[tuple[Place, AnswerRejected]] = field(default_factory=list)
    #: output records that did not decode as what their topic carries: (topic role, place, why)
    undecodable: list[tuple[str, Place, str]] = field(default_factory=list)
    #: (thread, checkpoint) -> the pause key's records in log order: (timestamp ms, tombstone)
    pause_keys: dict[tuple[str, str], list[tuple[int, bool]]] = field(default_factory=dict)
    #: the oldest record timestamp the retention-limited outputs can still vouch for
    #: (None: nothing has aged out of resumed[p] or rejections[p])
    horizon_ms: int | None = None
    #: the ledger's retirement line when the log was read: tokens expiring before it may have
    #: had their consumption retired (None: no row is taken as retired)
    retire_before_ms: int | None = None


@dataclass
class Report:
    """The verdict over every partition: counts, and each violation found."""

    partitions: int = 0
    answers_judged: int = 0
    resumed: int = 0
    refused: int = 0
    expired: int = 0
    #: answers at or above the committed offset: not handled yet, so not judged
    not_yet_handled: int = 0
    #: answers older than what the retention-limited outputs still hold
    beyond_retention: int = 0
    #: threads whose outputs were not paired because the thread was forgotten
    forgotten_threads: int = 0
    #: outcomes whose token's consumption was retired (its window and the leeway long closed)
    retired: int = 0
    #: claims on resumed turns judged (below the committed offset), and of them refused
    claims_judged: int = 0
    claims_refused: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return not self.violations

    def by_kind(self) -> dict[str, int]:
        counts = Counter(v.kind.value for v in self.violations)
        return {k.value: counts.get(k.value, 0) for k in Kind}

    def summary(self) -> dict[str, Any]:
        return {
            "holds": self.holds,
            "partitions": self.partitions,
            "answers_judged": self.answers_judged,
            "resumed": self.resumed,
            "refused": self.refused,
            "expired": self.expired,
            "not_yet_handled": self.not_yet_handled,
            "beyond_retention": self.beyond_retention,
            "forgotten_threads": self.forgotten_threads,
            "retired": self.retired,
            "claims_judged": self.claims_judged,
            "claims_refused": self.claims_refused,
            "violations": len(self.violations),
            "violations_by_kind": self.by_kind(),
        }

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary(), "violation_list": [v.as_dict() for v in self.violations]}


def judge(partitions: Iterable[PartitionFacts]) -> Report:
    """The invariant's verdict on every partition given."""
    report = Report()
    for facts in partitions:
        report.partitions += 1
        _judge_partition(facts, report)
    return report


def _forgotten(facts: PartitionFacts) -> set[str]:
    """Threads with a tombstone on pauses, or outputs but no pause left: forgotten."""
    live: set[str] = set()
    forgotten: set[str] = set()
    for (thread, _), history in facts.pause_keys.items():
        if any(tomb for _, tomb in history):
            forgotten.add(thread)
        if history and not history[-1][1]:
            live.add(thread)
    threads = {c.thread_id for _, c in facts.consumed}
    threads |= {t.thread_id for _, t in facts.resumed}
    threads |= {e.thread_id for _, e in facts.expired}
    keyed = {t for t, _ in facts.pause_keys}
    forgotten |= {t for t in threads if t not in live and t not in keyed}
    return forgotten


def _judge_partition(facts: PartitionFacts, report: Report) -> None:
    p = facts.partition
    found = report.violations
    forgotten = _forgotten(facts)
    report.forgotten_threads += len(forgotten)
    horizon = facts.horizon_ms

    for role, place, why in facts.undecodable:
        found.append(
            Violation(
                Kind.OUTPUT_UNDECODABLE, p, f"a record on {role} is not a turnlog event: {why}",
                {"topic": role, "offset": place.offset},
            )
        )  # fmt: skip

    # -- the outputs, paired with each other --------------------------------------------------
    # A token's spend, and apart from it the rows its claims wrote (copies of the spend with
    # the claim's fields). Compaction keeps only a token's newest row: with no spend row left,
    # the oldest claim row still there stands for it.
    consumed: dict[str, list[tuple[Place, TokenConsumed]]] = defaultdict(list)
    claimed: dict[str, list[tuple[Place, TokenConsumed]]] = defaultdict(list)
    for place, c in facts.consumed:
        (claimed if c.claim_state else consumed)[c.token_id].append((place, c))
    for token, rows in claimed.items():
        if token not in consumed:
            consumed[token].append(rows[0])
    resumed: dict[str, list[tuple[Place, TurnResumed]]] = defaultdict(list)
    for place, t in facts.resumed:
        resumed[t.token_id].append((place, t))
    expired: dict[str, list[tuple[Place, PauseExpired]]] = defaultdict(list)
    for place, e in facts.expired:
        expired[e.token_id].append((place, e))

    def aged(place: Place) -> bool:
        return horizon is not None and place.timestamp_ms < horizon

    # A token's expiry, as its answers' tokens and its PauseExpired say.
    expiry: dict[str, int] = {}
    for answer in facts.answers:
        if answer.token_id is not None and answer.expires_at_ms is not None:
            expiry[answer.token_id] = answer.expires_at_ms
    for token, events in expired.items():
        expiry[token] = int(events[0][1].expires_at.timestamp() * 1000)
    line = facts.retire_before_ms

    def retired(token: str | None) -> bool:
        at = None if token is None else expiry.get(token)
        return line is not None and at is not None and at < line

    for token, rows in consumed.items():
        if len(rows) > 1:
            found.append(
                Violation(
                    Kind.TOKEN_CONSUMED_TWICE, p, f"token consumed {len(rows)} times",
                    {"token_id": token, "answer_ids": [c.answer_id for _, c in rows],
                     "outcomes": [c.outcome for _, c in rows],
                     "offsets": [pl.offset for pl, _ in rows]},
                )
            )  # fmt: skip
        outcomes = {c.outcome for _, c in rows}
        if "resumed" in outcomes and "expired" in outcomes:
            found.append(
                Violation(
                    Kind.EXPIRED_AND_RESUMED, p, "token both resumed and expired",
                    {"token_id": token},
                )
            )  # fmt: skip
        thread = rows[0][1].thread_id
        if thread in forgotten:
            continue
        for place, c in rows:
            if c.outcome == "resumed":
                report.resumed += 1
                if token not in resumed and not aged(place):
                    found.append(
                        Violation(
                            Kind.CONSUMED_WITHOUT_RESUME, p,
                            "token spent by an answer whose resumed turn is not on the log",
                            {"token_id": token, "answer_id": c.answer_id, "thread_id": thread,
                             "checkpoint_id": c.checkpoint_id, "offset": place.offset},
                        )
                    )  # fmt: skip
            elif c.outcome == "expired":
                report.expired += 1
                if token not in expired and not aged(place):
                    found.append(
                        Violation(
                            Kind.EXPIRY_INCOMPLETE, p,
                            "token consumed as expired without its PauseExpired",
                            {"token_id": token, "thread_id": thread, "offset": place.offset},
                        )
                    )  # fmt: skip

    for token, turns in resumed.items():
        if len(turns) > 1:
            ids = [t.event_id for _, t in turns]
            found.append(
                Violation(
                    Kind.RESUMED_TWICE, p, f"{len(turns)} resumed turns for one token",
                    {"token_id": token, "answer_ids": [t.answer_id for _, t in turns],
                     "offsets": [pl.offset for pl, _ in turns],
                     "same_event": len(set(ids)) == 1},
                )
            )  # fmt: skip
        place, turn = turns[0]
        if turn.thread_id in forgotten:
            _forgotten_resume(facts, turns, found)
            continue
        spent = [c for _, c in consumed.get(token, []) if c.outcome == "resumed"]
        if not consumed.get(token) and retired(token):
            report.retired += 1
        elif not spent:
            found.append(
                Violation(
                    Kind.RESUMED_WITHOUT_CONSUMPTION, p,
                    "a resumed turn whose token's consumption is not on the log",
                    {"token_id": token, "answer_id": turn.answer_id, "thread_id": turn.thread_id,
                     "offset": place.offset},
                )
            )  # fmt: skip
        elif {c.answer_id for c in spent} != {t.answer_id for _, t in turns}:
            found.append(
                Violation(
                    Kind.RESUMED_WITHOUT_CONSUMPTION, p,
                    "the resumed turn names another answer than the token's consumption",
                    {"token_id": token, "resumed_answer_id": turn.answer_id,
                     "consumed_answer_id": spent[0].answer_id},
                )
            )  # fmt: skip

    for token, events in expired.items():
        if len(events) > 1:
            found.append(
                Violation(
                    Kind.EXPIRED_TWICE, p, f"{len(events)} PauseExpired for one token",
                    {"token_id": token, "offsets": [pl.offset for pl, _ in events]},
                )
            )  # fmt: skip
        if events[0][1].thread_id in forgotten:
            continue
        if not consumed.get(token) and retired(token):
            report.retired += 1
        elif not any(c.outcome == "expired" for _, c in consumed.get(token, [])):
            found.append(
                Violation(
                    Kind.EXPIRY_INCOMPLETE, p,
                    "a PauseExpired without its token's consumption",
                    {"token_id": token, "offset": events[0][0].offset},
                )
            )  # fmt: skip

    # -- the answers, each with its one outcome -----------------------------------------------
    refusals: dict[str, list[tuple[Place, AnswerRejected]]] = defaultdict(list)
    for place, r in facts.rejected:
        refusals[r.answer_id].append((place, r))
    # An answer held for the other calls of its pause has its outcome too: its consumption.
    resumed_answers = {c.answer_id for _, c in facts.consumed if c.outcome in ("resumed", "held")}
    resumed_answers |= {t.answer_id for _, t in facts.resumed}

    judged: set[str] = set()
    claims: list[AnswerSeen] = []
    for answer in facts.answers:
        if answer.claim_action is not None:
            claims.append(answer)
            continue
        if facts.committed is None or answer.place.offset >= facts.committed:
            report.not_yet_handled += 1
            continue
        if answer.answer_id in judged:
            continue  # a retry of an answer already judged: no outcome of its own
        judged.add(answer.answer_id)
        report.answers_judged += 1
        was_resumed = answer.answer_id in resumed_answers
        was_refused = answer.answer_id in refusals
        if was_refused:
            report.refused += 1
        late_copies = (
            was_resumed
            and retired(answer.token_id)
            and all(r.reason == "token_expired" for _, r in refusals.get(answer.answer_id, []))
        )
        if was_resumed or was_refused:
            if was_resumed and was_refused and not late_copies:
                found.append(
                    Violation(
                        Kind.ANSWER_RESUMED_AND_REFUSED, p, "an answer both resumed and refused",
                        {"answer_id": answer.answer_id, "token_id": answer.token_id,
                         "reasons": [r.reason for _, r in refusals[answer.answer_id]]},
                    )
                )  # fmt: skip
            continue
        if aged(answer.place):
            report.beyond_retention += 1
            continue
        if answer.thread_id is not None and answer.thread_id in forgotten:
            continue
        found.append(
            Violation(
                Kind.ANSWER_WITHOUT_OUTCOME, p,
                "an answer below the committed offset with neither a resume nor a refusal",
                {"answer_id": answer.answer_id, "token_id": answer.token_id,
                 "thread_id": answer.thread_id, "offset": answer.place.offset},
            )
        )  # fmt: skip

    _judge_claims(facts, claims, claimed, refusals, forgotten, aged, report)

    copies = Counter(a.answer_id for a in facts.answers)
    for answer_id, refused in refusals.items():
        # Each record is refused at most once: a publisher's retry of a refused answer is a
        # record of its own and is refused again (with the same event id).
        if len(refused) > max(1, copies[answer_id]):
            found.append(
                Violation(
                    Kind.REFUSED_TWICE, p, f"one answer refused {len(refused)} times",
                    {"answer_id": answer_id, "reasons": [r.reason for _, r in refused],
                     "offsets": [pl.offset for pl, _ in refused],
                     "same_event": len({r.event_id for _, r in refused}) == 1},
                )
            )  # fmt: skip


def _judge_claims(
    facts: PartitionFacts,
    claims: Sequence[AnswerSeen],
    claimed: Mapping[str, Sequence[tuple[Place, TokenConsumed]]],
    refusals: Mapping[str, Sequence[tuple[Place, AnswerRejected]]],
    forgotten: set[str],
    aged: Callable[[Place], bool],
    report: Report,
) -> None:
    """Each claim decided once; each resumed turn held by one claimant at a time."""
    p = facts.partition
    # What each claim id was granted: the states its rows reached (claimed, then finished).
    states: dict[str, set[str]] = defaultdict(set)
    for rows in claimed.values():
        for _, c in rows:
            states[c.claim_id].add(c.claim_state)
    actions = {c.answer_id: c.claim_action for c in claims if c.claim_action != "finish"}
    # The newest retake granted on each thread: compaction keeps a token's newest row only, so
    # the grant of a claim taken over since may be gone without being missing.
    moved: dict[str, int] = {}
    for rows in claimed.values():
        for place, c in rows:
            if actions.get(c.claim_id) == "retake":
                moved[c.thread_id] = max(moved.get(c.thread_id, 0), place.timestamp_ms)
    judged: set[tuple[str, str | None]] = set()
    for claim in claims:
        if facts.committed is None or claim.place.offset >= facts.committed:
            report.not_yet_handled += 1
            continue
        if (claim.answer_id, claim.claim_action) in judged:
            continue  # the same request again (a retry): decided once
        judged.add((claim.answer_id, claim.claim_action))
        report.claims_judged += 1
        # A finish shares its claim's id; only a finish is refused as not held.
        reached = states.get(claim.answer_id, set())
        reasons = {r.reason for _, r in refusals.get(claim.answer_id, [])}
        if claim.claim_action == "finish":
            refused = "claim_not_held" in reasons or bool(reasons and not reached)
        else:
            refused = bool(reasons - {"claim_not_held"})
        if refused:
            report.claims_refused += 1
            continue
        if "finished" in reached if claim.claim_action == "finish" else reached:
            continue
        thread = claim.thread_id or ""
        if aged(claim.place) or thread in forgotten:
            continue
        if moved.get(thread, -1) >= claim.place.timestamp_ms:
            continue
        report.violations.append(
            Violation(
                Kind.CLAIM_WITHOUT_DECISION, p,
                "a claim below the committed offset with neither a grant nor a refusal",
                {"claim_id": claim.answer_id, "action": claim.claim_action,
                 "thread_id": claim.thread_id, "token_id": claim.token_id,
                 "offset": claim.place.offset},
            )
        )  # fmt: skip
    for token, rows in claimed.items():
        previous: TokenConsumed | None = None
        for place, row in rows:
            if previous is not None and row.claim_id != previous.claim_id:
                how = actions.get(row.claim_id)
                if previous.claim_state == "finished" or how == "claim":
                    report.violations.append(
                        Violation(
                            Kind.CONTINUED_TWICE, p,
                            "a resumed turn's claim passed to another claimant "
                            + ("after it was finished" if previous.claim_state == "finished"
                               else "without a retake"),
                            {"token_id": token, "thread_id": row.thread_id,
                             "claim_ids": [previous.claim_id, row.claim_id],
                             "claimants": [previous.claimant, row.claimant],
                             "offset": place.offset},
                        )
                    )  # fmt: skip
            previous = row


def _forgotten_resume(
    facts: PartitionFacts, turns: Sequence[tuple[Place, TurnResumed]], found: list[Violation]
) -> None:
    """A resume of a forgotten thread is a violation when the pause it resumed had been
    tombstoned before the resume was written (record timestamps, one broker's clock)."""
    for place, turn in turns:
        history = facts.pause_keys.get((turn.thread_id, turn.checkpoint_id), [])
        before = [tomb for stamp, tomb in history if stamp <= place.timestamp_ms]
        if before and before[-1]:
            found.append(
                Violation(
                    Kind.RESUMED_AFTER_FORGET, facts.partition,
                    "a turn resumed after its thread was forgotten",
                    {"thread_id": turn.thread_id, "checkpoint_id": turn.checkpoint_id,
                     "token_id": turn.token_id, "offset": place.offset},
                )
            )  # fmt: skip
