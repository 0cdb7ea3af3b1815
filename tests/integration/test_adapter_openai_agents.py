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
from agents import Agent, RunConfig, RunContextWrapper, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import BaseModel

from tests.conftest import Names
from tests.integration.test_api import api_settings
from turnlog import AlreadyContinued, Paused, PauseInvalid, Turnlog, approve, edit, reject
from turnlog.adapters import rejection_message
from turnlog.adapters.openai_agents import (
    continue_run,
    idempotency_key,
    pause_approval,
    pause_approvals,
    pause_run,
    resume_input,
)

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
        with pytest.raises(PauseInvalid, match=r"pause_run\(\)"):
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


KEYS: list[str | None] = []
QUESTION = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
PICKED = {"answers": [{"selections": ["us"], "other": None}]}


def make_keyed_agent(crash: bool = False) -> Agent[Any]:
    """The deploy of the documented continue step: it records its idempotency key, and with
    ``crash`` dies (raises) after it ran -- after the claim, before done."""

    @function_tool(needs_approval=True, failure_error_function=None)
    def deploy(ctx: RunContextWrapper[Any], service: str, region: str) -> str:
        """Deploy a service to a region."""
        RAN.append({"service": service, "region": region})
        KEYS.append(idempotency_key(ctx))
        if crash:
            raise RuntimeError("the process died here")
        return f"deployed {service} to {region}"

    return Agent(name="deployer", model=ScriptedModel(), tools=[deploy])


async def paused_and_approved(tl: Turnlog, thread: str) -> Paused:
    first = await Runner.run(make_keyed_agent(), "Deploy billing.", run_config=NO_TRACING)
    (paused,) = await pause_run(tl, first, thread_id=thread, scope_hash="t")
    sent = await tl.answer(paused.token, approve("deploy", ARGS), **paused.axes)
    assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
    return paused


async def test_the_continue_step_twice_at_once_and_again_runs_the_approved_tool_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Issue 37: continue_run by two clients at once and by a third afterwards -- one runs the
    deploy, with its idempotency key; the others get AlreadyContinued and run nothing (before,
    resume_input ran the approved tool on every continue step)."""
    RAN.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    agent = make_keyed_agent()
    async with Turnlog(settings) as tl, Turnlog(settings) as other, Turnlog(settings) as late:
        worker = asyncio.create_task(tl.run_worker())
        paused = await paused_and_approved(tl, "oa-once")
        both = await asyncio.gather(
            continue_run(tl, paused.token, agent, run_config=NO_TRACING),
            continue_run(other, paused.token, agent, run_config=NO_TRACING),
            return_exceptions=True,
        )
        with pytest.raises(AlreadyContinued) as afterwards:
            await continue_run(late, paused.token, agent, run_config=NO_TRACING)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    won = [r for r in both if not isinstance(r, BaseException)]
    assert len(won) == 1 and won[0].final_output == "Done: deployed billing to eu"
    assert [type(r) for r in both if isinstance(r, BaseException)] == [AlreadyContinued]
    assert afterwards.value.finished and afterwards.value.claimant
    assert [ARGS] == RAN
    assert [f"{paused.token_id}:call-1"] == KEYS


async def test_a_crash_after_the_claim_is_retaken_only_explicitly_with_the_same_key(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """The process dies after its claim, before done: the next continue is refused (the claim
    is held, not finished); retake=True continues, and the tool gets the key it got before."""
    RAN.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    agent = make_keyed_agent()
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await paused_and_approved(tl, "oa-crash")
        with pytest.raises(RuntimeError, match="died here"):
            await continue_run(tl, paused.token, make_keyed_agent(crash=True))
        with pytest.raises(AlreadyContinued) as held:
            await continue_run(tl, paused.token, agent)
        assert not held.value.finished
        retaken = await continue_run(tl, paused.token, agent, retake=True, run_config=NO_TRACING)
        with pytest.raises(AlreadyContinued) as finished:
            await continue_run(tl, paused.token, agent, retake=True)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert retaken.final_output == "Done: deployed billing to eu"
    assert finished.value.finished  # a finished claim is never taken again
    assert len(RAN) == 2 and KEYS[0] == KEYS[1] == f"{paused.token_id}:call-1"


class AsksThenReads(Model):
    """Asks which region (the ``ask_user`` question tool); then says what the person picked."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        items = args[1] if len(args) > 1 else kwargs["input"]
        outputs = [
            i["output"]
            for i in (items if isinstance(items, list) else [])
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if not outputs:
            call = ResponseFunctionToolCall(
                arguments=json.dumps(QUESTION), call_id="q-1", name="ask_user",
                type="function_call",
            )  # fmt: skip
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(text=f"read: {outputs[-1]}", type="output_text", annotations=[])
        message = ResponseOutputMessage(
            id="m1", content=[text], role="assistant", status="completed", type="message"
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Question(BaseModel):
    question: str
    options: list[str]


@function_tool(needs_approval=True)
def ask_user(questions: list[Question]) -> str:
    """Ask the person which of the options."""
    raise AssertionError("a question is answered by the person, never run")


async def test_a_question_with_options_is_paused_and_continued_through_the_adapter(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """A question tool named ask_user is a question with options: pause_run pauses it,
    continue_run gives the model the person's answer (issue 37: it could not be paused)."""
    agent: Agent[Any] = Agent(name="asker", model=AsksThenReads(), tools=[ask_user])
    first = await Runner.run(agent, "Deploy billing.", run_config=NO_TRACING)
    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        (paused,) = await pause_run(tl, first, thread_id="oa-ask", scope_hash="t")
        assert paused.pause.checkpoint.name == "ask_user"
        sent = await tl.answer(paused.token, PICKED, **paused.axes)
        assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
        second = await continue_run(tl, paused.token, agent, run_config=NO_TRACING)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert str(second.final_output).startswith("read: The person")
    assert "us" in str(second.final_output)


class AsksAndDeploys(Model):
    """Asks which region and for the deploy in one response; then reports every output."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        items = args[1] if len(args) > 1 else kwargs["input"]
        outputs = [
            f"{i['call_id']}: {i['output']}"
            for i in (items if isinstance(items, list) else [])
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if not outputs:
            calls = [
                ResponseFunctionToolCall(arguments=json.dumps(ARGS), call_id="call-1",
                                         name="deploy", type="function_call"),
                ResponseFunctionToolCall(arguments=json.dumps(QUESTION), call_id="q-1",
                                         name="ask_user", type="function_call"),
            ]  # fmt: skip
            return ModelResponse(output=list(calls), usage=Usage(), response_id=None)
        text = ResponseOutputText(text=" | ".join(outputs), type="output_text", annotations=[])
        message = ResponseOutputMessage(
            id="m1", content=[text], role="assistant", status="completed", type="message"
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def test_an_approval_and_a_question_in_one_response_pause_once_and_continue_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Issue 37, item 2: one pause_run for an approval and a question the model asked together
    (the asking round in the checkpoint once -- the SDK's list already holds it), each answered
    by a client of its own, one continue_run: the deploy runs once with its key and the model
    reads the person's answer to the question."""
    RAN.clear()
    KEYS.clear()
    keyed = make_keyed_agent()
    agent: Agent[Any] = Agent(name="d", model=AsksAndDeploys(), tools=[*keyed.tools, ask_user])
    first = await Runner.run(agent, "Deploy billing.", run_config=NO_TRACING)
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        deploy_call, question = await pause_run(tl, first, thread_id="oa-mixed", scope_hash="t")
        asked = [m for m in deploy_call.pause.checkpoint.messages if m.get("tool_calls")]
        assert [[c["id"] for c in m["tool_calls"]] for m in asked] == [["call-1", "q-1"]]
        async with Turnlog(settings) as one, Turnlog(settings) as another:
            await one.answer(question.token, PICKED, **question.axes)
            sent = await another.answer(
                deploy_call.token, approve("deploy", ARGS), **deploy_call.axes
            )
            assert (await another.outcome(sent.answer_id, timeout=45)).accepted
        second = await continue_run(tl, question.token, agent, run_config=NO_TRACING)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert [ARGS] == RAN
    assert [f"{deploy_call.token_id}:call-1"] == KEYS
    said = str(second.final_output)
    assert "call-1: deployed billing to eu" in said
    assert "q-1: The person" in said and "us" in said
