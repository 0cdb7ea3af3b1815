"""The agent's side: the model's turn stops on an ``ask_user`` call, and turnlog records the
turn so that any process can continue it. What the person's side needs -- the token and the
four axes an answer must state -- goes to pause.json (in a real system: your UI or queue)."""

import asyncio
import json
from pathlib import Path

from turnlog import (
    ASK_USER,
    Paused,
    ReservedCall,
    Settings,
    TurnCheckpoint,
    Turnlog,
    captured_messages,
)

QUESTION = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}


async def pause() -> Paused:
    history = [
        {"role": "system", "content": "You deploy services."},
        {"role": "user", "content": "Deploy the billing service."},
    ]
    # The model answered with a question for the person: one ask_user tool call, not run.
    asking = [ReservedCall("call-1", ASK_USER, QUESTION)]
    checkpoint = TurnCheckpoint(
        thread_id="thread-1",
        checkpoint_id="cp-1",
        run_id="run-1",
        session_id="session-1",
        scope_hash="tenant-a",
        tool_call_id="call-1",
        name=ASK_USER,
        messages=captured_messages(history, "Which region?", asking),
    )
    async with Turnlog(Settings.from_env()) as tl:
        return await tl.pause(checkpoint, request=QUESTION)  # durable when this returns


paused = asyncio.run(pause())
Path("pause.json").write_text(json.dumps({"token": paused.token, "axes": dict(paused.axes)}))
print(f"paused {paused.thread_id}: token {paused.token_id}")
