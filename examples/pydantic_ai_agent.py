"""A Pydantic AI agent whose tool needs approval, paused durably by turnlog and continued in
another process. Pydantic AI's ``TestModel`` stands in for the LLM: no network, no API key.

    pip install -e '.[pydantic-ai]'
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/pydantic_ai_agent.py

runs the three steps one after the other, with a resume worker, in one process; each step is
also a process of its own, as in a deployment (a worker, ``turnlog worker``, runs meanwhile):

    python examples/pydantic_ai_agent.py start      # the run defers the call; it is paused
    python examples/pydantic_ai_agent.py answer     # the person approves it, edited
    python examples/pydantic_ai_agent.py continue   # a fresh run goes on from the resumed turn

The run ends in a deferred tool request; it is recorded as an ``approve_tool_call`` pause and
the process may exit. The person approves the call with edited arguments; the worker resumes
it; and a fresh agent run continues from the resumed turn alone (``resume_arguments``: the
message history and ``DeferredToolResults``) -- Pydantic AI keeps no state between the runs.
``pause.json``, beside turnlog's state directory in ``pydantic-ai-example/``, is what is handed
from one step to the next: the thread, and the token and call shown to the person.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.test import TestModel

from turnlog import Settings, Turnlog, TurnResumed, edit, write_keypair
from turnlog.adapters.pydantic_ai import pause_deferred, resume_arguments


def make_agent() -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def deploy(service: str, region: str) -> str:
        return f"deployed {service} to {region}"

    return agent


async def start(tl: Turnlog, files: Path) -> None:
    """The agent's process: the run defers the call for approval; it is paused, handed over."""
    thread = f"pydantic-ai-{uuid.uuid4().hex[:8]}"
    first = await make_agent().run("Deploy billing.")
    if not isinstance(first.output, DeferredToolRequests):
        raise RuntimeError("the run did not ask for an approval")
    paused = await pause_deferred(
        tl, first.output, first.all_messages(),
        thread_id=thread, run_id="run-1", session_id="s-1", scope_hash="t-a",
    )  # fmt: skip
    handed = {
        "thread": thread,
        "token": paused.token,
        "token_id": paused.token_id,
        "axes": dict(paused.axes),
        "shown": first.output.approvals[0].args_as_dict(),
    }
    (files / "pause.json").write_text(json.dumps(handed))
    print("paused for approval; token", paused.token_id)


async def answer(tl: Turnlog, files: Path) -> None:
    """The person's side, in any process: approve the call shown, with another region."""
    handed = json.loads((files / "pause.json").read_text())
    decision = edit("deploy", handed["shown"], {"service": "billing", "region": "us"})
    sent = await tl.answer(handed["token"], decision, **handed["axes"])
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def continue_run(tl: Turnlog, files: Path) -> None:
    """Any process: the pause's resumed turn, and a fresh run continued from it alone."""
    handed = json.loads((files / "pause.json").read_text())
    async with tl.resumed() as turns:
        async for turn in turns:
            if not isinstance(turn, TurnResumed) or turn.token_id != handed["token_id"]:
                continue  # another pause's turn: an agent service continues each one
            history, results = resume_arguments(turn)
            second = await make_agent().run(message_history=history, deferred_tool_results=results)
            await turns.commit()  # leaving the loop: this turn is handled
            print("agent:", second.output)
            return


STEPS = {"start": [start], "answer": [answer], "continue": [continue_run]}


async def main(step: str) -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    files = settings.state_dir.parent / "pydantic-ai-example"
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
