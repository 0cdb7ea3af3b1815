"""The agent's side after the decision, in any process: ``approved_call`` is the call to run --
with the person's arguments if they edited them -- or ``None`` when they rejected it, in which
case the history already tells the model why, as the call's result.

    python docs/snippets/approval_continue.py THREAD_ID

(One-shot, for the tutorial: it waits for its own thread's turn, takes nothing of any other
thread's, and claims the turn, so a second run raises AlreadyContinued and deploys nothing. An
agent service loops over every thread's turns instead; see the page.)
"""

import asyncio
import sys
from typing import Any

from turnlog import Settings, Turnlog, approved_call, history_dicts


def deploy(service: str, region: str) -> str:
    """The tool with side effects."""
    return f"deployed {service} to {region}"


async def continue_turn(thread_id: str) -> None:
    async with Turnlog(Settings.from_env()) as tl:
        turn = await tl.resumed_turn(thread_id, timeout=60)  # this thread's turn, claimed
        history: list[dict[str, Any]] = history_dicts(turn)
        call = approved_call(turn)
        if call is not None:  # approved, perhaps edited: run it now, exactly this call
            result = deploy(**call["arguments"])
            history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            print(f"{turn.thread_id}: ran {call['name']}({call['arguments']}): {result}")
        else:  # rejected: nothing runs; the person's message is the call's result
            print(f"{turn.thread_id}: not run; the model reads: {history[-1]['content']}")
        # hand `history` to the model to continue


asyncio.run(continue_turn(sys.argv[1]))
