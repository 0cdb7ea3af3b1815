"""approve_tool_call through the real worker: approve, edit and reject resume the turn with the
call to run (or the rejection as its result), and an approval replayed onto a pause whose call
has other arguments is refused by name -- even when it skips the publisher's pre-check."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.test_api import api_settings
from turnlog import (
    APPROVE_TOOL_CALL,
    PauseInvalid,
    RefusalReason,
    Refused,
    ReservedCall,
    TurnCheckpoint,
    Turnlog,
    approval_request,
    approve,
    approved_call,
    captured_messages,
    edit,
    reject,
)
from turnlog.producers.answers import AnswerPublisher


def deploy_turn(thread: str, arguments: dict[str, Any]) -> TurnCheckpoint:
    """A turn that asked to run deploy(arguments) as call-1 and paused for its approval."""
    messages = captured_messages(
        [{"role": "user", "content": "Deploy billing."}],
        "Deploying now.",
        [ReservedCall("call-1", "deploy", arguments)],
    )
    return dataclasses.replace(sample_checkpoint(thread), name=APPROVE_TOOL_CALL, messages=messages)


async def test_approve_edit_reject_and_a_replayed_approval_through_the_worker(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    eu = {"service": "billing", "region": "eu"}
    us = {"service": "billing", "region": "us"}
    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        pauses = {}
        for thread, args in (("approve", eu), ("edit", eu), ("reject", eu), ("other", us)):
            pauses[thread] = await tl.pause(
                deploy_turn(f"ap-{thread}", args),
                request=approval_request("deploy", args),
                interaction=APPROVE_TOOL_CALL,
            )

        approved = await tl.answer(
            pauses["approve"].token, approve("deploy", eu), **pauses["approve"].axes
        )
        edited = await tl.answer(
            pauses["edit"].token, edit("deploy", eu, us, message="us only"), **pauses["edit"].axes
        )
        rejected = await tl.answer(
            pauses["reject"].token, reject("deploy", eu, "not on a Friday"), **pauses["reject"].axes
        )

        # The eu approval on the us pause: the library refuses it before Kafka...
        with pytest.raises(Refused) as refused:
            await tl.answer(pauses["other"].token, approve("deploy", eu), **pauses["other"].axes)
        assert refused.value.reason is RefusalReason.APPROVAL_MISMATCH
        # ...and the worker refuses it by name when a client skips the pre-check.
        async with AnswerPublisher(tl.settings, tl.verifier) as raw:
            replay = raw.build(
                pauses["other"].token, json.dumps(approve("deploy", eu)), **pauses["other"].axes
            )
            await raw.publish_unchecked(replay)

        outcomes = {
            name: await tl.outcome(sent.answer_id, timeout=45)
            for name, sent in (("approve", approved), ("edit", edited), ("reject", rejected))
        }
        replayed = await tl.outcome(replay.answer_id, thread_id="ap-other", timeout=45)
        assert not worker.done()

    assert replayed.reason == RefusalReason.APPROVAL_MISMATCH.value
    assert replayed.rejected is not None and replayed.rejected.step == 4

    turn = outcomes["approve"].resumed
    assert turn is not None
    assert approved_call(turn) == {"id": "call-1", "name": "deploy", "arguments": eu}
    assert not any(m.get("tool_call_id") == "call-1" for m in turn.history)  # left to run

    turn = outcomes["edit"].resumed
    assert turn is not None
    assert approved_call(turn) == {"id": "call-1", "name": "deploy", "arguments": us}

    turn = outcomes["reject"].resumed
    assert turn is not None
    assert approved_call(turn) is None
    results = [m["content"] for m in turn.history if m.get("tool_call_id") == "call-1"]
    assert len(results) == 1 and "not on a Friday" in results[0]


async def test_an_approval_pause_must_ask_about_the_call_it_stopped(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        with pytest.raises(PauseInvalid, match="not call 'call-1'"):
            await tl.pause(
                deploy_turn("ap-lie", {"region": "eu"}),
                request=approval_request("deploy", {"region": "us"}),
                interaction=APPROVE_TOOL_CALL,
            )
