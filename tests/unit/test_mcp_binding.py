"""The MCP door's pure rules: what a request_state is bound to, and what a client's elicitation
result decides (turnlog.mcp.binding)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, arguments_hash
from turnlog.contracts.claims import PauseClaims
from turnlog.mcp.binding import (
    ANONYMOUS,
    Decision,
    StateRefused,
    check_binding,
    decision_of,
    principal_scope,
    server_session,
)

ARGS = {"service": "api", "region": "eu"}
NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _claims(**changes: str) -> PauseClaims:
    fields = {
        "scope_hash": principal_scope("alice"),
        "session_id": server_session("deployer"),
        "interaction": APPROVE_TOOL_CALL,
        "tool_name": "deploy",
        "arguments_hash": arguments_hash(ARGS),
        **changes,
    }
    return PauseClaims(
        token_id="t1", run_id="r", tool_call_id="call-1", interrupt_id="", thread_id="mcp-1",
        checkpoint_id="approval", request_hash="h", issued_at=NOW, not_before=NOW,
        expires_at=NOW + timedelta(hours=1), **fields,
    )  # fmt: skip


def _reason(claims: PauseClaims, *, tool: str = "deploy", principal: str | None = "alice") -> str:
    with pytest.raises(StateRefused) as refused:
        check_binding(claims, server="deployer", tool=tool, arguments=ARGS, principal=principal)
    return refused.value.reason


def test_a_state_is_bound_to_server_interaction_tool_arguments_and_principal() -> None:
    check_binding(_claims(), server="deployer", tool="deploy", arguments=ARGS, principal="alice")
    assert _reason(_claims(session_id=server_session("billing"))) == "state_foreign"
    assert _reason(_claims(interaction="ask_user")) == "state_foreign"
    assert _reason(_claims(), tool="destroy") == "state_request_mismatch"
    assert _reason(_claims(arguments_hash=arguments_hash({**ARGS, "region": "us"}))) == (
        "state_request_mismatch"
    )
    assert _reason(_claims(), principal="mallory") == "state_principal_mismatch"
    assert _reason(_claims(), principal=None) == "state_principal_mismatch"


def test_the_principal_is_kept_as_a_digest_and_no_principal_is_its_own_scope() -> None:
    assert principal_scope(None) == ANONYMOUS
    assert "alice" not in principal_scope("alice")
    assert principal_scope("alice") == principal_scope("alice") != principal_scope("bob")


@pytest.mark.parametrize(
    ("result", "approved"),
    [
        ({"action": "accept", "content": {"decision": "approve"}}, True),
        ({"action": "accept", "content": {"decision": "reject"}}, False),
        ({"action": "decline"}, False),
        ({"action": "cancel"}, False),
    ],
)
def test_an_elicitation_result_decides(result: dict[str, object], approved: bool) -> None:
    assert decision_of(result).approved is approved


@pytest.mark.parametrize(
    "result",
    [
        {"action": "accept", "content": {"decision": "maybe"}},
        {"action": "accept", "content": {}},
        {"action": "accept", "content": {"decision": "approve", "message": 3}},
        {"action": "shrug"},
        "approve",
    ],
)
def test_anything_else_is_refused_as_response_invalid(result: object) -> None:
    with pytest.raises(StateRefused) as refused:
        decision_of(result)
    assert refused.value.reason == "response_invalid"


def test_the_same_decision_is_the_same_answer_and_another_is_not() -> None:
    yes = Decision(True, None)
    assert yes.answer_id("t1") == Decision(True, None).answer_id("t1")
    assert yes.answer_id("t1") != Decision(False, "no").answer_id("t1")
    assert yes.answer_id("t1") != yes.answer_id("t2")
    assert yes.response("deploy", ARGS)["arguments_hash"] == arguments_hash(ARGS)
    assert Decision(False, None).response("deploy", ARGS)["decision"] == "reject"
