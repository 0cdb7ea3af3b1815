"""The OpenAI Agents SDK adapter end to end with a scripted model on the SDK's own ``Model``
interface (no network; the SDK ships no test model): a run interrupted for a tool approval is
paused durably, a separate task decides as the person, the worker resumes, and a new run --
from the resumed turn alone -- continues with the approved, edited or rejected call."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.conftest import Names
from tests.integration.test_api import api_settings
from turnlog import Paused, Turnlog, approve, edit, reject
from turnlog.adapters import rejection_message
from turnlog.adapters.openai_agents import pause_approval, resume_input

ARGS = {"service": "billing", "region": "eu"}
RAN: list[dict[str, str]] = []
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
    RAN.append({"service": service, "region": region})
    return f"deployed {service} to {region}"


def make_agent() -> Agent[Any]:
    return Agent(name="deployer", model=ScriptedModel(), tools=[deploy])


@pytest.mark.parametrize(
    ("decision", "ran", "says"),
    [
        (approve("deploy", ARGS), [ARGS], "deployed billing to eu"),
        (edit("deploy", ARGS, {**ARGS, "region": "us"}), [{**ARGS, "region": "us"}], "to us"),
        (reject("deploy", ARGS, "not on a Friday"), [], "not on a Friday"),
    ],
    ids=["approve", "edit", "reject"],
)
async def test_a_tool_approval_pauses_and_the_resumed_turn_continues_the_run(
    bootstrap: str, names: Names, tmp_path: Path, decision: Any, ran: list[Any], says: str
) -> None:
    RAN.clear()
    ids = {"thread_id": "oa-thread", "run_id": "run-oa", "session_id": "s-oa", "scope_hash": "t"}
    first = await Runner.run(make_agent(), "Deploy billing.", run_config=NO_TRACING)
    assert len(first.interruptions) == 1

    async def person(tl: Turnlog, paused: Paused) -> None:
        sent = await tl.answer(paused.token, decision, **paused.axes)
        assert (await tl.outcome(sent.answer_id, timeout=45)).accepted

    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await pause_approval(tl, first, **ids)
        answering = asyncio.create_task(person(tl, paused))
        async with tl.resumed() as turns:
            turn = await anext(aiter(turns))
        await answering
        assert not worker.done()

    assert RAN == []  # nothing ran before the person decided
    agent = make_agent()
    second = await Runner.run(agent, await resume_input(turn, agent), run_config=NO_TRACING)
    assert ran == RAN
    assert says in str(second.final_output)
    if decision["decision"] == "reject":  # what the model reads: the wording of every adapter
        assert second.final_output == f"Done: {rejection_message(decision)}"
