"""A submitted inbox form into the interaction's response: what a person chose, checked, and
nothing a form could tamper with. The responses built here pass the interactions' own schemas."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from tests.deployment import sample_checkpoint
from turnlog.clock import utc_now
from turnlog.contracts import approvals
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request
from turnlog.contracts.checkpoint import ReservedCall, captured_messages
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.interactions import ASK_USER, default_interactions
from turnlog.contracts.refusals import RefusalReason
from turnlog.inbox.forms import FormProblem, edited_arguments, plain_words, response_for
from turnlog.inbox.views import PENDING, PauseView

QUESTIONS = {
    "questions": [
        {"question": "Which region?", "options": ["eu", {"label": "us", "description": "V"}]},
        {"question": "Which teams?", "options": ["a", "b", "c"], "multiSelect": True},
        {"question": "Anything else?"},
    ]
}
DEPLOY = {"service": "billing", "replicas": 3, "dry_run": False, "tags": ["x"]}


def view(request: Any, interaction: str) -> PauseView:
    cp = sample_checkpoint("forms")
    if interaction == APPROVE_TOOL_CALL:
        call = ReservedCall("call-1", "deploy", request["arguments"])
        cp = dataclasses.replace(cp, messages=captured_messages([], "go", [call]))
    now = utc_now()
    recorded = PauseRecorded(
        event_id="e",
        occurred_at=now,
        package_version="t",
        checkpoint=cp,
        token_id="tok",
        request_json=json.dumps(request),
        request_hash="h",
        response_schema=interaction,
        expires_at=now + timedelta(hours=1),
    )
    return PauseView(recorded, PENDING)


def valid(interaction: str, response: Any) -> Any:
    return default_interactions().get(interaction).validate(json.dumps(response))


def test_ask_user_choices_and_free_text_become_the_schema_s_response() -> None:
    pause = view(QUESTIONS, ASK_USER)
    form = {"q0": ["us"], "q1": ["a", "c"], "other1": ["  "], "other2": ["ship it friday"]}
    response = response_for(pause, form)
    assert response == {
        "answers": [
            {"selections": ["us"], "other": None},
            {"selections": ["a", "c"], "other": None},
            {"selections": [], "other": "ship it friday"},
        ]
    }
    assert valid(ASK_USER, response) == response


@pytest.mark.parametrize(
    ("form", "problem"),
    [
        ({"q0": ["mars"], "other1": ["x"], "other2": ["x"]}, "offers no choice 'mars'"),
        ({"q0": ["eu", "us"], "other1": ["x"], "other2": ["x"]}, "takes one choice"),
        ({"q0": ["eu"], "other2": ["x"]}, "answer question 2"),
        ({"q0": ["eu"], "q1": ["a"], "other2": ["x", "y"]}, "more than once"),
        ({"q0": ["eu"], "q1": ["a"], "other2": ["x" * 10_001]}, "longer than"),
    ],
)
def test_a_form_that_makes_no_answer_is_refused_by_what_is_wrong(
    form: dict[str, list[str]], problem: str
) -> None:
    with pytest.raises(FormProblem, match=problem):
        response_for(view(QUESTIONS, ASK_USER), form)


def test_tool_approval_approve_edit_and_reject_are_bound_to_the_shown_call() -> None:
    pause = view(approval_request("deploy", DEPLOY), APPROVE_TOOL_CALL)
    approved = response_for(pause, {"decision": ["approve"]})
    assert approved == approvals.approve("deploy", DEPLOY)
    edited = response_for(
        pause, {"decision": ["edit"], "arguments": [json.dumps({**DEPLOY, "replicas": 5})]}
    )
    assert edited == approvals.edit("deploy", DEPLOY, {**DEPLOY, "replicas": 5})
    rejected = response_for(pause, {"decision": ["reject"], "message": ["not today"]})
    assert rejected == approvals.reject("deploy", DEPLOY, "not today")
    for response in (approved, edited, rejected):
        valid(APPROVE_TOOL_CALL, response)
        tool, hashed = approvals.request_binding(pause.recorded.request_json)
        assert approvals.approval_mismatch(response, tool, hashed) is None


@pytest.mark.parametrize(
    ("form", "problem"),
    [
        ({"decision": ["reject"]}, "say why"),
        ({"decision": ["maybe"]}, "approve, edit or reject"),
        ({}, "approve, edit or reject"),
        ({"decision": ["edit"], "arguments": ["{nope"]}, "not valid JSON at line 1, column 2"),
        ({"decision": ["edit"], "arguments": ["[1]"]}, "JSON object"),
        ({"decision": ["edit"], "arguments": ['{"force": true}']}, "no argument 'force'"),
        ({"decision": ["edit"], "arguments": ['{"replicas": "5"}']}, "must stay a number"),
        ({"decision": ["edit"], "arguments": ['{"dry_run": 1}']}, "must stay true or false"),
        ({"decision": ["edit"], "arguments": ['{"tags": "x"}']}, "must stay a list"),
    ],
)
def test_an_approval_form_is_checked_before_anything_is_sent(
    form: dict[str, list[str]], problem: str
) -> None:
    pause = view(approval_request("deploy", DEPLOY), APPROVE_TOOL_CALL)
    with pytest.raises(FormProblem, match=problem):
        response_for(pause, form)


def test_edited_arguments_of_a_call_without_named_arguments_are_any_json() -> None:
    assert edited_arguments("[1, 2]", [3]) == [1, 2]
    assert edited_arguments('{"a": 2}', {"a": None}) == {"a": 2}  # a null had no type to keep
    with pytest.raises(FormProblem, match="must stay a number, got null"):
        edited_arguments('{"a": null}', {"a": 1})


def test_another_interaction_is_answered_with_its_json() -> None:
    pause = view({"what": "date"}, "pick_date")
    assert response_for(pause, {"response": ['{"date": "2026-12-24"}']}) == {"date": "2026-12-24"}
    with pytest.raises(FormProblem, match="JSON"):
        response_for(pause, {"response": ["tomorrow"]})


def test_refusals_read_as_plain_words() -> None:
    assert plain_words(RefusalReason.ALREADY_CONSUMED) == "someone else answered first"
    assert "expired" in plain_words(RefusalReason.PAUSE_EXPIRED)
    assert "expired" in plain_words(RefusalReason.TOKEN_EXPIRED)
    assert plain_words("scope_mismatch") == "refused: scope mismatch"
