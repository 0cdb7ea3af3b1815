"""An OpenAI Agents SDK agent whose tool needs approval, paused durably by turnlog and continued
in another process. A scripted model on the SDK's ``Model`` interface stands in for the LLM: no
network, no API key.

    pip install -e '.[openai-agents]'
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/openai_agents_agent.py

runs the three steps one after the other, with a resume worker, in one process; each step is
also a process of its own, as in a deployment (a worker, ``turnlog worker``, runs meanwhile):

    python examples/openai_agents_agent.py start      # the run stops for the approval; paused
    python examples/openai_agents_agent.py answer     # the person approves the call
    python examples/openai_agents_agent.py continue   # a new run goes on from the resumed turn

The run stops for the approval of ``deploy``; it is recorded as an ``approve_tool_call`` pause
and the process may exit (the SDK's ``RunState`` is not needed again). The person approves it,
the worker resumes it, and a new run continues from the resumed turn alone -- the approved call
run through the agent's own tool (``resume_input``). ``pause.json``, beside turnlog's state
directory in ``openai-agents-example/``, is what is handed from one step to the next.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from turnlog import Settings, Turnlog, TurnResumed, approve, write_keypair
from turnlog.adapters.openai_agents import pause_approval, resume_input

ARGS = {"service": "billing", "region": "eu"}
NO_TRACING = RunConfig(tracing_disabled=True)


class ScriptedModel(Model):
    """Asks to deploy; once the call has an output, reports it."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        items = args[1] if len(args) > 1 else kwargs["input"]
        outputs = [
            i["output"]
            for i in (items if isinstance(items, list) else [])
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if not outputs:
            call = ResponseFunctionToolCall(
                arguments=json.dumps(ARGS), call_id="call-1", name="deploy", type="function_call"
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(text=f"Done: {outputs[-1]}", type="output_text", annotations=[])
        message = ResponseOutputMessage(
            id="m1", content=[text], role="assistant", status="completed", type="message"
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool(needs_approval=True)
def deploy(service: str, region: str) -> str:
    """Deploy a service to a region."""
    return f"deployed {service} to {region}"


def make_agent() -> Agent[Any]:
    return Agent(name="deployer", model=ScriptedModel(), tools=[deploy])


async def start(tl: Turnlog, files: Path) -> None:
    """The agent's process: the run stops for the approval; it is paused and handed over."""
    thread = f"openai-agents-{uuid.uuid4().hex[:8]}"
    first = await Runner.run(make_agent(), "Deploy billing.", run_config=NO_TRACING)
    paused = await pause_approval(
        tl, first, thread_id=thread, run_id="run-1", session_id="s-1", scope_hash="t-a"
    )
    handed = {
        "thread": thread,
        "token": paused.token,
        "token_id": paused.token_id,
        "axes": dict(paused.axes),
    }
    (files / "pause.json").write_text(json.dumps(handed))
    print("paused for approval; token", paused.token_id)


async def answer(tl: Turnlog, files: Path) -> None:
    """The person's side, in any process: approve exactly the call shown."""
    handed = json.loads((files / "pause.json").read_text())
    sent = await tl.answer(handed["token"], approve("deploy", ARGS), **handed["axes"])
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def continue_run(tl: Turnlog, files: Path) -> None:
    """Any process: the pause's resumed turn, and a new run continued from it alone."""
    handed = json.loads((files / "pause.json").read_text())
    agent = make_agent()
    async with tl.resumed() as turns:
        async for turn in turns:
            if not isinstance(turn, TurnResumed) or turn.token_id != handed["token_id"]:
                continue  # another pause's turn: an agent service continues each one
            continued = await resume_input(turn, agent)
            second = await Runner.run(agent, continued, run_config=NO_TRACING)
            await turns.commit()  # leaving the loop: this turn is handled
            print("agent:", second.final_output)
            return


STEPS = {"start": [start], "answer": [answer], "continue": [continue_run]}


async def main(step: str) -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    files = settings.state_dir.parent / "openai-agents-example"
    files.mkdir(parents=True, exist_ok=True)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker()) if step == "all" else None
        for run in STEPS.get(step) or [start, answer, continue_run]:
            await run(tl, files)
    if worker is not None:
        await worker


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "all"
    if chosen not in {*STEPS, "all"}:
        sys.exit(f"usage: {sys.argv[0]} [start|answer|continue]")
    asyncio.run(asyncio.wait_for(main(chosen), 120))
