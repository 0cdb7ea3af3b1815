"""One example paused turn per built-in interaction: what ``turnlog pause --example`` prints and
what ``examples/checkpoints/`` holds (a test keeps the files equal to these).

A checkpoint file is the canonical body of a :class:`TurnCheckpoint`; the request travels beside
it (``--request``) because the token binds its hash. Each example is a turn that stopped in the
middle of an asking round, so the answer has a call to be the result of.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.interactions import ASK_USER

_WHEN = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
_DEPLOY = {"service": "billing", "region": "eu-west-1", "version": "2.4.1"}
_QUESTION = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}


def _turn(thread: str, interaction: str, call: ReservedCall, said: str) -> TurnCheckpoint:
    return TurnCheckpoint(
        run_id=f"run-{thread}",
        session_id=f"session-{thread}",
        thread_id=thread,
        checkpoint_id="cp-1",
        scope_hash="tenant-a",
        tool_call_id=call.id,
        interrupt_id=f"int-{thread}",
        name=interaction,
        prompt="Continue with the person's answer.",
        messages=captured_messages(
            [
                {"role": "system", "content": "You deploy services."},
                {"role": "user", "content": "Deploy the billing service."},
            ],
            said,
            [call],
        ),
        sequence=1,
        tenant_id="tenant-a",
        created_at=_WHEN,
        package_version="example",
    )


#: interaction -> (the paused turn, the request it asked, an answer that resumes it)
EXAMPLES: dict[str, tuple[TurnCheckpoint, Any, Any]] = {
    ASK_USER: (
        _turn("thread-ask", ASK_USER, ReservedCall("call-1", ASK_USER, _QUESTION), "Which region?"),
        _QUESTION,
        {"answers": [{"selections": ["eu"], "other": None}]},
    ),
    APPROVE_TOOL_CALL: (
        _turn(
            "thread-approve",
            APPROVE_TOOL_CALL,
            ReservedCall("call-1", "deploy", _DEPLOY),
            "Deploying billing 2.4.1 to eu-west-1.",
        ),
        approval_request("deploy", _DEPLOY),
        None,  # built per decision: approve / edit / reject (turnlog.approve, ...)
    ),
}


def checkpoint_text(interaction: str) -> str:
    """The example checkpoint file of ``interaction`` (indented canonical body)."""
    checkpoint = EXAMPLES[interaction][0]
    return json.dumps(checkpoint.body(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def request_text(interaction: str) -> str:
    """The ``--request`` to pause the example with."""
    return json.dumps(EXAMPLES[interaction][1], sort_keys=True)
