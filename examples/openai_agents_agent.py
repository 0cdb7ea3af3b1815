"""An OpenAI Agents SDK agent whose tool needs approval, paused durably by turnlog. A scripted
model on the SDK's ``Model`` interface stands in for the LLM: no network, no API key.

    pip install -e '.[openai-agents]'
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/openai_agents_agent.py

The run stops for the approval of ``deploy``; it is recorded as an ``approve_tool_call`` pause,
a separate task approves it, the worker resumes it, and a new run continues from the resumed
turn alone -- the approved call run through the agent's own tool.
"""

from __future__ import annotations

import asyncio
import json
import uuid
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

from turnlog import Paused, Settings, Turnlog, approve, write_keypair
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


async def person_approves(tl: Turnlog, paused: Paused) -> None:
    sent = await tl.answer(paused.token, approve("deploy", ARGS), **paused.axes)
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def main() -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    thread = f"openai-agents-{uuid.uuid4().hex[:8]}"
    agent = Agent(name="deployer", model=ScriptedModel(), tools=[deploy])
    first = await Runner.run(agent, "Deploy billing.", run_config=NO_TRACING)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await pause_approval(
            tl, first, thread_id=thread, run_id="run-1", session_id="s-1", scope_hash="t-a"
        )
        print("paused for approval; token", paused.token_id)
        approving = asyncio.create_task(person_approves(tl, paused))
        async with tl.resumed() as turns:
            async for turn in turns:
                if turn.thread_id == thread:
                    break
        await approving
    await worker
    second = await Runner.run(agent, await resume_input(turn, agent), run_config=NO_TRACING)
    print("agent:", second.final_output)


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 120))
