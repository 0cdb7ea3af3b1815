"""The resume contract as a pure function: every refusal by name, in order, nothing consumed."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.consumers.screening import event_id, event_meta
from turnlog.contracts import resume
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approve, arguments_hash
from turnlog.contracts.axes import Axes
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import AnswerSubmitted, AskUserAnswered, PauseRecorded, TokenConsumed
from turnlog.contracts.interactions import ASK_USER, default_interactions
from turnlog.contracts.ledger import LedgerEntry
from turnlog.contracts.messages import NOT_DISPATCHED
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.contracts.resume import (
    PreparedResume,
    is_replay,
    mismatched_axis,
    missing_axis,
    prepare_resume,
    request_hash,
)
from turnlog.errors import TurnlogError
from turnlog.tokens import (
    Keyring,
    PauseClaims,
    TokenIssuer,
    TokenVerifier,
    generate_ed25519,
)

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=10)
PRIVATE, _ = generate_ed25519("k1")
OTHER_PRIVATE, _ = generate_ed25519("k2")
RING = Keyring.ed25519("k1", PRIVATE)
VERIFIER = TokenVerifier(RING, issuer="turnlog", audience="turnlog-answers")
ISSUER = TokenIssuer(RING, issuer="turnlog", audience="turnlog-answers")
INTERACTIONS = default_interactions()
INTERACTIONS.register(
    "approve",
    {"type": "record", "name": "Approve", "fields": [{"name": "ok", "type": "boolean"}]},
)
REQUEST = json.dumps({"questions": [{"question": "Which colour?", "options": ["Red", "Blue"]}]})
RESPONSE = json.dumps({"answers": [{"selections": ["Blue"], "other": None}]})


def make_checkpoint(**changes: Any) -> TurnCheckpoint:
    messages = captured_messages(
        [{"role": "user", "content": "Paint my kitchen."}],
        "Let me ask.",
        [
            ReservedCall("c0", "measure"),
            ReservedCall("call-1", ASK_USER),
            ReservedCall("c2", "buy"),
        ],
    )
    values: dict[str, Any] = {
        "run_id": "run-1",
        "session_id": "sess-1",
        "thread_id": "thread-1",
        "checkpoint_id": "cp-1",
        "scope_hash": "tenant-a",
        "tool_call_id": "call-1",
        "interrupt_id": "int-1",
        "name": ASK_USER,
        "prompt": "continue",
        "messages": messages,
        "created_at": T0,
    }
    values.update(changes)
    return TurnCheckpoint(**values)


def make_pause(checkpoint: TurnCheckpoint | None = None, **changes: Any) -> PauseRecorded:
    values: dict[str, Any] = {
        "event_id": "e-pause",
        "occurred_at": T0,
        "package_version": "0.1.0",
        "checkpoint": checkpoint or make_checkpoint(),
        "token_id": "tok-1",
        "request_json": REQUEST,
        "request_hash": request_hash(REQUEST),
        "response_schema": ASK_USER,
        "expires_at": T0 + timedelta(hours=1),
    }
    values.update(changes)
    return PauseRecorded(**values)


PAUSE = make_pause()
CLAIMS = PauseClaims.for_pause(PAUSE, pause_partition=2, pause_offset=17)
TOKEN = ISSUER.issue(CLAIMS)


def make_answer(**changes: Any) -> AnswerSubmitted:
    values: dict[str, Any] = {
        "event_id": "e-answer",
        "occurred_at": NOW,
        "package_version": "0.1.0",
        "answer_id": "ans-1",
        "token": TOKEN,
        "thread_id": "thread-1",
        "scope_hash": "tenant-a",
        "session_id": "sess-1",
        "run_id": "run-1",
        "call_id": "call-1",
        "response_json": RESPONSE,
        "submitted_at": T0 + timedelta(seconds=90),
    }
    values.update(changes)
    return AnswerSubmitted(**values)


def run(
    answer: AnswerSubmitted | None = None,
    *,
    pause: PauseRecorded | None = PAUSE,
    ledger: LedgerEntry | TokenConsumed | None = None,
    now: datetime = NOW,
) -> Refusal | PreparedResume:
    return prepare_resume(
        answer or make_answer(),
        verifier=VERIFIER,
        interactions=INTERACTIONS,
        pause=pause,
        ledger=ledger,
        now=now,
    )


def token_for(pause: PauseRecorded, ring: Keyring = RING, **claims: Any) -> str:
    base = dataclasses.replace(PauseClaims.for_pause(pause), **claims)
    return TokenIssuer(ring, issuer="turnlog", audience="turnlog-answers").issue(base)


# -- the happy path ----------------------------------------------------------------------------


def test_a_valid_answer_is_prepared_with_its_rehydrated_history() -> None:
    prepared = run()
    assert isinstance(prepared, PreparedResume)
    assert prepared.claims == CLAIMS
    cp_len = len(PAUSE.checkpoint.messages)
    added = prepared.history[cp_len:]
    assert [(m["tool_call_id"], m["content"]) for m in added] == [
        ("call-1", prepared.observation),
        ("c0", NOT_DISPATCHED),
        ("c2", NOT_DISPATCHED),
    ]
    assert "Blue" in prepared.observation
    assert prepared.answered == AskUserAnswered(
        selected_labels=("Blue",), has_other=False, time_to_answer_seconds=90.0
    )


def test_prepared_resume_builds_the_events_of_the_consume() -> None:
    prepared = run()
    assert isinstance(prepared, PreparedResume)
    resumed = prepared.turn_resumed(event_id="e-r", occurred_at=NOW, package_version="0.1.0")
    assert (resumed.token_id, resumed.answer_id, resumed.thread_id) == (
        "tok-1",
        "ans-1",
        "thread-1",
    )
    assert (resumed.run_id, resumed.session_id, resumed.checkpoint_id) == (
        "run-1",
        "sess-1",
        "cp-1",
    )
    assert (resumed.tool_call_id, resumed.interrupt_id, resumed.name) == (
        "call-1",
        "int-1",
        ASK_USER,
    )
    assert resumed.prompt == "continue" and resumed.response_json == RESPONSE
    assert resumed.history == prepared.history and resumed.answered == prepared.answered
    consumed = prepared.token_consumed(event_id="e-c", occurred_at=NOW, package_version="0.1.0")
    assert (consumed.token_id, consumed.answer_id, consumed.outcome) == (
        "tok-1",
        "ans-1",
        "resumed",
    )
    assert (consumed.thread_id, consumed.checkpoint_id) == ("thread-1", "cp-1")


#: Two questions: colours (any number of them) and a size (one, no free text).
TWO_QUESTIONS = json.dumps(
    {
        "questions": [
            {"question": "Which colours?", "options": ["Red", "Blue"], "multiSelect": True},
            {
                "question": "Which size?",
                "options": [{"label": "Small"}, {"label": "Large", "description": "2 m"}],
                "multiSelect": False,
                "allow_other": False,
            },
        ]
    }
)


def asked(request_json: str, response: Any) -> Refusal | PreparedResume:
    """``response`` answering a pause that asked ``request_json``."""
    pause = make_pause(request_json=request_json, request_hash=request_hash(request_json))
    answer = make_answer(token=token_for(pause), response_json=json.dumps(response))
    return run(answer, pause=pause)


def test_answered_record_flattens_selections_and_sees_free_text() -> None:
    prepared = asked(
        TWO_QUESTIONS,
        {"answers": [{"selections": ["Red", "Blue"], "other": "x"}, {"selections": ["Small"]}]},
    )
    assert isinstance(prepared, PreparedResume)
    assert prepared.answered is not None
    assert prepared.answered.selected_labels == ("Red", "Blue", "Small")
    assert prepared.answered.has_other is True


# -- step 4: the response answers what the pause asked ------------------------------------------


@pytest.mark.parametrize(
    ("response", "detail"),
    [
        (
            {"answers": [{"selections": ["Mars"]}, {"selections": ["Small"]}]},
            "answers[0].selections[0]: text of 4 characters, not one of question 1's 2 offered "
            "options",
        ),
        (
            {"answers": [{"selections": ["Red"]}]},
            "answers: 1 answer to 2 questions; each question takes exactly one answer, in the "
            "order asked (question 2 has none)",
        ),
        (
            {"answers": [{"selections": ["Red"]}, {"selections": ["Small"]}, {"selections": []}]},
            "answers: 3 answers to 2 questions; each question takes exactly one answer, in the "
            "order asked",
        ),
        (
            {"answers": [{"selections": ["Red"]}, {"selections": [], "other": None}]},
            "answers[1]: neither a selection nor free text; question 2 is left unanswered",
        ),
        (
            {"answers": [{"selections": ["Red"]}, {"selections": [], "other": "   "}]},
            "answers[1]: neither a selection nor free text; question 2 is left unanswered",
        ),
        (
            {"answers": [{"selections": ["Red"]}, {"selections": [], "other": "Medium"}]},
            "answers[1].other: question 2 takes no free text (allow_other is false)",
        ),
        (
            {"answers": [{"selections": ["Red"]}, {"selections": ["Small", "Large"]}]},
            "answers[1].selections: question 2 takes one selection (multiSelect is false), got 2",
        ),
        (
            {"answers": [{"selections": ["Red", "Red"]}, {"selections": ["Small"]}]},
            "answers[0].selections[1]: the same option as an earlier selection (each option is "
            "selected once)",
        ),
        (
            {"answers": [{"selections": ["Small"]}, {"selections": ["Red"]}]},
            "answers[0].selections[0]: text of 5 characters, not one of question 1's 2 offered "
            "options",
        ),
    ],
    ids=[
        "not-offered",
        "too-few",
        "too-many",
        "empty-answer",
        "blank-free-text",
        "free-text-not-taken",
        "two-on-single-select",
        "selected-twice",
        "out-of-order",
    ],
)
def test_a_response_that_does_not_answer_the_request_is_refused_by_name(
    response: dict[str, Any], detail: str
) -> None:
    outcome = asked(TWO_QUESTIONS, response)
    assert isinstance(outcome, Refusal), outcome
    assert (outcome.reason, outcome.step, outcome.detail) == (
        RefusalReason.RESPONSE_MISMATCH,
        4,
        detail,
    )


def test_the_issues_answers_are_refused_and_the_right_one_resumes() -> None:
    """Issue 28: ``["eu", "us"]`` offered, ``"mars"`` selected; two answers to one question."""
    ask = json.dumps({"questions": [{"question": "Which region?", "options": ["eu", "us"]}]})
    mars = asked(ask, {"answers": [{"selections": ["mars"]}]})
    assert isinstance(mars, Refusal) and mars.reason is RefusalReason.RESPONSE_MISMATCH
    assert mars.detail == (
        "answers[0].selections[0]: text of 4 characters, not one of question 1's 2 offered options"
    )
    twice = asked(ask, {"answers": [{"selections": ["eu"]}, {"selections": ["eu"]}]})
    assert isinstance(twice, Refusal) and twice.reason is RefusalReason.RESPONSE_MISMATCH
    assert isinstance(asked(ask, {"answers": [{"selections": ["eu"]}]}), PreparedResume)


@pytest.mark.parametrize(
    ("question", "response"),
    [
        # unstated multiSelect: the number of selections is not checked
        ({"question": "Which?", "options": ["a", "b"]}, {"selections": ["a", "b"]}),
        ({"question": "Which?", "options": ["a", "b"], "multi_select": True},
         {"selections": ["a", "b"]}),
        # free text is taken unless the question says allow_other: false, beside selections too
        ({"question": "Which?", "options": ["a"]}, {"selections": [], "other": "c"}),
        ({"question": "Which?", "options": ["a"], "allowOther": True},
         {"selections": ["a"], "other": "c"}),
        # a question without options is answered in free text
        ({"question": "Why?"}, {"selections": [], "other": "because"}),
        ({"question": "Why?", "options": []}, {"selections": [], "other": "because"}),
        ({"question": "Which?", "options": ["a"], "allow_other": False}, {"selections": ["a"]}),
    ],
)  # fmt: skip
def test_a_response_that_answers_the_request_resumes(
    question: dict[str, Any], response: dict[str, Any]
) -> None:
    outcome = asked(json.dumps({"questions": [question]}), {"answers": [response]})
    assert isinstance(outcome, PreparedResume), outcome


def test_a_selection_on_a_question_without_options_is_refused() -> None:
    outcome = asked(
        json.dumps({"questions": [{"question": "Why?"}]}), {"answers": [{"selections": ["x"]}]}
    )
    assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.RESPONSE_MISMATCH
    assert outcome.detail == (
        "answers[0].selections[0]: question 1 offers no options to select (got text of 1 "
        "character); free text goes in other"
    )


def test_a_recorded_request_ask_user_cannot_read_binds_no_answer() -> None:
    """A pause written past the recorder's check (another client, an older turnlog): refused by
    name at step 4 rather than resumed with an answer nothing was checked against."""
    outcome = asked(json.dumps({"question": "Which region?"}), {"answers": [{"selections": []}]})
    assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.RESPONSE_MISMATCH
    assert outcome.detail == (
        "the recorded request is not one ask_user can read; no answer binds to it"
    )


def test_the_publisher_side_check_binds_when_it_has_the_request() -> None:
    """``check_response`` without the request (a publisher holds only the token) checks the
    schema; with it, what the worker checks."""
    mars = json.dumps({"answers": [{"selections": ["mars"]}]})
    assert resume.check_response(CLAIMS, INTERACTIONS, mars) == {
        "answers": [{"selections": ["mars"], "other": None}]
    }
    with pytest.raises(Refused) as caught:
        resume.check_response(CLAIMS, INTERACTIONS, mars, REQUEST)
    assert caught.value.reason is RefusalReason.RESPONSE_MISMATCH


def test_a_registered_interactions_response_check_refuses_by_name_at_step_4() -> None:
    registry = default_interactions()
    registry.register(
        "pick_date",
        {"type": "record", "name": "PickDate", "fields": [{"name": "date", "type": "string"}]},
        check_response=lambda request, response: (
            None
            if response["date"] in request["dates"]
            else f"date: {response['date']!r} not offered"
        ),
    )
    cp = make_checkpoint(name="pick_date")
    request = json.dumps({"dates": ["2026-05-01"]})
    pause = make_pause(
        cp, response_schema="pick_date", request_json=request, request_hash=request_hash(request)
    )

    def answer(date: str) -> Refusal | PreparedResume:
        response = json.dumps({"date": date})
        return prepare_resume(
            make_answer(token=token_for(pause), response_json=response),
            verifier=VERIFIER, interactions=registry, pause=pause, ledger=None, now=NOW,
        )  # fmt: skip

    refused = answer("2026-06-01")
    assert isinstance(refused, Refusal)
    assert (refused.reason, refused.detail) == (
        RefusalReason.RESPONSE_MISMATCH,
        "date: '2026-06-01' not offered",
    )
    assert isinstance(answer("2026-05-01"), PreparedResume)


def test_a_response_that_does_not_fit_is_refused_before_the_request_is_read() -> None:
    """The cheaper check first: a malformed response is ``response_invalid`` even against a
    request that binds no answer."""
    outcome = asked(json.dumps({"question": "Which region?"}), {"answers": "eu"})
    assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.RESPONSE_INVALID


def test_time_to_answer_never_goes_negative() -> None:
    prepared = run(make_answer(submitted_at=T0 - timedelta(minutes=5)))
    assert isinstance(prepared, PreparedResume) and prepared.answered is not None
    assert prepared.answered.time_to_answer_seconds == 0.0


def test_another_interaction_resumes_without_an_answered_record() -> None:
    cp = make_checkpoint(name="approve")
    pause = make_pause(cp, response_schema="approve")
    answer = make_answer(token=token_for(pause), response_json='{"ok": true}')
    prepared = run(answer, pause=pause)
    assert isinstance(prepared, PreparedResume)
    assert prepared.answered is None
    assert prepared.observation == '{"ok":true}'


def test_an_interrupt_without_a_tool_call_is_answered_on_the_interrupt_id() -> None:
    messages = captured_messages([], "", [ReservedCall("int-1", ASK_USER), ReservedCall("c9", "x")])
    pause = make_pause(make_checkpoint(tool_call_id="", messages=messages))
    answer = make_answer(token=token_for(pause), call_id="int-1")
    prepared = run(answer, pause=pause)
    assert isinstance(prepared, PreparedResume)
    added = prepared.history[len(messages) :]
    assert [m["tool_call_id"] for m in added] == ["int-1", "c9"]


# -- every refusal, by name -------------------------------------------------------------------

Case = Callable[[], Refusal | PreparedResume]

CASES: dict[RefusalReason, Case] = {
    RefusalReason.TOKEN_INVALID: lambda: run(make_answer(token="not.a.token")),
    RefusalReason.TOKEN_UNKNOWN_KEY: lambda: run(
        make_answer(token=token_for(PAUSE, Keyring.ed25519("k2", OTHER_PRIVATE)))
    ),
    RefusalReason.TOKEN_WRONG_ISSUER: lambda: run(
        make_answer(
            token=TokenIssuer(RING, issuer="evil", audience="turnlog-answers").issue(CLAIMS)
        )
    ),
    RefusalReason.TOKEN_WRONG_AUDIENCE: lambda: run(
        make_answer(token=TokenIssuer(RING, issuer="turnlog", audience="other").issue(CLAIMS))
    ),
    RefusalReason.TOKEN_EXPIRED: lambda: run(now=T0 + timedelta(hours=2)),
    RefusalReason.TOKEN_NOT_YET_VALID: lambda: run(now=T0 - timedelta(hours=1)),
    RefusalReason.AXIS_MISSING_SCOPE: lambda: run(make_answer(scope_hash=None)),
    RefusalReason.AXIS_MISSING_SESSION: lambda: run(make_answer(session_id="")),
    RefusalReason.AXIS_MISSING_RUN: lambda: run(make_answer(run_id=None)),
    RefusalReason.AXIS_MISSING_CALL: lambda: run(make_answer(call_id=None)),
    RefusalReason.SCOPE_MISMATCH: lambda: run(make_answer(scope_hash="tenant-b")),
    RefusalReason.SESSION_MISMATCH: lambda: run(make_answer(session_id="sess-2")),
    RefusalReason.RUN_MISMATCH: lambda: run(make_answer(run_id="run-2")),
    RefusalReason.CALL_MISMATCH: lambda: run(make_answer(call_id="c2")),
    RefusalReason.THREAD_MISMATCH: lambda: run(make_answer(thread_id="thread-2")),
    RefusalReason.REQUEST_HASH_MISMATCH: lambda: run(
        pause=make_pause(request_json=json.dumps({"questions": []}))
    ),
    RefusalReason.INTERACTION_UNKNOWN: lambda: run(
        make_answer(token=token_for(PAUSE, interaction="unregistered"))
    ),
    RefusalReason.RESPONSE_INVALID: lambda: run(make_answer(response_json='{"answers": 3}')),
    RefusalReason.RESPONSE_MISMATCH: lambda: run(
        make_answer(response_json=json.dumps({"answers": [{"selections": ["Green"]}]}))
    ),
    RefusalReason.APPROVAL_MISMATCH: lambda: run(
        make_answer(
            token=token_for(
                PAUSE,
                interaction=APPROVE_TOOL_CALL,
                tool_name="deploy",
                arguments_hash=arguments_hash({"region": "eu"}),
            ),
            response_json=json.dumps(approve("deploy", {"region": "us"})),
        )
    ),
    RefusalReason.NO_RECORDED_TURN_STATE: lambda: run(pause=None),
    RefusalReason.CHECKPOINT_MISMATCH: lambda: run(
        pause=make_pause(make_checkpoint(run_id="run-other"))
    ),
    RefusalReason.ASKING_ROUND_MISSING: lambda: run(
        pause=make_pause(make_checkpoint(messages=({"role": "user", "content": "hi"},)))
    ),
    RefusalReason.ALREADY_CONSUMED: lambda: run(ledger=LedgerEntry("resumed", "ans-0")),
    RefusalReason.PAUSE_EXPIRED: lambda: run(ledger=LedgerEntry("expired", "")),
}


def test_every_reason_the_function_can_give_has_a_case() -> None:
    # The record-level refusals are the handler's (tests/unit/test_handler.py): bytes that never
    # became an AnswerSubmitted, a record on the wrong partition, a failure no rule names, and an
    # output that would not fit the topic -- and a token whose pause a newer one replaced, which
    # the handler tells apart from no_recorded_turn_state by asking the store.
    assert set(CASES) == set(RefusalReason) - {
        RefusalReason.PAUSE_SUPERSEDED,
        RefusalReason.ANSWER_UNDECODABLE,
        RefusalReason.MISROUTED,
        RefusalReason.ANSWER_UNPROCESSABLE,
        RefusalReason.ANSWER_TOO_LARGE,
        # a forgotten thread: the handler asks its store (tests/integration/test_forget_answer.py)
        RefusalReason.FORGOTTEN,
        # a claim's rules (step 8), decided by consumers/claiming.py, not by an answer
        RefusalReason.NOT_RESUMED,
        RefusalReason.ALREADY_CONTINUED,
        RefusalReason.CLAIM_NOT_HELD,
    }


@pytest.mark.parametrize("reason", list(CASES), ids=lambda r: r.value)
def test_refused_by_its_own_name_and_step_with_nothing_consumed(reason: RefusalReason) -> None:
    outcome = CASES[reason]()
    assert isinstance(outcome, Refusal), outcome
    assert not isinstance(outcome, PreparedResume)
    assert outcome.reason is reason, outcome
    assert outcome.step == reason.step
    assert outcome.detail
    # Pure: the refusal spent nothing, so the same token with a correct answer still resumes.
    again = run()
    assert isinstance(again, PreparedResume)
    assert again.claims.token_id == CLAIMS.token_id


def test_another_tenants_token_is_refused_as_a_scope_mismatch() -> None:
    theirs = make_pause(make_checkpoint(scope_hash="tenant-b"))
    outcome = run(make_answer(token=token_for(theirs)), pause=theirs)
    assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.SCOPE_MISMATCH


def test_an_answer_on_the_interrupt_when_the_token_names_a_tool_call_is_a_call_mismatch() -> None:
    outcome = run(make_answer(call_id="int-1"))
    assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.CALL_MISMATCH


@pytest.mark.parametrize(
    "field", ["token_id", "thread_id", "checkpoint_id", "session_id", "scope_hash", "interaction"]
)
def test_a_recorded_pause_that_is_not_the_tokens_is_a_checkpoint_mismatch(field: str) -> None:
    if field == "token_id":
        pause = make_pause(token_id="tok-other")
    elif field == "interaction":
        pause = make_pause(response_schema="approve")
    else:
        pause = make_pause(make_checkpoint(**{field: "other"}))
    outcome = run(pause=pause)
    assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.CHECKPOINT_MISMATCH
    assert field in outcome.detail


def test_a_spent_token_stated_as_a_consumption_event_is_refused() -> None:
    spent = TokenConsumed(
        event_id="e",
        occurred_at=NOW,
        package_version="0.1.0",
        token_id="tok-1",
        answer_id="ans-0",
        thread_id="thread-1",
        checkpoint_id="cp-1",
        outcome="resumed",
    )
    outcome = run(ledger=spent)
    assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.ALREADY_CONSUMED


# -- the order of the steps -------------------------------------------------------------------


def reason_of(outcome: Refusal | PreparedResume) -> RefusalReason:
    assert isinstance(outcome, Refusal), outcome
    return outcome.reason


def test_a_missing_axis_is_refused_before_the_token_is_looked_at() -> None:
    answer = make_answer(token="garbage", run_id=None, scope_hash="tenant-b")
    assert reason_of(run(answer)) is RefusalReason.AXIS_MISSING_RUN


def test_axes_are_checked_in_order_scope_session_run_call() -> None:
    answer = make_answer(scope_hash="", session_id="", run_id="", call_id="")
    assert reason_of(run(answer)) is RefusalReason.AXIS_MISSING_SCOPE
    answer = make_answer(session_id="x", run_id="y", call_id="z")
    assert reason_of(run(answer)) is RefusalReason.SESSION_MISMATCH


def test_the_token_is_checked_before_the_axes_are_matched() -> None:
    answer = make_answer(token="garbage", scope_hash="tenant-b")
    assert reason_of(run(answer)) is RefusalReason.TOKEN_INVALID


def test_an_axis_mismatch_comes_before_the_request_hash() -> None:
    bad_request = make_pause(request_json="{}")
    assert (
        reason_of(run(make_answer(run_id="run-9"), pause=bad_request)) is RefusalReason.RUN_MISMATCH
    )


def test_the_request_hash_comes_before_the_response() -> None:
    bad_request = make_pause(request_json="{}")
    answer = make_answer(response_json="nope")
    assert reason_of(run(answer, pause=bad_request)) is RefusalReason.REQUEST_HASH_MISMATCH


def test_the_response_comes_before_the_recorded_state() -> None:
    answer = make_answer(response_json="nope")
    assert reason_of(run(answer, pause=None)) is RefusalReason.RESPONSE_INVALID


def test_an_unreadable_recorded_request_is_a_request_hash_mismatch() -> None:
    assert reason_of(run(pause=make_pause(request_json="not json"))) is (
        RefusalReason.REQUEST_HASH_MISMATCH
    )


def test_checkpoint_identity_comes_before_the_ledger() -> None:
    pause = make_pause(make_checkpoint(run_id="run-other"))
    outcome = run(pause=pause, ledger=LedgerEntry("resumed", "ans-0"))
    assert reason_of(outcome) is RefusalReason.CHECKPOINT_MISMATCH


# -- helpers around the function ----------------------------------------------------------------


def test_request_hash_is_over_canonical_json() -> None:
    assert request_hash('{"b": 1, "a": [1, 2]}') == request_hash('{"a":[1,2],"b":1}')
    assert request_hash('{"a": 1}') != request_hash('{"a": 2}')
    assert len(request_hash("{}")) == 64
    with pytest.raises(ValueError):
        request_hash("not json")


def test_a_replay_of_the_answer_that_spent_the_token_is_recognised() -> None:
    answer = make_answer()
    assert is_replay(answer, LedgerEntry("resumed", "ans-1"))
    assert not is_replay(answer, LedgerEntry("resumed", "ans-0"))
    assert not is_replay(answer, LedgerEntry("expired", "ans-1"))
    assert not is_replay(answer, None)


def test_every_reason_belongs_to_one_of_steps_one_to_five_or_the_claim() -> None:
    assert {r.step for r in RefusalReason} == {1, 2, 3, 4, 5, 8}
    assert all(r.value == r.value.lower() and " " not in r.value for r in RefusalReason)


def test_refused_carries_the_refusal_as_a_turnlog_error() -> None:
    refusal = Refusal(RefusalReason.PAUSE_EXPIRED, "closed")
    error = Refused(refusal)
    assert isinstance(error, TurnlogError)
    assert (error.refusal, error.reason, error.detail) == (
        refusal,
        RefusalReason.PAUSE_EXPIRED,
        "closed",
    )
    assert str(error) == "pause_expired (step 5): closed"


# -- step 3's remembered hashes, and event ids ----------------------------------------------------

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(value=_JSON_VALUES, indent=st.sampled_from([None, 1]), sort=st.booleans())
def test_a_remembered_request_hash_is_the_request_hash(value: Any, indent: Any, sort: bool) -> None:
    text = json.dumps(value, indent=indent, sort_keys=sort)
    expected = request_hash(text)
    assert resume._recorded_request_hash(text) == expected
    assert resume._recorded_request_hash(text) == expected  # remembered by now


@pytest.mark.parametrize("text", ["not json", "", "{", '{"a": 1} x', "[" * 100_000])
def test_an_unreadable_request_raises_alike_every_time(text: str) -> None:
    with pytest.raises(ValueError) as expected:
        request_hash(text)
    for _ in range(2):
        with pytest.raises(ValueError) as caught:
            resume._recorded_request_hash(text)
        assert str(caught.value) == str(expected.value)
    assert text not in resume._REQUEST_HASHES


def test_a_request_hashed_before_does_not_vouch_for_another() -> None:
    assert isinstance(run(), PreparedResume)  # REQUEST is remembered now
    assert REQUEST in resume._REQUEST_HASHES
    spaced = make_pause(request_json=json.dumps(json.loads(REQUEST), indent=2))
    assert isinstance(run(pause=spaced), PreparedResume)  # the same request, spaced otherwise
    for other in (json.dumps({"questions": []}), REQUEST + " x", "not json"):
        outcome = run(pause=make_pause(request_json=other))
        assert reason_of(outcome) is RefusalReason.REQUEST_HASH_MISMATCH
        assert isinstance(run(pause=make_pause(request_json=other)), Refusal)  # and again


def test_the_remembered_hashes_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resume, "_REQUEST_HASHES", {})
    for n in range(resume._REQUEST_HASHES_MAX * 2 + 5):
        assert resume._recorded_request_hash(f"[{n}]") == request_hash(f"[{n}]")
        assert len(resume._REQUEST_HASHES) <= resume._REQUEST_HASHES_MAX
    long_text = json.dumps("x" * resume._REQUEST_HASHED_CHARS)
    assert resume._recorded_request_hash(long_text) == request_hash(long_text)
    assert long_text not in resume._REQUEST_HASHES


def test_event_ids_are_written_as_uuid4_hex() -> None:
    ids = [event_id() for _ in range(2000)] + [event_meta(NOW)["event_id"] for _ in range(10)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(hex=text)
        assert parsed.hex == text and len(text) == 32
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    # every bit but the six fixed ones varies, as in uuid4
    varying = 0
    for text in ids:
        varying |= int(text, 16) ^ int(ids[0], 16)
    fixed = (0xF000 << 64) | (0xC000 << 48)
    assert varying == ((1 << 128) - 1) & ~fixed


def test_pooled_event_ids_are_never_handed_out_twice_nor_shared_with_a_child() -> None:
    # 2,000 ids cross the 256-id pool several times; a forked child starts from its own draw,
    # never from the rest of its parent's pool (it would write the parent's next ids).
    before = [event_id() for _ in range(100)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its next ids and leave at once
        os.close(read)
        os.write(write, "".join(event_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child_text = pipe.read().decode()
    os.waitpid(pid, 0)
    child = [child_text[i : i + 32] for i in range(0, len(child_text), 32)]
    parent = [event_id() for _ in range(2000)]
    assert len(child) == 50
    assert len(set(before + parent + child)) == len(before) + len(parent) + len(child)


_AXIS = st.sampled_from([None, "", "tenant-a", "sess-1", "run-1", "call-1", "int-1", "other"])


@settings(max_examples=300, deadline=None)
@given(
    scope=_AXIS,
    session=_AXIS,
    run_id=_AXIS,
    call=_AXIS,
    thread=st.sampled_from(["", "thread-1", "thread-2"]),
    tool_call=st.sampled_from(["", "call-1", "c2"]),
)
def test_axes_are_refused_as_the_axes_value_refuses_them(
    scope: str | None,
    session: str | None,
    run_id: str | None,
    call: str | None,
    thread: str,
    tool_call: str,
) -> None:
    answer = make_answer(
        scope_hash=scope, session_id=session, run_id=run_id, call_id=call, thread_id=thread
    )
    claims = dataclasses.replace(CLAIMS, tool_call_id=tool_call)
    assert missing_axis(answer) == Axes.stated_by(answer).missing()
    expected = Axes.stated_by(answer).mismatch(Axes.of_claims(claims))
    if expected is None and answer.thread_id != claims.thread_id:
        expected = Refusal(
            RefusalReason.THREAD_MISMATCH,
            f"the answer states {answer.thread_id!r}, the token {claims.thread_id!r}",
        )
    assert mismatched_axis(answer, claims) == expected
