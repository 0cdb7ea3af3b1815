"""The Pydantic AI adapter end to end, with Pydantic AI's own ``TestModel`` (no network): a run
defers a tool that requires approval, the deferral is paused durably, a separate task decides as
the person, the worker resumes, and the run continues -- in a fresh agent, from the resumed turn
alone -- with the approved, edited or rejected call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from pydantic_ai.models.test import TestModel

from tests.conftest import Names
from tests.integration.test_api import api_settings
from turnlog import Paused, PauseInvalid, Turnlog, approve, edit, reject
from turnlog.adapters import rejection_message
from turnlog.adapters.pydantic_ai import pause_deferred, pause_deferred_calls, resume_arguments

RAN: list[dict[str, str]] = []


def make_agent() -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def deploy(service: str, region: str) -> str:
        RAN.append({"service": service, "region": region})
        return f"deployed {service} to {region}"

    return agent


@pytest.mark.parametrize(
    ("decide", "ran", "says"),
    [
        (lambda args: approve("deploy", args), [{"service": "a", "region": "a"}], "to a"),
        (
            lambda args: edit("deploy", args, {"service": "billing", "region": "us"}),
            [{"service": "billing", "region": "us"}],
            "deployed billing to us",
        ),
        (lambda args: reject("deploy", args, "not on a Friday"), [], "not on a Friday"),
    ],
    ids=["approve", "edit", "reject"],
)
async def test_a_deferred_approval_pauses_and_the_resumed_turn_continues_the_run(
    bootstrap: str, names: Names, tmp_path: Path, decide: Any, ran: list[Any], says: str
) -> None:
    RAN.clear()
    ids = {"thread_id": "pa-thread", "run_id": "run-pa", "session_id": "s-pa", "scope_hash": "t"}
    first = await make_agent().run("Deploy billing.")
    assert isinstance(first.output, DeferredToolRequests)
    arguments = first.output.approvals[0].args_as_dict()

    async def person(tl: Turnlog, paused: Paused) -> None:
        sent = await tl.answer(paused.token, decide(arguments), **paused.axes)
        assert (await tl.outcome(sent.answer_id, timeout=45)).accepted

    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await pause_deferred(tl, first.output, first.all_messages(), **ids)
        answering = asyncio.create_task(person(tl, paused))
        async with tl.resumed() as turns:
            turn = await anext(aiter(turns))
        await answering
        assert not worker.done()

    history, results = resume_arguments(turn)
    assert RAN == []  # nothing ran before the person decided
    second = await make_agent().run(message_history=history, deferred_tool_results=results)
    assert ran == RAN
    assert isinstance(second.output, str) and says in second.output
    returned = [
        part.content
        for message in second.all_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "deploy"
    ]
    decision = decide(arguments)
    if decision["decision"] == "reject":  # what the model reads: the wording of every adapter
        assert returned == [rejection_message(decision)]
        assert turn.history[-1]["content"] == rejection_message(decision)


def make_two_tool_agent() -> Agent[None, str | DeferredToolRequests]:
    agent = make_agent()

    @agent.tool_plain(requires_approval=True)
    def notify(channel: str) -> str:
        RAN.append({"channel": channel})
        return f"told {channel}"

    return agent


async def test_two_deferred_approvals_pause_once_and_resume_once_with_both_decisions(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Parallel tool calls: the run defers two approvals; one pause holds both, each is
    answered by a publisher of its own (the first held, the second resuming), and the run
    continues from the one resumed turn with the approved call run once and the rejected one
    denied in the shared wording."""
    RAN.clear()
    ids = {"thread_id": "pa-two", "run_id": "run-two", "session_id": "s-two", "scope_hash": "t"}
    first = await make_two_tool_agent().run("Deploy billing and tell everyone.")
    assert isinstance(first.output, DeferredToolRequests)
    assert [c.tool_name for c in first.output.approvals] == ["deploy", "notify"]
    deploy_args, notify_args = (c.args_as_dict() for c in first.output.approvals)
    settings = api_settings(bootstrap, names, tmp_path)
    no = reject("notify", notify_args, "not now")

    async with Turnlog(settings) as agent_side:
        with pytest.raises(PauseInvalid, match="pause_deferred_calls"):
            await pause_deferred(agent_side, first.output, first.all_messages(), **ids)
        deploy_call, notify_call = await pause_deferred_calls(
            agent_side, first.output, first.all_messages(), **ids
        )
    assert deploy_call.thread_id == notify_call.thread_id
    assert deploy_call.token_id != notify_call.token_id

    async with Turnlog(settings) as worker_side:
        worker = asyncio.create_task(worker_side.run_worker())
        async with Turnlog(settings) as one_person:
            sent = await one_person.answer(
                deploy_call.token, approve("deploy", deploy_args), **deploy_call.axes
            )
        async with Turnlog(settings) as another_person:
            late = await another_person.answer(notify_call.token, no, **notify_call.axes)
            assert (await another_person.outcome(late.answer_id, timeout=45)).accepted
        async with worker_side.resumed() as turns:
            turn = await anext(aiter(turns))
        assert not worker.done()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)

    assert [a["answer_id"] for a in turn.answers] == [sent.answer_id, late.answer_id]
    history, results = resume_arguments(turn)
    assert RAN == []  # nothing ran before both were decided
    second = await make_two_tool_agent().run(message_history=history, deferred_tool_results=results)
    assert [deploy_args] == RAN  # the approved call ran once; the rejected one not at all
    returned = {
        part.tool_name: part.content
        for message in second.all_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    assert returned["notify"] == rejection_message(no)
    assert str(returned["deploy"]).startswith("deployed")
