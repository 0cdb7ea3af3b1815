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
from turnlog import Paused, PauseInvalid, Turnlog, approve, edit, reject
from turnlog.adapters import rejection_message
from turnlog.adapters.openai_agents import pause_approval, pause_approvals, resume_input

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


class TwoCallsModel(Model):
    """Asks to deploy and to notify in one response; once both have outputs, reports them."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        items = args[1] if len(args) > 1 else kwargs["input"]
        outputs = {
            i["call_id"]: i["output"]
            for i in (items if isinstance(items, list) else [])
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }
        if not outputs:
            calls = [
                ResponseFunctionToolCall(
                    arguments=json.dumps(arguments),
                    call_id=f"call-{name}",
                    name=name,
                    type="function_call",
                )
                for name, arguments in (("deploy", ARGS), ("notify", {"channel": "ops"}))
            ]
            return ModelResponse(output=list(calls), usage=Usage(), response_id=None)
        said = " | ".join(f"{k}: {v}" for k, v in sorted(outputs.items()))
        text = ResponseOutputText(text=said, type="output_text", annotations=[])
        message = ResponseOutputMessage(
            id="m2", content=[text], role="assistant", status="completed", type="message"
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool(needs_approval=True)
def notify(channel: str) -> str:
    """Tell a channel."""
    RAN.append({"channel": channel})
    return f"told {channel}"


async def test_two_tool_approvals_pause_once_and_resume_once_with_both_decisions(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Parallel tool calls: the run stops for two approvals; one pause holds both, each is
    answered by a publisher of its own, and one resumed turn continues the run with the edited
    call run once (on the person's arguments) and the rejected one answered in the shared
    wording."""
    RAN.clear()
    ids = {"thread_id": "oa-two", "run_id": "run-two", "session_id": "s-two", "scope_hash": "t"}

    def make() -> Agent[Any]:
        return Agent(name="deployer", model=TwoCallsModel(), tools=[deploy, notify])

    first = await Runner.run(make(), "Deploy and tell ops.", run_config=NO_TRACING)
    assert len(first.interruptions) == 2
    settings = api_settings(bootstrap, names, tmp_path)
    edited = edit("deploy", ARGS, {**ARGS, "region": "us"})
    no = reject("notify", {"channel": "ops"}, "not now")
    async with Turnlog(settings) as agent_side:
        with pytest.raises(PauseInvalid, match="pause_approvals"):
            await pause_approval(agent_side, first, **ids)
        deploy_call, notify_call = await pause_approvals(agent_side, first, **ids)
    assert deploy_call.pause.checkpoint.tool_call_id == "call-deploy"  # in the order of the calls

    async with Turnlog(settings) as worker_side:
        worker = asyncio.create_task(worker_side.run_worker())
        async with Turnlog(settings) as one_person:
            await one_person.answer(notify_call.token, no, **notify_call.axes)
        async with Turnlog(settings) as another_person:
            sent = await another_person.answer(deploy_call.token, edited, **deploy_call.axes)
            assert (await another_person.outcome(sent.answer_id, timeout=45)).accepted
        async with worker_side.resumed() as turns:
            turn = await anext(aiter(turns))
        assert not worker.done()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)

    assert [a["tool_call_id"] for a in turn.answers] == ["call-deploy", "call-notify"]
    assert RAN == []  # nothing ran before both were decided
    agent = make()
    second = await Runner.run(agent, await resume_input(turn, agent), run_config=NO_TRACING)
    assert [{**ARGS, "region": "us"}] == RAN  # the edited call ran once, the rejected one never
    assert second.final_output == (
        f"call-deploy: deployed billing to us | call-notify: {rejection_message(no)}"
    )
