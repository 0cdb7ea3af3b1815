"""The agent's side of an approval: the model asks to run a tool with side effects, and the turn
pauses before it runs. The request is the exact call, so the approval is bound to it.

    python docs/snippets/approval_pause.py THREAD_ID
"""

import asyncio
import json
import sys
from pathlib import Path

from turnlog import (
    APPROVE_TOOL_CALL,
    Paused,
    ReservedCall,
    Settings,
    TurnCheckpoint,
    Turnlog,
    approval_request,
    captured_messages,
)

TOOL, ARGUMENTS = "deploy", {"service": "billing", "region": "eu"}


async def pause(thread_id: str) -> Paused:
    history = [{"role": "user", "content": "Deploy billing."}]
    # The model's reply: a call of the deploy tool, which must not run before a person says so.
    asking = [ReservedCall("call-1", TOOL, ARGUMENTS)]
    checkpoint = TurnCheckpoint(
        thread_id=thread_id,
        checkpoint_id="cp-1",
        run_id=f"run-{thread_id}",
        session_id="session-1",
        scope_hash="tenant-a",
        tool_call_id="call-1",
        name=APPROVE_TOOL_CALL,
        messages=captured_messages(history, "Deploying.", asking),
    )
    async with Turnlog(Settings.from_env()) as tl:
        return await tl.pause(checkpoint, request=approval_request(TOOL, ARGUMENTS))


paused = asyncio.run(pause(sys.argv[1]))
# The person's side gets the call to decide on, the token and the axes.
call = {"tool": TOOL, "arguments": ARGUMENTS}
state = {"token": paused.token, "axes": dict(paused.axes), "call": call}
Path("pause.json").write_text(json.dumps(state))
print(f"paused {paused.thread_id} for approval of {TOOL}: token {paused.token_id}")
