"""An OpenAI Agents SDK agent whose tool needs approval, paused durably by turnlog and continued,
once, in another process. A scripted model on the SDK's ``Model`` interface stands in for the
LLM: no network, no API key.

    pip install -e '.[openai-agents]'
    turnlog keys new --kid example
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/openai_agents_agent.py

runs the three steps one after the other, with a resume worker, in one process; each step is
also a process of its own, as in a deployment (a worker, ``turnlog worker``, runs meanwhile):

    python examples/openai_agents_agent.py start      # the run stops for the approval; paused
    python examples/openai_agents_agent.py answer     # the person approves the call
    python examples/openai_agents_agent.py continue   # a new run goes on from the resumed turn

The run stops for the approval of ``deploy``; ``pause_run`` records it as an
``approve_tool_call`` pause and the process may exit: the run's items travel in the pause, so
nothing of the SDK's (its ``RunState``) has to be kept anywhere else. The person approves it,
the worker resumes it, and ``continue_run`` claims the resumed turn, runs the approved call
through the agent's own tool and a new run on from there. Run ``continue`` twice, or in two
processes at once: the deploy runs once, and every other ``continue`` ends with
``AlreadyContinued`` naming who continued it. The tool reads its call's idempotency key with
``idempotency_key(ctx)`` and writes a line per run to ``deployments.log``; that file and
``pause.json`` (the token and axes handed from one step to the next) are kept beside turnlog's
state directory, in ``openai-agents-example/``. Lines marked ``# turnlog`` are what turnlog adds
to the agent, ``# turnlog: answering`` to the person's side, ``# turnlog: both`` to both.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, RunContextWrapper, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from turnlog import Settings, Turnlog, TurnlogError, approve  # turnlog: both
from turnlog.adapters.openai_agents import continue_run, idempotency_key, pause_run  # turnlog

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


def make_agent(files: Path) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def deploy(ctx: RunContextWrapper[Any], service: str, region: str) -> str:
        """Deploy a service to a region."""
        # Continued by turnlog, the call has an idempotency key: a deploy API taking it would
        # deploy once even if the process died and was retaken.
        with (files / "deployments.log").open("a") as deployments:
            deployments.write(f"{service} {region} {idempotency_key(ctx)}\n")  # turnlog
        return f"deployed {service} to {region}"

    return Agent(name="deployer", model=ScriptedModel(), tools=[deploy])


async def start(tl: Turnlog, files: Path) -> None:
    """The agent's process: the run stops for the approval; it is paused and handed over."""
    thread = f"openai-agents-{uuid.uuid4().hex[:8]}"
    first = await Runner.run(make_agent(files), "Deploy billing.", run_config=NO_TRACING)
    (paused,) = await pause_run(tl, first, thread_id=thread, scope_hash="tenant-a")  # turnlog
    handed = {"token": paused.token, "axes": dict(paused.axes)}  # turnlog
    (files / "pause.json").write_text(json.dumps(handed))
    print("paused for approval")


async def answer(tl: Turnlog, files: Path) -> None:
    """The person's side, in any process: approve exactly the call shown."""
    handed = json.loads((files / "pause.json").read_text())
    decision = approve("deploy", ARGS)  # turnlog: answering
    sent = await tl.answer(handed["token"], decision, **handed["axes"])  # turnlog: answering
    outcome = await tl.outcome(sent.answer_id, timeout=60)  # turnlog: answering
    print("outcome accepted:", outcome.accepted)


async def continue_step(tl: Turnlog, files: Path) -> None:
    """Any process, any number of times: a new run continued from the resumed turn, once."""
    handed = json.loads((files / "pause.json").read_text())
    agent = make_agent(files)
    second = await continue_run(tl, handed["token"], agent, run_config=NO_TRACING)  # turnlog
    print("agent:", second.final_output)


STEPS = {"start": [start], "answer": [answer], "continue": [continue_step]}


async def main(step: str) -> None:
    async with Turnlog(Settings.from_env()) as tl:  # turnlog: both
        files = tl.settings.state_dir.parent / "openai-agents-example"  # the demo's own files
        files.mkdir(parents=True, exist_ok=True)
        # One process for the whole story: it runs the worker a deployment runs apart.
        worker = asyncio.create_task(tl.run_worker()) if step == "all" else None
        for run in STEPS.get(step) or [start, answer, continue_step]:
            await run(tl, files)
    if worker is not None:
        await worker


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "all"
    if chosen not in {*STEPS, "all"}:
        sys.exit(f"usage: {sys.argv[0]} [start|answer|continue]")
    try:
        asyncio.run(asyncio.wait_for(main(chosen), 120))
    except TurnlogError as refused:  # turnlog: AlreadyContinued (another continued it), ...
        sys.exit(f"{type(refused).__name__}: {refused}")
