"""An agent that asks the person a question, and continues -- possibly in another process -- with
the answer. A scripted model stands in for the LLM: no network, no API key.

    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/ask_user_agent.py

The agent pauses on its ``ask_user`` call, a separate task answers as the person would, the
resume worker checks the answer and emits the resumed turn, and the agent continues from that
turn's history, in which the answer already is the result of the ``ask_user`` call. It waits
for its own pause's turn (``resumed_turn``), taking nothing of any other thread's.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

from turnlog import (
    ASK_USER,
    Paused,
    ReservedCall,
    Settings,
    TurnCheckpoint,
    Turnlog,
    captured_messages,
    history_dicts,
    write_keypair,
)

QUESTION = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}


class ScriptedModel:
    """Asks for the region, then deploys wherever the person said."""

    def reply(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        if history[-1]["role"] == "user":
            call = {"id": "call-1", "name": ASK_USER, "arguments": json.dumps(QUESTION)}
            return {"role": "assistant", "content": "Which region?", "tool_calls": [call]}
        answer = next(m["content"] for m in history if m.get("tool_call_id") == "call-1")
        region = re.search(r'selected "([^"]+)"', answer)
        return {"role": "assistant", "content": f"Deploying billing to {region and region[1]}."}


async def agent_pauses(tl: Turnlog, model: ScriptedModel, thread: str) -> Paused:
    history = [
        {"role": "system", "content": "You deploy services."},
        {"role": "user", "content": "Deploy the billing service."},
    ]
    message = model.reply(history)
    call = message["tool_calls"][0]
    checkpoint = TurnCheckpoint(
        run_id=f"run-{thread}",
        session_id=f"session-{thread}",
        thread_id=thread,
        checkpoint_id="cp-1",
        scope_hash="tenant-a",
        tool_call_id=call["id"],
        name=ASK_USER,
        prompt="Continue with the person's answer.",
        messages=captured_messages(
            history, message["content"], [ReservedCall(call["id"], call["name"], QUESTION)]
        ),
    )
    return await tl.pause(checkpoint, request=QUESTION)


async def person_answers(tl: Turnlog, paused: Paused) -> None:
    response = {"answers": [{"selections": ["eu"], "other": None}]}
    sent = await tl.answer(paused.token, response, **paused.axes)
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def agent_continues(tl: Turnlog, model: ScriptedModel, paused: Paused) -> str:
    # The turn of this pause: read from its thread's partition, with no consumer group, so no
    # other thread's turn is taken; `since` starts the read at the pause, not a week back.
    turn = await tl.resumed_turn(
        paused.thread_id, token_id=paused.token_id, since=paused.pause.occurred_at, timeout=60
    )
    final: str = model.reply(history_dicts(turn))["content"]
    return final


async def main() -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    thread, model = f"example-{uuid.uuid4().hex[:8]}", ScriptedModel()
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await agent_pauses(tl, model, thread)
        print("paused; token", paused.token_id)
        answering = asyncio.create_task(person_answers(tl, paused))
        print("agent:", await agent_continues(tl, model, paused))
        await answering
    await worker


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 120))
