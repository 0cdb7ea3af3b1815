"""An agent whose tool call waits for a person's approval: approve, edit the arguments, or reject
with a message. A scripted model stands in for the LLM: no network, no API key.

    export TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092
    python examples/approve_tool_call_agent.py [approve|edit|reject]

The model asks to call ``deploy``; the agent pauses before running it. A separate task decides as
the person would; the approval is bound to that exact call (tool and arguments), so it cannot be
replayed onto another. The resumed turn gives the call to run (``approved_call``, with edited
arguments if any) -- or, when rejected, the history already holds the rejection as its result.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

from turnlog import (
    APPROVE_TOOL_CALL,
    Paused,
    ReservedCall,
    Settings,
    TurnCheckpoint,
    Turnlog,
    approval_request,
    approve,
    approved_call,
    captured_messages,
    edit,
    history_dicts,
    reject,
    write_keypair,
)

ARGS = {"service": "billing", "region": "eu"}


def deploy(service: str, region: str) -> str:
    """The tool with side effects that needs a person's approval."""
    return f"deployed {service} to {region}"


class ScriptedModel:
    """Asks to deploy, then reports what the tool returned (or that it was rejected)."""

    def reply(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        if history[-1]["role"] == "user":
            call = {"id": "call-1", "name": "deploy", "arguments": json.dumps(ARGS)}
            return {"role": "assistant", "content": "Deploying.", "tool_calls": [call]}
        result = next(m["content"] for m in history if m.get("tool_call_id") == "call-1")
        return {"role": "assistant", "content": f"Done: {result}"}


async def agent_pauses(tl: Turnlog, model: ScriptedModel, thread: str) -> Paused:
    history = [{"role": "user", "content": "Deploy billing."}]
    message = model.reply(history)
    call = message["tool_calls"][0]
    arguments = json.loads(call["arguments"])
    checkpoint = TurnCheckpoint(
        run_id=f"run-{thread}",
        session_id=f"session-{thread}",
        thread_id=thread,
        checkpoint_id="cp-1",
        scope_hash="tenant-a",
        tool_call_id=call["id"],
        name=APPROVE_TOOL_CALL,
        prompt="Continue after the approval.",
        messages=captured_messages(
            history, message["content"], [ReservedCall(call["id"], call["name"], arguments)]
        ),
    )
    return await tl.pause(checkpoint, request=approval_request(call["name"], arguments))


async def person_decides(tl: Turnlog, paused: Paused, decision: str) -> None:
    response = {
        "approve": approve("deploy", ARGS),
        "edit": edit("deploy", ARGS, {"service": "billing", "region": "us"}),
        "reject": reject("deploy", ARGS, "not on a Friday"),
    }[decision]
    sent = await tl.answer(paused.token, response, **paused.axes)
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def agent_continues(tl: Turnlog, model: ScriptedModel, paused: Paused) -> str:
    # This pause's turn alone: no other thread's turn is taken from those who continue them.
    turn = await tl.resumed_turn(
        paused.thread_id, token_id=paused.token_id, since=paused.pause.occurred_at, timeout=60
    )
    history = history_dicts(turn)
    call = approved_call(turn)
    if call is not None:  # approved (maybe edited): run it, add its result
        result = deploy(**call["arguments"])
        history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    final: str = model.reply(history)["content"]
    return final


async def main(decision: str) -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    thread, model = f"example-{uuid.uuid4().hex[:8]}", ScriptedModel()
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await agent_pauses(tl, model, thread)
        print("paused for approval; token", paused.token_id)
        deciding = asyncio.create_task(person_decides(tl, paused, decision))
        print("agent:", await agent_continues(tl, model, paused))
        await deciding
    await worker


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(sys.argv[1] if len(sys.argv) > 1 else "approve"), 120))
