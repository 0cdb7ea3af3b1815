"""The audit's rules on facts built by hand: what is judged, and what the log can no longer show."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from turnlog.audit.invariant import AnswerSeen, Kind, PartitionFacts, Place, judge
from turnlog.contracts.events import AnswerRejected, TokenConsumed, TurnResumed

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _meta(event_id: str = "e") -> dict[str, object]:
    return {"event_id": event_id, "occurred_at": NOW, "package_version": "t"}


def _consumed(token: str, answer: str, thread: str = "t1") -> TokenConsumed:
    return TokenConsumed(
        **_meta(), token_id=token, answer_id=answer, thread_id=thread, checkpoint_id="cp",
        outcome="resumed",
    )  # fmt: skip


def _turn(token: str, answer: str, thread: str = "t1", event_id: str = "e") -> TurnResumed:
    return TurnResumed(
        **_meta(event_id), token_id=token, answer_id=answer, run_id="r", session_id="s",
        thread_id=thread, checkpoint_id="cp", interrupt_id="i", tool_call_id="c", name="n",
        prompt="p", response_json="{}",
    )  # fmt: skip


def _refused(answer: str, event_id: str) -> AnswerRejected:
    return AnswerRejected(
        **_meta(event_id), answer_id=answer, token_id="tok", thread_id="t1", reason="misrouted",
        step=1, detail="",
    )  # fmt: skip


def _facts(**kw: object) -> PartitionFacts:
    facts = PartitionFacts(0, committed=10, pause_keys={("t1", "cp"): [(1, False)]})
    for name, value in kw.items():
        setattr(facts, name, value)
    return facts


def test_an_answer_older_than_what_the_outputs_keep_is_counted_not_blamed() -> None:
    facts = _facts(
        answers=[AnswerSeen(Place(0, 0, timestamp_ms=100), "old"),
                 AnswerSeen(Place(0, 1, timestamp_ms=900), "new")],
        horizon_ms=500,
    )  # fmt: skip
    report = judge([facts])
    assert [v.ids["answer_id"] for v in report.violations] == ["new"]
    assert report.violations[0].kind is Kind.ANSWER_WITHOUT_OUTCOME
    assert report.beyond_retention == 1


def test_a_forgotten_thread_is_not_paired_but_counted() -> None:
    """Its pause gone (compaction after forget), its resumed turn left until retention."""
    facts = _facts(pause_keys={}, resumed=[(Place(0, 0), _turn("tok", "a"))])
    report = judge([facts])
    assert report.holds and report.forgotten_threads == 1


def test_copies_of_one_event_are_reported_as_the_same_event() -> None:
    facts = _facts(
        answers=[AnswerSeen(Place(0, 0), "a", "t1", "tok")],
        consumed=[(Place(0, 0), _consumed("tok", "a"))],
        resumed=[(Place(0, 0), _turn("tok", "a", event_id="x")),
                 (Place(0, 1), _turn("tok", "a", event_id="x"))],
        rejected=[(Place(0, 0), _refused("b", "y")), (Place(0, 1), _refused("b", "z"))],
    )  # fmt: skip
    kinds = {v.kind: v for v in judge([facts]).violations}
    assert set(kinds) == {Kind.RESUMED_TWICE, Kind.REFUSED_TWICE}
    assert kinds[Kind.RESUMED_TWICE].ids["same_event"] is True
    assert kinds[Kind.REFUSED_TWICE].ids["same_event"] is False


def test_a_resumed_turn_for_another_answer_than_the_consumption_is_a_violation() -> None:
    facts = _facts(
        consumed=[(Place(0, 0), _consumed("tok", "a"))],
        resumed=[(Place(0, 0), _turn("tok", "b"))],
    )
    [violation] = judge([facts]).violations
    assert violation.kind is Kind.RESUMED_WITHOUT_CONSUMPTION
    assert violation.ids["consumed_answer_id"] == "a"


def test_the_summary_counts_every_kind() -> None:
    report = judge([_facts()])
    assert report.holds
    assert set(report.summary()["violations_by_kind"]) == {k.value for k in Kind}


def test_a_retried_refused_answer_may_be_refused_once_per_record() -> None:
    seen = AnswerSeen(Place(0, 0), "b", "t1", "tok")
    again = AnswerSeen(Place(0, 1), "b", "t1", "tok")
    refusals = [(Place(0, 0), _refused("b", "y")), (Place(0, 1), _refused("b", "y"))]
    assert judge([_facts(answers=[seen, again], rejected=refusals)]).holds
    refusals.append((Place(0, 2), _refused("b", "y")))
    [violation] = judge([_facts(answers=[seen, again], rejected=refusals)]).violations
    assert violation.kind is Kind.REFUSED_TWICE


def _expired_copy(answer: str) -> AnswerRejected:
    return AnswerRejected(
        **_meta("late"), answer_id=answer, token_id="tok", thread_id="t1", reason="token_expired",
        step=1, detail="",
    )  # fmt: skip


def test_a_retired_consumption_is_not_a_missing_one() -> None:
    """The owner retired the row of a token expired before the line; its resumed turn is still
    on the log, and a copy of its answer published again was refused by the clock. Above the
    line (or with no line) the same facts are the violations they look like."""

    def facts(line: int | None) -> PartitionFacts:
        return _facts(
            answers=[AnswerSeen(Place(0, 0), "a", "t1", "tok", expires_at_ms=1_000),
                     AnswerSeen(Place(0, 1), "a", "t1", "tok", expires_at_ms=1_000)],
            resumed=[(Place(0, 0), _turn("tok", "a"))],
            rejected=[(Place(0, 0), _expired_copy("a"))],
            retire_before_ms=line,
        )  # fmt: skip

    retired = judge([facts(5_000)])
    assert retired.holds, retired.violations
    assert retired.retired == 1
    for line in (None, 1_000):
        kept = judge([facts(line)])
        assert {v.kind for v in kept.violations} == {
            Kind.RESUMED_WITHOUT_CONSUMPTION,
            Kind.ANSWER_RESUMED_AND_REFUSED,
        }


# -- claims on resumed turns ---------------------------------------------------------------------


def _claim_row(claim: str, state: str = "claimed", who: str = "a:1") -> TokenConsumed:
    return dataclasses.replace(
        _consumed("tok", "ans"), claim_id=claim, claimant=who, claimed_at_ms=1, claim_state=state
    )


def _claim(claim: str, offset: int, action: str = "claim", at: int = 0) -> AnswerSeen:
    return AnswerSeen(Place(0, offset, at), claim, "t1", "tok", claim_action=action)


def _resumed_once(*rows: TokenConsumed, **kw: object) -> PartitionFacts:
    consumed = [(Place(0, i), row) for i, row in enumerate([_consumed("tok", "ans"), *rows])]
    answers = [AnswerSeen(Place(0, 0), "ans", "t1", "tok"), *kw.pop("claims", [])]  # type: ignore[list-item]
    return _facts(
        answers=answers, consumed=consumed, resumed=[(Place(0, 0), _turn("tok", "ans"))], **kw
    )


def test_claim_rows_are_not_second_spends_and_each_claim_has_its_decision() -> None:
    """A claim granted, done, a second claim refused: one spend, one resume, no violation."""
    facts = _resumed_once(
        _claim_row("c1"), _claim_row("c1", "finished"),
        claims=[_claim("c1", 1), _claim("c1", 2, "finish"), _claim("c2", 3)],
        rejected=[(Place(0, 0), _refused("c2", "r"))],
    )  # fmt: skip
    report = judge([facts])
    assert report.holds, [v.line() for v in report.violations]
    assert (report.resumed, report.claims_judged, report.claims_refused) == (1, 3, 1)


def test_a_claim_with_no_decision_is_named() -> None:
    facts = _resumed_once(_claim_row("c1"), claims=[_claim("c1", 1), _claim("lost", 2)])
    report = judge([facts])
    assert [(v.kind, v.ids["claim_id"]) for v in report.violations] == [
        (Kind.CLAIM_WITHOUT_DECISION, "lost")
    ]


def test_a_claim_not_yet_handled_is_not_judged() -> None:
    facts = _resumed_once(claims=[_claim("later", 12)])
    report = judge([facts])
    assert report.holds and report.not_yet_handled == 1 and report.claims_judged == 0


def test_a_finish_needs_its_finished_row() -> None:
    facts = _resumed_once(_claim_row("c1"), claims=[_claim("c1", 1), _claim("c1", 2, "finish")])
    report = judge([facts])
    assert [(v.kind, v.ids["action"]) for v in report.violations] == [
        (Kind.CLAIM_WITHOUT_DECISION, "finish")
    ]


def test_a_turn_claimed_by_a_second_claimant_without_a_retake_is_continued_twice() -> None:
    facts = _resumed_once(
        _claim_row("c1"), _claim_row("c2", who="b:2"), claims=[_claim("c1", 1), _claim("c2", 2)]
    )
    report = judge([facts])
    assert [v.kind for v in report.violations] == [Kind.CONTINUED_TWICE]
    assert report.violations[0].ids["claimants"] == ["a:1", "b:2"]


def test_a_retake_of_an_unfinished_claim_holds_and_of_a_finished_one_does_not() -> None:
    retaken = _resumed_once(
        _claim_row("c1"), _claim_row("c2", who="b:2"),
        claims=[_claim("c1", 1), _claim("c2", 2, "retake")],
    )  # fmt: skip
    assert judge([retaken]).holds
    after_done = _resumed_once(
        _claim_row("c1"), _claim_row("c1", "finished"), _claim_row("c2", who="b:2"),
        claims=[_claim("c1", 1), _claim("c1", 2, "finish"), _claim("c2", 3, "retake")],
    )  # fmt: skip
    assert [v.kind for v in judge([after_done]).violations] == [Kind.CONTINUED_TWICE]


def test_after_compaction_a_claim_row_stands_for_the_spend() -> None:
    """Only the token's newest row is left: it is still one resume, not a missing spend."""
    facts = _facts(
        answers=[AnswerSeen(Place(0, 0), "ans", "t1", "tok"), _claim("c1", 1)],
        consumed=[(Place(0, 5), _claim_row("c1", "finished"))],
        resumed=[(Place(0, 0), _turn("tok", "ans"))],
    )
    report = judge([facts])
    assert report.holds, [v.line() for v in report.violations]
    assert report.resumed == 1
