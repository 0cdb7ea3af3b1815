"""A Pydantic AI agent whose tool needs approval, paused durably by turnlog. Pydantic AI's
``TestModel`` stands in for the LLM: no network, no API key.

    pip install -e '.[pydantic-ai]'
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/pydantic_ai_agent.py

The run ends in a deferred tool request; it is recorded as an ``approve_tool_call`` pause, a
separate task approves it with edited arguments, the worker resumes it, and a fresh agent run
continues from the resumed turn alone (message history + ``DeferredToolResults``).
"""

from __future__ import annotations

import asyncio
import uuid

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.test import TestModel

from turnlog import Paused, Settings, Turnlog, edit, write_keypair
from turnlog.adapters.pydantic_ai import pause_deferred, resume_arguments


def make_agent() -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def deploy(service: str, region: str) -> str:
        return f"deployed {service} to {region}"

    return agent


async def person_decides(tl: Turnlog, paused: Paused, shown: dict[str, object]) -> None:
    decision = edit("deploy", shown, {"service": "billing", "region": "us"})
    sent = await tl.answer(paused.token, decision, **paused.axes)
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def main() -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    thread = f"pydantic-ai-{uuid.uuid4().hex[:8]}"
    first = await make_agent().run("Deploy billing.")
    if not isinstance(first.output, DeferredToolRequests):
        raise RuntimeError("the run did not ask for an approval")
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await pause_deferred(
            tl, first.output, first.all_messages(),
            thread_id=thread, run_id="run-1", session_id="s-1", scope_hash="t-a",
        )  # fmt: skip
        print("paused for approval; token", paused.token_id)
        shown = first.output.approvals[0].args_as_dict()
        deciding = asyncio.create_task(person_decides(tl, paused, shown))
        async with tl.resumed() as turns:
            async for turn in turns:
                if turn.thread_id == thread:
                    break
        await deciding
    await worker
    history, results = resume_arguments(turn)
    second = await make_agent().run(message_history=history, deferred_tool_results=results)
    print("agent:", second.output)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 120))
