"""approve_tool_call as a pure contract: bound to the exact paused call by the token's claims,
refused by name on any other call, and rehydrated as the call to run or the rejection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_resume import (
    ISSUER,
    NOW,
    VERIFIER,
    make_answer,
    make_checkpoint,
    make_pause,
    run,
)
from turnlog.contracts.approvals import (
    APPROVE_TOOL_CALL,
    approval_request,
    approve,
    arguments_hash,
    edit,
    reject,
)
from turnlog.contracts.checkpoint import ReservedCall, captured_messages
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.interactions import default_interactions
from turnlog.contracts.refusals import RefusalReason, Refused
from turnlog.contracts.resume import PreparedResume, prepare_resume, request_hash
from turnlog.tokens import PauseClaims

ARGS = {"service": "billing", "region": "eu"}


def approval_pause(arguments: Any = ARGS, *, requested: Any = ARGS) -> PauseRecorded:
    """A turn that asked to run deploy(arguments) (call-1) and paused for its approval."""
    messages = captured_messages(
        [{"role": "user", "content": "Deploy billing."}],
        "Deploying.",
        [ReservedCall("call-1", "deploy", arguments), ReservedCall("c2", "notify", {})],
    )
    cp = make_checkpoint(messages=messages, name=APPROVE_TOOL_CALL)
    request = json.dumps(approval_request("deploy", requested))
    return make_pause(
        cp,
        request_json=request,
        request_hash=request_hash(request),
        response_schema=APPROVE_TOOL_CALL,
    )


def answer_for(pause: PauseRecorded, response: dict[str, Any]) -> Any:
    token = ISSUER.issue(PauseClaims.for_pause(pause))
    return run(make_answer(token=token, response_json=json.dumps(response)), pause=pause)


def test_the_token_claims_the_tool_and_the_arguments_hash() -> None:
    claims = PauseClaims.for_pause(approval_pause())
    assert claims.tool_name == "deploy"
    assert claims.arguments_hash == arguments_hash(ARGS)
    assert PauseClaims.for_pause(make_pause()).tool_name == ""  # ask_user binds no call


def test_an_approval_request_that_is_not_the_paused_call_gets_no_token() -> None:
    with pytest.raises(ValueError, match="not call 'call-1'"):
        PauseClaims.for_pause(approval_pause(requested={"service": "billing", "region": "us"}))
    with pytest.raises(ValueError, match="tool"):
        bad = approval_pause()
        request = json.dumps({"arguments": ARGS})
        PauseClaims.for_pause(
            make_pause(bad.checkpoint, request_json=request, response_schema=APPROVE_TOOL_CALL)
        )


def test_approve_leaves_the_call_open_for_the_agent_to_run() -> None:
    prepared = answer_for(approval_pause(), approve("deploy", ARGS))
    assert isinstance(prepared, PreparedResume)
    results = {m["tool_call_id"]: m["content"] for m in prepared.history if m["role"] == "tool"}
    assert "call-1" not in results  # the agent runs it
    assert set(results) == {"c2"}  # the other reserved call: not dispatched
    asking = [m for m in prepared.history if m["role"] == "assistant"][-1]
    assert json.loads(asking["tool_calls"][0]["arguments"]) == ARGS


def test_edit_runs_the_persons_arguments_in_place_of_the_models() -> None:
    edited = {"service": "billing", "region": "us"}
    prepared = answer_for(approval_pause(), edit("deploy", ARGS, edited, message="us, please"))
    assert isinstance(prepared, PreparedResume)
    asking = [m for m in prepared.history if m["role"] == "assistant"][-1]
    assert json.loads(asking["tool_calls"][0]["arguments"]) == edited
    assert not any(m.get("tool_call_id") == "call-1" for m in prepared.history)


def test_reject_becomes_the_calls_result_with_the_message() -> None:
    prepared = answer_for(approval_pause(), reject("deploy", ARGS, "not on a Friday"))
    assert isinstance(prepared, PreparedResume)
    result = [m for m in prepared.history if m.get("tool_call_id") == "call-1"]
    assert len(result) == 1
    assert "rejected" in result[0]["content"] and "not on a Friday" in result[0]["content"]


@pytest.mark.parametrize(
    "response",
    [
        approve("deploy", {"service": "billing", "region": "us"}),  # other arguments
        approve("drop_database", ARGS),  # other tool
        edit("deploy", {"region": "us"}, ARGS),  # an edit of another call
    ],
    ids=["other-arguments", "other-tool", "edit-of-another-call"],
)
def test_an_approval_for_another_call_is_refused_by_name(response: dict[str, Any]) -> None:
    refusal = answer_for(approval_pause(), response)
    assert not isinstance(refusal, PreparedResume)
    assert refusal.reason is RefusalReason.APPROVAL_MISMATCH
    assert refusal.step == 4


def test_an_edit_needs_arguments_and_only_an_edit_has_them() -> None:
    without = {**edit("deploy", ARGS, ARGS), "arguments_json": None}
    with_args = {**approve("deploy", ARGS), "arguments_json": "{}"}
    for response in (without, with_args):
        refusal = answer_for(approval_pause(), response)
        assert not isinstance(refusal, PreparedResume)
        assert refusal.reason is RefusalReason.RESPONSE_INVALID


def test_the_response_schema_refuses_an_unknown_decision() -> None:
    interaction = default_interactions().get(APPROVE_TOOL_CALL)
    with pytest.raises(Refused) as refused:
        interaction.validate(json.dumps({**approve("deploy", ARGS), "decision": "maybe"}))
    assert refused.value.reason is RefusalReason.RESPONSE_INVALID


def test_a_users_own_interaction_is_registered_without_editing_turnlog() -> None:
    registry = default_interactions()
    registry.register(
        "pick_date",
        {"type": "record", "name": "PickDate", "fields": [{"name": "date", "type": "string"}]},
        lambda r: f"The person picked {r['date']}.",
    )
    pause = make_pause(make_checkpoint(name="pick_date"), response_schema="pick_date")
    token = ISSUER.issue(PauseClaims.for_pause(pause))

    prepared = prepare_resume(
        make_answer(token=token, response_json='{"date": "2026-12-24"}'),
        verifier=VERIFIER,
        interactions=registry,
        pause=pause,
        ledger=None,
        now=NOW,
    )
    assert isinstance(prepared, PreparedResume)
    assert prepared.observation == "The person picked 2026-12-24."
