"""A Pydantic AI agent whose tool needs approval, paused durably by turnlog and continued, once,
in another process. Pydantic AI's ``TestModel`` stands in for the LLM: no network, no API key.

    pip install -e '.[pydantic-ai]'
    turnlog keys new --kid example
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/pydantic_ai_agent.py

runs the three steps one after the other, with a resume worker, in one process; each step is
also a process of its own, as in a deployment (a worker, ``turnlog worker``, runs meanwhile):

    python examples/pydantic_ai_agent.py start      # the run defers the call; it is paused
    python examples/pydantic_ai_agent.py answer     # the person approves it, edited
    python examples/pydantic_ai_agent.py continue   # a fresh run goes on from the resumed turn

The run ends in a deferred tool request; ``pause_run`` records it as an ``approve_tool_call``
pause and the process may exit. The person approves the call with edited arguments; the worker
resumes it; and ``continue_run`` claims the resumed turn and continues a fresh run from it alone
-- Pydantic AI keeps no state between the runs. Run ``continue`` twice, or in two processes at
once: the deploy runs once, and every other ``continue`` ends with ``AlreadyContinued`` naming
who continued it. The deploy is handed its idempotency key (``ctx.tool_call_metadata``) and
writes a line per run to ``deployments.log``. ``pause.json`` is what is handed from one step
to the next (the token and axes, and the call shown to the person); both files are kept beside
turnlog's state directory, in ``pydantic-ai-example/``. Lines marked ``# turnlog`` are what
turnlog adds to the agent, ``# turnlog: answering`` to the person's side, ``# turnlog: both``
to both.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.models.test import TestModel

from turnlog import Settings, Turnlog, TurnlogError, edit  # turnlog: both
from turnlog.adapters.pydantic_ai import continue_run, pause_run  # turnlog


def make_agent(files: Path) -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool(requires_approval=True)
    def deploy(ctx: RunContext[None], service: str, region: str) -> str:
        # Continued by turnlog, the call has an idempotency key: a deploy API taking it would
        # deploy once even if the process died and its claim was retaken.
        key = (ctx.tool_call_metadata or {}).get("idempotency_key")  # turnlog
        with (files / "deployments.log").open("a") as deployments:
            deployments.write(f"{service} {region} {key}\n")
        return f"deployed {service} to {region}"

    return agent


async def start(tl: Turnlog, files: Path) -> None:
    """The agent's process: the run defers the call for approval; it is paused, handed over."""
    thread = f"pydantic-ai-{uuid.uuid4().hex[:8]}"
    first = await make_agent(files).run("Deploy billing.")
    if not isinstance(first.output, DeferredToolRequests):
        raise RuntimeError("the run did not ask for an approval")
    (paused,) = await pause_run(tl, first, thread_id=thread, scope_hash="tenant-a")  # turnlog
    shown = first.output.approvals[0].args_as_dict()  # what the person is shown
    handed = {"token": paused.token, "axes": dict(paused.axes), "shown": shown}  # turnlog
    (files / "pause.json").write_text(json.dumps(handed))
    print("paused for approval")


async def answer(tl: Turnlog, files: Path) -> None:
    """The person's side, in any process: approve the call shown, with another region."""
    handed = json.loads((files / "pause.json").read_text())
    edited = {"service": "billing", "region": "us"}
    decision = edit("deploy", handed["shown"], edited)  # turnlog: answering
    sent = await tl.answer(handed["token"], decision, **handed["axes"])  # turnlog: answering
    outcome = await tl.outcome(sent.answer_id, timeout=60)  # turnlog: answering
    print("outcome accepted:", outcome.accepted)


async def continue_step(tl: Turnlog, files: Path) -> None:
    """Any process, any number of times: a fresh run continued from the resumed turn, once."""
    handed = json.loads((files / "pause.json").read_text())
    second = await continue_run(tl, handed["token"], make_agent(files))  # turnlog
    print("agent:", second.output)


STEPS = {"start": [start], "answer": [answer], "continue": [continue_step]}


async def main(step: str) -> None:
    async with Turnlog(Settings.from_env()) as tl:  # turnlog: both
        files = tl.settings.state_dir.parent / "pydantic-ai-example"  # where this demo keeps files
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
