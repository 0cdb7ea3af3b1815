"""The Pydantic AI adapter end to end, with Pydantic AI's own ``TestModel`` (no network): a run
defers a tool that requires approval, the deferral is paused durably, a separate task decides as
the person, the worker resumes, and the run continues -- in a fresh agent, from the resumed turn
alone -- with the approved, edited or rejected call."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, CallDeferred, DeferredToolRequests, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from tests.conftest import Names
from tests.integration.test_api import api_settings
from turnlog import AlreadyContinued, Paused, PauseInvalid, Turnlog, approve, edit, reject
from turnlog.adapters import rejection_message
from turnlog.adapters.pydantic_ai import (
    continue_run,
    pause_deferred,
    pause_deferred_calls,
    pause_run,
    resume_arguments,
)

ROOT = Path(__file__).resolve().parents[2]
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
        with pytest.raises(PauseInvalid, match=r"pause_run\(\)"):
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


KEYS: list[Any] = []
QUESTION = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
PICKED = {"answers": [{"selections": ["us"], "other": None}]}


def make_keyed_agent(crash: bool = False) -> Agent[None, str | DeferredToolRequests]:
    """The deploy of the documented continue step: it records its idempotency key, and with
    ``crash`` dies (raises) after it ran -- after the claim, before done."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool(requires_approval=True)
    def deploy(ctx: RunContext[None], service: str, region: str) -> str:
        RAN.append({"service": service, "region": region})
        KEYS.append((ctx.tool_call_metadata or {}).get("idempotency_key"))
        if crash:
            raise RuntimeError("the process died here")
        return f"deployed {service} to {region}"

    return agent


async def paused_and_approved(
    tl: Turnlog, thread: str
) -> tuple[Paused, Agent[None, str | DeferredToolRequests]]:
    first = await make_keyed_agent().run("Deploy billing.")
    assert isinstance(first.output, DeferredToolRequests)
    arguments = first.output.approvals[0].args_as_dict()
    (paused,) = await pause_run(tl, first, thread_id=thread, scope_hash="t")
    sent = await tl.answer(paused.token, approve("deploy", arguments), **paused.axes)
    assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
    return paused, make_keyed_agent()


async def test_the_continue_step_twice_at_once_and_again_runs_the_approved_tool_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Issue 37: continue_run by two clients at once and by a third afterwards -- one runs the
    deploy, with its idempotency key; the others get AlreadyContinued and run nothing (before,
    each continue step ran the deploy)."""
    RAN.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl, Turnlog(settings) as other, Turnlog(settings) as late:
        worker = asyncio.create_task(tl.run_worker())
        paused, agent = await paused_and_approved(tl, "pa-once")
        both = await asyncio.gather(
            continue_run(tl, paused.token, agent),
            continue_run(other, paused.token, agent),
            return_exceptions=True,
        )
        with pytest.raises(AlreadyContinued) as afterwards:
            await continue_run(late, paused.token, agent)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    won = [r for r in both if not isinstance(r, BaseException)]
    assert len(won) == 1 and "deployed" in str(won[0].output)
    assert [type(r) for r in both if isinstance(r, BaseException)] == [AlreadyContinued]
    assert afterwards.value.finished and afterwards.value.claimant
    assert len(RAN) == 1
    assert [f"{paused.token_id}:{paused.pause.checkpoint.tool_call_id}"] == KEYS


async def test_a_crash_after_the_claim_is_retaken_only_explicitly_with_the_same_key(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """The process dies after its claim, before done: the next continue is refused (the claim
    is held, not finished); retake=True continues, and the tool gets the key it got before."""
    RAN.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused, agent = await paused_and_approved(tl, "pa-crash")
        with pytest.raises(RuntimeError, match="died here"):
            await continue_run(tl, paused.token, make_keyed_agent(crash=True))
        with pytest.raises(AlreadyContinued) as held:
            await continue_run(tl, paused.token, agent)
        assert not held.value.finished
        retaken = await continue_run(tl, paused.token, agent, retake=True)
        with pytest.raises(AlreadyContinued) as finished:
            await continue_run(tl, paused.token, agent, retake=True)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert "deployed" in str(retaken.output)
    assert finished.value.finished  # a finished claim is never taken again
    assert len(RAN) == 2 and KEYS[0] == KEYS[1] is not None  # the same key: the API dedupes


def asks_then_reads(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks which region (an ``ask_user`` external call); then says what the person picked."""
    answered = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if answered:
        return ModelResponse(parts=[TextPart(f"read: {answered[-1]}")])
    return ModelResponse(parts=[ToolCallPart("ask_user", QUESTION, tool_call_id="q-1")])


async def test_a_question_with_options_is_paused_and_continued_through_the_adapter(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """An external call named ask_user is a question with options: pause_run pauses it,
    continue_run gives the model the person's answer (issue 37: it could not be paused)."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(asks_then_reads), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain
    def ask_user(questions: list[dict[str, Any]]) -> str:
        raise CallDeferred

    first = await agent.run("Deploy billing.")
    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        (paused,) = await pause_run(tl, first, thread_id="pa-ask", scope_hash="t")
        assert paused.pause.checkpoint.name == "ask_user"
        sent = await tl.answer(paused.token, PICKED, **paused.axes)
        assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
        second = await continue_run(tl, paused.token, agent)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert isinstance(second.output, str) and second.output.startswith("read: The person")
    assert "us" in second.output


def asks_and_deploys(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks which region and for the deploy in one response; then reports every result."""
    returned = [
        f"{part.tool_name}: {part.content}"
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if returned:
        return ModelResponse(parts=[TextPart(" | ".join(returned))])
    return ModelResponse(
        parts=[
            ToolCallPart("deploy", {"service": "billing", "region": "eu"}, tool_call_id="d-1"),
            ToolCallPart("ask_user", QUESTION, tool_call_id="q-1"),
        ]
    )


async def test_an_approval_and_a_question_in_one_response_pause_once_and_continue_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Issue 37, item 2: one pause_run for an approval and an external ask_user call the model
    made together (the asking round in the checkpoint once -- all_messages() already holds
    it), each answered by a client of its own, one continue_run: the deploy runs once with its
    key and the model reads the person's answer to the question."""
    RAN.clear()
    KEYS.clear()
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(asks_and_deploys), output_type=[str, DeferredToolRequests]
    )

    @agent.tool(requires_approval=True)
    def deploy(ctx: RunContext[None], service: str, region: str) -> str:
        RAN.append({"service": service, "region": region})
        KEYS.append((ctx.tool_call_metadata or {}).get("idempotency_key"))
        return f"deployed {service} to {region}"

    @agent.tool_plain
    def ask_user(questions: list[dict[str, Any]]) -> str:
        raise CallDeferred

    first = await agent.run("Deploy billing.")
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        deploy_call, question = await pause_run(tl, first, thread_id="pa-mixed", scope_hash="t")
        asked = [m for m in deploy_call.pause.checkpoint.messages if m.get("tool_calls")]
        assert [[c["id"] for c in m["tool_calls"]] for m in asked] == [["d-1", "q-1"]]
        async with Turnlog(settings) as one, Turnlog(settings) as another:
            await one.answer(question.token, PICKED, **question.axes)
            arguments = {"service": "billing", "region": "eu"}
            sent = await another.answer(
                deploy_call.token, approve("deploy", arguments), **deploy_call.axes
            )
            assert (await another.outcome(sent.answer_id, timeout=45)).accepted
        second = await continue_run(tl, question.token, agent)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert RAN == [{"service": "billing", "region": "eu"}]
    assert [f"{deploy_call.token_id}:d-1"] == KEYS
    said = str(second.output)
    assert "deploy: deployed billing to eu" in said
    assert "ask_user: The person" in said and "us" in said


async def test_a_continue_step_sigkilled_after_its_claim_is_retaken_explicitly_with_its_key(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """A real crash: a process claims the turn, runs the deploy and is SIGKILLed before done.
    The next continue_run is refused, naming the dead process, its claim not finished; only
    retake=True continues, and the deploy gets the key the dead process's deploy got."""
    RAN.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    ran = tmp_path / "deploy-keys"
    env = {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": bootstrap,
        "TURNLOG_TOPIC_PREFIX": names.prefix,
        "TURNLOG_APPLICATION_ID": names.app,
        "TURNLOG_STATE_DIR": str(tmp_path / "child-state"),
        "TURNLOG_KEYS_DIR": str(tmp_path / "keys"),
        "TURNLOG_PARTITIONS": "2",
    }
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused, agent = await paused_and_approved(tl, "pa-sigkill")
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.integration.crashing_continue", paused.token, str(ran),
            env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not (ran.exists() and ran.read_text().endswith("\n")):
                assert child.returncode is None, "the continue step ended before its deploy"
                assert time.monotonic() < deadline, "no deploy within 60 s"
                await asyncio.sleep(0.05)
        finally:
            if child.returncode is None:
                child.kill()
            await child.wait()
        with pytest.raises(AlreadyContinued) as held:
            await continue_run(tl, paused.token, agent)
        assert not held.value.finished
        assert held.value.claimant.endswith(f":{child.pid}")
        retaken = await continue_run(tl, paused.token, agent, retake=True)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert "deployed" in str(retaken.output)
    (dead_key,) = ran.read_text().splitlines()
    assert [dead_key] == KEYS  # the retake's deploy got the same key: the API dedupes it
