"""The adapters' parts that need no broker: LangGraph's resume keyed by interrupt id (and why: a
turn delivered again must not answer the graph's next question), the approval a LangGraph node
runs, the one rejection wording the three adapters give the model, the one-call pause refusing
several approvals with the call that pauses them, before anything is written, and a turn of
several calls mapped onto each framework's own resume."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import pytest
from agents import Agent, RunConfig, RunContextWrapper, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from openai.types.responses import ResponseFunctionToolCall
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import CallDeferred, DeferredToolRequests, RunContext, ToolApproved, ToolDenied
from pydantic_ai.models.test import TestModel

from tests.transcripts import console_blocks
from turnlog import (
    APPROVE_TOOL_CALL,
    PauseInvalid,
    approval_request,
    approve,
    approved_call,
    edit,
    reject,
)
from turnlog.adapters import langgraph, openai_agents, pydantic_ai, rejection_message
from turnlog.contracts.approvals import render_approval
from turnlog.contracts.events import TurnResumed

ARGS = {"service": "billing", "region": "eu"}
LG_ID = "0123456789abcdef0123456789abcdef"


def turn_of(response: Any, *, interrupt_id: str = LG_ID, name: str = "ask_user") -> TurnResumed:
    call = {"id": "call-1", "name": "deploy", "arguments": json.dumps(ARGS)}
    history: list[dict[str, Any]] = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    if name == APPROVE_TOOL_CALL and response["decision"] == "reject":
        history.append(
            {"role": "tool", "content": render_approval(response), "tool_call_id": "call-1"}
        )
    return TurnResumed(
        event_id="e1",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        package_version="0",
        token_id="tok-1",
        answer_id="a-1",
        run_id="run-1",
        session_id="s-1",
        thread_id="t-1",
        checkpoint_id="cp-1",
        interrupt_id=interrupt_id,
        tool_call_id="call-1",
        name=name,
        prompt="",
        response_json=json.dumps(response),
        history=tuple(history),
    )


# -- LangGraph: the resume keyed by interrupt id -------------------------------------------------


def test_resume_command_is_keyed_by_the_turns_interrupt_id() -> None:
    command = langgraph.resume_command(turn_of({"answers": []}))
    assert command.resume == {LG_ID: {"answers": []}}


def test_a_turn_with_no_langgraph_interrupt_id_is_refused_not_sent_as_a_plain_value() -> None:
    with pytest.raises(ValueError, match="not a LangGraph interrupt's"):
        langgraph.resume_command(turn_of({"answers": []}, interrupt_id="call-1"))


class Steps(TypedDict, total=False):
    one: str
    two: str


def two_questions() -> Any:
    def one(state: Steps) -> Steps:
        return {"one": interrupt("first?")}

    def two(state: Steps) -> Steps:
        return {"two": interrupt("second?")}

    graph = StateGraph(Steps)
    graph.add_node("one", one)
    graph.add_node("two", two)
    graph.add_edge(START, "one")
    graph.add_edge("one", "two")
    graph.add_edge("two", END)
    return graph.compile(checkpointer=InMemorySaver())


def test_a_turn_delivered_again_answers_nothing_where_a_bare_value_answers_the_next_question() -> (
    None
):
    """Why the resume is always keyed: after the first answer, the graph waits on its second
    question; the first turn again -- a loop that stopped before its commit gets it twice --
    must not become the answer to that one. Keyed, LangGraph ignores it; bare, it does not."""
    graph = two_questions()
    config = {"configurable": {"thread_id": "again"}}
    (first,) = langgraph.interrupts_of(graph.invoke({}, config))
    turn = turn_of("eu", interrupt_id=first.id)
    (second,) = langgraph.interrupts_of(graph.invoke(langgraph.resume_command(turn), config))

    again = graph.invoke(langgraph.resume_command(turn), config)
    assert (again.get("two"), langgraph.interrupts_of(again)) == (None, [second])

    bare = graph.invoke(Command(resume=langgraph.resume_value(turn)), config)
    assert bare["two"] == "eu"  # the old answer, to a question the person never saw


def test_interrupts_of_leaves_out_the_ones_pending_before() -> None:
    graph = two_questions()
    config = {"configurable": {"thread_id": "besides"}}
    result = graph.invoke({}, config)
    (pending,) = langgraph.interrupts_of(result)
    assert langgraph.interrupts_of(result, besides=[pending]) == []
    assert langgraph.interrupts_of(result, besides=[pending.id]) == []
    assert langgraph.interrupts_of({"one": "x"}) == []


# -- LangGraph: the call an approval lets a node run ---------------------------------------------


def test_approved_call_gives_the_call_to_run_in_the_shape_of_turnlogs_approved_call() -> None:
    """One shape: the node's call is what ``turnlog.approved_call(turn)`` gives for the same
    resumed turn -- id, name, arguments -- the id being the paused call's."""
    request = approval_request("deploy", ARGS)
    edited = {**ARGS, "region": "us"}
    approved = turn_of(approve("deploy", ARGS), name=APPROVE_TOOL_CALL)
    decision = langgraph.resume_command(approved).resume[LG_ID]
    assert langgraph.approved_call(decision, request) == approved_call(approved)
    assert approved_call(approved) == {"id": "call-1", "name": "deploy", "arguments": ARGS}
    changed = langgraph.resume_command(
        turn_of(edit("deploy", ARGS, edited), name=APPROVE_TOOL_CALL)
    ).resume[LG_ID]
    assert langgraph.approved_call(changed, request) == {
        "id": "call-1",
        "name": "deploy",
        "arguments": edited,
    }
    assert langgraph.approved_call(reject("deploy", ARGS, "no"), request) is None


@pytest.mark.parametrize(
    "asked",
    [approval_request("deploy", {**ARGS, "region": "us"}), approval_request("destroy", ARGS)],
    ids=["other-arguments", "other-tool"],
)
def test_approved_call_refuses_a_decision_on_another_call(asked: dict[str, Any]) -> None:
    """A node that asks about another call on re-run must not run it on the first "yes"."""
    with pytest.raises(ValueError, match="must not run on that approval"):
        langgraph.approved_call(approve("deploy", ARGS), asked)


# -- one rejection wording ------------------------------------------------------------------------


def test_the_rejection_wording_is_the_workers_tool_message_and_says_nothing_ran() -> None:
    decision = reject("deploy", ARGS, "not on a Friday")
    text = rejection_message(decision)
    assert text == render_approval(decision)
    assert text == 'The person rejected this call; it was not run. Their message: "not on a Friday"'
    with pytest.raises(ValueError, match="no rejection"):
        rejection_message(approve("deploy", ARGS))


def test_pydantic_ai_denies_a_rejected_call_with_the_shared_wording() -> None:
    decision = reject("deploy", ARGS, "not on a Friday")
    _, results = pydantic_ai.resume_arguments(turn_of(decision, name=APPROVE_TOOL_CALL))
    assert results.approvals == {"call-1": ToolDenied(rejection_message(decision))}


async def test_openai_agents_answers_a_rejected_call_with_the_shared_wording() -> None:
    decision = reject("deploy", ARGS, "not on a Friday")
    agent: Agent[Any] = Agent(name="deployer", tools=[])
    items = await openai_agents.resume_input(turn_of(decision, name=APPROVE_TOOL_CALL), agent)
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert outputs == [
        {"type": "function_call_output", "call_id": "call-1", "output": rejection_message(decision)}
    ]


# -- several approvals through the one-call pause: refused, naming the call that pauses them ----


class Untouched:
    """A Turnlog stand-in that fails the test if the adapter uses it: the refusal comes first."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the adapter used tl.{name} before refusing")


async def test_pydantic_ai_refuses_two_deferred_approvals_with_what_to_do() -> None:
    agent: PydanticAgent[None, str | DeferredToolRequests] = PydanticAgent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def deploy(service: str) -> str:
        return service

    @agent.tool_plain(requires_approval=True)
    def notify(channel: str) -> str:
        return channel

    result = await agent.run("Deploy and tell everyone.")
    assert isinstance(result.output, DeferredToolRequests)
    assert len(result.output.approvals) == 2  # TestModel calls every tool in one response
    with pytest.raises(PauseInvalid) as refused:
        await pydantic_ai.pause_deferred(
            Untouched(),  # type: ignore[arg-type]
            result.output,
            result.all_messages(),
            thread_id="t", run_id="r", session_id="s", scope_hash="h",
        )  # fmt: skip
    assert refused.value.field == "requests"
    assert "deferred 2 calls (deploy, notify); nothing was paused" in str(refused.value)
    assert "pause_run()" in str(refused.value)


class TwoCalls(Model):
    """Asks for two approval-needing calls in one response."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        calls = [
            ResponseFunctionToolCall(
                arguments=json.dumps({"service": "billing"}),
                call_id=f"call-{name}",
                name=name,
                type="function_call",
            )
            for name in ("deploy", "notify")
        ]
        return ModelResponse(output=list(calls), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool(needs_approval=True)
def deploy(service: str) -> str:
    """Deploy a service."""
    return service


@function_tool(needs_approval=True)
def notify(service: str) -> str:
    """Tell everyone."""
    return service


async def test_openai_agents_refuses_two_interruptions_with_what_to_do() -> None:
    agent: Agent[Any] = Agent(name="deployer", model=TwoCalls(), tools=[deploy, notify])
    result = await Runner.run(agent, "Deploy.", run_config=RunConfig(tracing_disabled=True))
    assert len(result.interruptions) == 2
    with pytest.raises(PauseInvalid) as refused:
        await openai_agents.pause_approval(
            Untouched(),  # type: ignore[arg-type]
            result,
            thread_id="t", run_id="r", session_id="s", scope_hash="h",
        )  # fmt: skip
    assert refused.value.field == "result.interruptions"
    assert "stopped for 2 approvals (deploy, notify); nothing was paused" in str(refused.value)
    assert "pause_run()" in str(refused.value)


# -- the pages: each runs its example as three processes ------------------------------------------


@pytest.mark.parametrize(
    ("page", "example"),
    [
        ("langgraph.md", "langgraph_agent.py"),
        ("pydantic-ai.md", "pydantic_ai_agent.py"),
        ("openai-agents.md", "openai_agents_agent.py"),
    ],
)
def test_each_adapter_page_shows_start_answer_and_continue_as_processes_of_their_own(
    page: str, example: str
) -> None:
    """The steps a reader runs, with what each prints: so the docs suite, which runs every
    page's transcripts (tests/integration/test_docs_tutorials.py), runs these three processes."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "adapters" / page).read_text()
    shown = {s.bare: s.expected for block in console_blocks(text) for s in block}
    for step in ("start", "answer", "continue"):
        assert shown.get(f"python examples/{example} {step}"), f"{page} runs no {step} step"
    assert "turnlog worker 2>worker.log &" in shown


def test_a_node_asking_twice_is_two_pauses_each_resumed_by_its_own_id() -> None:
    """One node, two ``interrupt()`` calls: each has its own id, so each is its own pause and
    turn; the node re-runs from its top on each resume, the first call answered at once."""
    ran: list[str] = []

    def both(state: Steps) -> Steps:
        ran.append("top")
        one = interrupt("first?")
        return {"one": one, "two": interrupt("second?")}

    builder = StateGraph(Steps)
    builder.add_node("both", both)
    builder.add_edge(START, "both")
    builder.add_edge("both", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "twice"}}
    (first,) = langgraph.interrupts_of(graph.invoke({}, config))
    turn = turn_of("eu", interrupt_id=first.id)
    (second,) = langgraph.interrupts_of(graph.invoke(langgraph.resume_command(turn), config))
    assert second.id != first.id and second.value == "second?"
    done = graph.invoke(langgraph.resume_command(turn_of("us", interrupt_id=second.id)), config)
    assert (done["one"], done["two"], ran) == ("eu", "us", ["top", "top", "top"])


# -- a turn of several calls, onto each framework's resume ----------------------------------------

LG_OTHER = "fedcba9876543210fedcba9876543210"
NOTIFY = {"channel": "ops"}


def group_turn(first: dict[str, Any], second: dict[str, Any]) -> TurnResumed:
    """A resumed turn of two approvals (call-1 deploy, call-2 notify), as the worker writes it:
    the asking round, a rejected call's tool message, and every call's answer in call order."""
    calls = [
        {"id": "call-1", "name": "deploy", "arguments": json.dumps(ARGS)},
        {"id": "call-2", "name": "notify", "arguments": json.dumps(NOTIFY)},
    ]
    history: list[dict[str, Any]] = [{"role": "assistant", "content": "", "tool_calls": calls}]
    answers = []
    for call_id, interrupt_id, response in (
        ("call-1", LG_ID, first),
        ("call-2", LG_OTHER, second),
    ):
        if response["decision"] == "reject":
            history.append(
                {"role": "tool", "content": render_approval(response), "tool_call_id": call_id}
            )
        answers.append(
            {
                "tool_call_id": call_id,
                "interrupt_id": interrupt_id,
                "token_id": f"tok-{call_id}",
                "answer_id": f"a-{call_id}",
                "name": APPROVE_TOOL_CALL,
                "response_json": json.dumps(response),
            }
        )
    one = turn_of(second, name=APPROVE_TOOL_CALL, interrupt_id=LG_OTHER)
    return TurnResumed(
        **{
            **{f: getattr(one, f) for f in one.__dataclass_fields__},
            "tool_call_id": "call-2",
            "history": tuple(history),
            "answers": tuple(answers),
        }
    )


def test_langgraph_answers_every_interrupt_of_a_group_in_one_command() -> None:
    yes, no = approve("deploy", ARGS), reject("notify", NOTIFY, "not now")
    command = langgraph.resume_command(group_turn(yes, no))
    assert command.resume == {
        LG_ID: {**yes, "tool_call_id": "call-1"},
        LG_OTHER: {**no, "tool_call_id": "call-2"},
    }


def test_pydantic_ai_decides_every_call_of_a_group() -> None:
    edited = edit("deploy", ARGS, {**ARGS, "region": "us"})
    no = reject("notify", NOTIFY, "not now")
    history, results = pydantic_ai.resume_arguments(group_turn(edited, no))
    assert results.approvals == {
        "call-1": ToolApproved(override_args={**ARGS, "region": "us"}),
        "call-2": ToolDenied(rejection_message(no)),
    }
    assert len(history) == 1  # up to the asking round: the calls are decided, not yet run


async def test_openai_agents_gives_every_call_of_a_group_its_output() -> None:
    ran: list[str] = []

    @function_tool
    def deploy(service: str, region: str) -> str:
        """Deploy."""
        ran.append(region)
        return f"deployed to {region}"

    agent: Agent[Any] = Agent(name="deployer", tools=[deploy])
    no = reject("notify", NOTIFY, "not now")
    items = await openai_agents.resume_input(group_turn(approve("deploy", ARGS), no), agent)
    outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
    assert outputs == {"call-1": "deployed to eu", "call-2": rejection_message(no)}
    assert ran == ["eu"]


def test_approved_calls_lists_the_calls_to_run_with_edits_applied() -> None:
    from turnlog import approved_calls

    edited = edit("notify", NOTIFY, {"channel": "all"})
    turn = group_turn(reject("deploy", ARGS, "no"), edited)
    turn = TurnResumed(  # an edit is written into the asking round by the worker
        **{
            **{f: getattr(turn, f) for f in turn.__dataclass_fields__},
            "history": (
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "call-1", "name": "deploy", "arguments": json.dumps(ARGS)},
                        {"id": "call-2", "name": "notify", "arguments": '{"channel": "all"}'},
                    ],
                },
                *turn.history[1:],
            ),
        }
    )
    assert approved_calls(turn) == (
        {"id": "call-2", "name": "notify", "arguments": {"channel": "all"}},
    )


# -- issue 37: the asking round once, converters, questions, keys --------------------------------

QUESTION = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
PICKED_US = {"answers": [{"selections": ["us"], "other": None}]}


def mixed_turn() -> TurnResumed:
    """A resumed turn of an approval (call-1 deploy, approved) and a question (call-2 ask_user),
    as the worker writes it: the question's tool message holds its rendered answer."""
    calls = [
        {"id": "call-1", "name": "deploy", "arguments": json.dumps(ARGS)},
        {"id": "call-2", "name": "ask_user", "arguments": json.dumps(QUESTION)},
    ]
    from turnlog.contracts.interactions import render_ask_user

    history = (
        {"role": "user", "content": "Deploy billing."},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "content": render_ask_user(PICKED_US), "tool_call_id": "call-2"},
    )
    answers = (
        {"tool_call_id": "call-1", "interrupt_id": "", "token_id": "tok-1", "answer_id": "a-1",
         "name": APPROVE_TOOL_CALL, "response_json": json.dumps(approve("deploy", ARGS))},
        {"tool_call_id": "call-2", "interrupt_id": "", "token_id": "tok-2", "answer_id": "a-2",
         "name": "ask_user", "response_json": json.dumps(PICKED_US)},
    )  # fmt: skip
    one = turn_of(PICKED_US)
    return TurnResumed(
        **{
            **{f: getattr(one, f) for f in one.__dataclass_fields__},
            "tool_call_id": "call-2",
            "history": history,
            "answers": answers,
        }
    )


def test_the_pause_check_refuses_a_call_reserved_twice() -> None:
    """The OpenAI report: ``to_records(result.to_input_list())`` already held the asking call and
    ``captured_messages`` appended it again; the doubled call was let through."""
    from turnlog import ReservedCall, TurnCheckpoint, captured_messages
    from turnlog.producers.pauses import check_checkpoint

    items = [
        {"role": "user", "content": "Deploy."},
        {"type": "function_call", "call_id": "call-1", "name": "deploy",
         "arguments": json.dumps(ARGS)},
    ]  # fmt: skip
    doubled = captured_messages(
        openai_agents.to_records(items), "", [ReservedCall("call-1", "deploy", ARGS)]
    )
    checkpoint = TurnCheckpoint(
        run_id="r", session_id="s", thread_id="t", checkpoint_id="cp", scope_hash="h",
        tool_call_id="call-1", name=APPROVE_TOOL_CALL, messages=doubled,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    with pytest.raises(PauseInvalid, match="'call-1' is reserved twice"):
        check_checkpoint(checkpoint)
    once = dataclasses.replace(checkpoint, messages=doubled[:-1])
    check_checkpoint(once)  # the list as the SDK gave it is the asking round, once
    answered = (*doubled[:-1], {"role": "tool", "content": "ok", "tool_call_id": "call-1"})
    reused = dataclasses.replace(checkpoint, messages=(*answered, doubled[-1]))
    check_checkpoint(reused)  # an id reused by a later round, after its call was answered


def test_the_asking_round_is_captured_once_whatever_the_list_held() -> None:
    from turnlog import ReservedCall
    from turnlog.adapters import with_asking_round

    call = ReservedCall("call-1", "deploy", ARGS)
    asked = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call-1", "name": "deploy", "arguments": ARGS}]}  # fmt: skip
    user = {"role": "user", "content": "Deploy."}
    held = with_asking_round([user, asked], [call])
    assert [m["role"] for m in held] == ["user", "assistant"]  # held already: kept
    appended = with_asking_round([user], [call])
    assert [m["role"] for m in appended] == ["user", "assistant"]
    model_call = {"role": "assistant", "content": "on it", "tool_calls": [
        {"id": "lc-7", "name": "deploy", "arguments": ARGS}]}  # fmt: skip
    replaced = with_asking_round([user, model_call], [ReservedCall(LG_ID, "deploy", ARGS)])
    assert [(m["role"], m["content"]) for m in replaced] == [
        ("user", "Deploy."),
        ("assistant", "on it"),
    ]
    assert [c["id"] for c in replaced[-1]["tool_calls"]] == [LG_ID]


def test_history_dicts_convert_back_into_each_framework_without_a_key_error() -> None:
    """``to_messages(history_dicts(turn))`` failed with a bare ``KeyError: 'name'``."""
    from pydantic_ai.messages import ModelResponse as PaResponse
    from pydantic_ai.messages import ToolCallPart

    from turnlog import history_dicts

    turn = mixed_turn()
    messages = pydantic_ai.to_messages(history_dicts(turn))
    assert pydantic_ai.to_records(messages) == pydantic_ai.to_records(
        pydantic_ai.to_messages(turn.history)
    )
    response = next(m for m in messages if isinstance(m, PaResponse))
    assert [p.tool_name for p in response.parts if isinstance(p, ToolCallPart)] == [
        "deploy",
        "ask_user",
    ]
    assert openai_agents.to_items(history_dicts(turn)) == openai_agents.to_items(turn.history)
    with pytest.raises(ValueError, match=r"records\[0\].tool_calls\[0\] has no name"):
        pydantic_ai.to_messages([{"role": "assistant", "tool_calls": [{"id": "x"}]}])
    with pytest.raises(ValueError, match=r"records\[0\] has role None"):
        openai_agents.to_items([{"content": "no role"}])


def test_langgraph_converts_its_messages_and_reads_the_interaction_from_the_payload() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.types import Interrupt

    records = langgraph.to_records(
        [
            HumanMessage("Deploy."),
            AIMessage("", tool_calls=[{"id": "c1", "name": "deploy", "args": ARGS}]),
            ToolMessage("deployed", tool_call_id="c1"),
        ]
    )
    assert records == [
        {"role": "user", "content": "Deploy."},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "c1", "name": "deploy", "arguments": ARGS}]},
        {"role": "tool", "content": "deployed", "tool_call_id": "c1", "name": None},
    ]  # fmt: skip
    approval = Interrupt(value=approval_request("deploy", ARGS), id=LG_ID)
    assert langgraph.interaction_of(approval) == APPROVE_TOOL_CALL
    assert langgraph.interaction_of(Interrupt(value=QUESTION, id=LG_OTHER)) == "ask_user"


def test_a_langgraph_resume_on_another_thread_is_refused_by_name() -> None:
    """``graph.ainvoke(resume_command(turn), <another thread's config>)`` did nothing, silently."""
    turn = turn_of({"answers": []})
    with pytest.raises(ValueError, match="thread 'other', the resumed turn of thread 't-1'"):
        langgraph.resume_command(turn, {"configurable": {"thread_id": "other"}})
    assert langgraph.resume_command(turn, {"configurable": {"thread_id": "t-1"}}).resume


async def test_langgraph_continue_run_refuses_another_thread_before_claiming() -> None:
    import jwt

    token = jwt.encode({"thread_id": "lg-1", "jti": "tok"}, "k" * 32, algorithm="HS256")
    with pytest.raises(ValueError, match="nothing was claimed"):
        await langgraph.continue_run(
            Untouched(),  # type: ignore[arg-type]
            token,
            object(),
            {"configurable": {"thread_id": "lg-2"}},
        )


async def test_pydantic_ai_continues_an_approval_and_a_question_with_the_key_in_the_tool() -> None:
    seen: list[Any] = []
    agent: PydanticAgent[None, str | DeferredToolRequests] = PydanticAgent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool(requires_approval=True)
    def deploy(ctx: RunContext[None], service: str, region: str) -> str:
        seen.append(ctx.tool_call_metadata)
        return f"deployed {service} to {region}"

    @agent.tool_plain
    def ask_user(questions: list[Question]) -> str:
        raise CallDeferred

    first = await agent.run("Deploy billing.")
    assert isinstance(first.output, DeferredToolRequests)
    ids = {c.tool_name: c.tool_call_id for c in [*first.output.approvals, *first.output.calls]}
    turn = mixed_turn()
    renamed = {"call-1": ids["deploy"], "call-2": ids["ask_user"]}
    text = json.dumps([dict(m) for m in turn.history])
    for old, new in renamed.items():
        text = text.replace(f'"{old}"', f'"{new}"')
    turn = TurnResumed(
        **{
            **{f: getattr(turn, f) for f in turn.__dataclass_fields__},
            "history": tuple(json.loads(text)),
            "answers": tuple({**a, "tool_call_id": renamed[a["tool_call_id"]]}
                             for a in turn.answers),
        }
    )  # fmt: skip
    history, results = pydantic_ai.resume_arguments(turn, key_for=lambda c: f"tok:{c}")
    assert results.calls == {ids["ask_user"]: observation(turn, ids["ask_user"])}
    second = await agent.run(message_history=history, deferred_tool_results=results)
    assert seen == [{"idempotency_key": f"tok:{ids['deploy']}"}]
    assert isinstance(second.output, str)


def observation(turn: TurnResumed, call_id: str) -> str:
    from turnlog.adapters import observation_of

    found = observation_of(turn, call_id)
    assert found is not None and found.startswith("The person answered.")
    return found


async def test_openai_agents_runs_the_approved_call_with_its_key_and_answers_the_question() -> None:
    keys: list[str | None] = []

    @function_tool
    def deploy(ctx: RunContextWrapper[Any], service: str, region: str) -> str:
        """Deploy."""
        keys.append(openai_agents.idempotency_key(ctx))
        return f"deployed to {region}"

    agent: Agent[Any] = Agent(name="deployer", tools=[deploy])
    turn = mixed_turn()
    items = await openai_agents.resume_input(turn, agent, key_for=lambda c: f"tok:{c}")
    outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
    assert outputs == {"call-1": "deployed to eu", "call-2": observation(turn, "call-2")}
    assert keys == ["tok:call-1"]


class Question(BaseModel):
    question: str
    options: list[str]


@function_tool(needs_approval=True)
def ask_user(questions: list[Question]) -> str:
    """Ask the person."""
    raise AssertionError("a question is answered by a person, never run")


@function_tool(needs_approval=True, name_override="deploy")
def approved_deploy(service: str, region: str) -> str:
    """Deploy."""
    return region


class AsksAndDeploys(Model):
    """Asks a question (the ``ask_user`` tool) and for a deploy in one response."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        calls = [
            ResponseFunctionToolCall(arguments=json.dumps(ARGS), call_id="call-1",
                                     name="deploy", type="function_call"),
            ResponseFunctionToolCall(arguments=json.dumps(QUESTION), call_id="call-2",
                                     name="ask_user", type="function_call"),
        ]  # fmt: skip
        return ModelResponse(output=list(calls), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Recording:
    """A Turnlog stand-in recording what a pause would write."""

    def __init__(self) -> None:
        from turnlog import default_interactions
        from turnlog.tokens import Keyring

        self.interactions = default_interactions()
        self.keyring = Keyring.hs256("k", "s" * 32)
        self.calls: list[Any] = []

    async def pause_calls(self, checkpoint: Any, calls: Any, **kw: Any) -> tuple[Any, ...]:
        from turnlog.producers.pauses import check_checkpoint

        check_checkpoint(checkpoint)
        self.checkpoint = checkpoint
        self.calls = list(calls)
        return tuple(calls)


async def test_openai_agents_pauses_a_question_tool_and_an_approval_in_one_pause() -> None:
    agent: Agent[Any] = Agent(name="d", model=AsksAndDeploys(), tools=[approved_deploy, ask_user])
    result = await Runner.run(agent, "Deploy.", run_config=RunConfig(tracing_disabled=True))
    tl = Recording()
    await openai_agents.pause_run(
        tl,  # type: ignore[arg-type]
        result, thread_id="t", run_id="r", session_id="s", scope_hash="h",
    )  # fmt: skip
    assert [(c.tool_call_id, c.interaction, c.request) for c in tl.calls] == [
        ("call-1", APPROVE_TOOL_CALL, approval_request("deploy", ARGS)),
        ("call-2", "ask_user", QUESTION),
    ]


async def test_pause_run_names_the_run_and_session_after_the_thread_unless_told() -> None:
    """What keeps an agent's pause one line: run and session default to the thread's id."""
    agent: Agent[Any] = Agent(name="d", model=AsksAndDeploys(), tools=[approved_deploy, ask_user])
    result = await Runner.run(agent, "Deploy.", run_config=RunConfig(tracing_disabled=True))
    tl = Recording()
    await openai_agents.pause_run(tl, result, thread_id="t-1", scope_hash="h")  # type: ignore[arg-type]
    assert (tl.checkpoint.run_id, tl.checkpoint.session_id) == ("t-1", "t-1")
    await openai_agents.pause_run(
        tl,  # type: ignore[arg-type]
        result, thread_id="t-1", run_id="r", session_id="s", scope_hash="h",
    )  # fmt: skip
    assert (tl.checkpoint.run_id, tl.checkpoint.session_id) == ("r", "s")


async def test_a_pause_without_a_signing_key_names_turnlog_keys_new() -> None:
    from turnlog import ConfigurationError
    from turnlog.tokens import Keyring

    tl = Recording()
    tl.keyring = Keyring([])
    tl.settings = type("S", (), {"keys_dir": Path("keys")})()  # type: ignore[attr-defined]
    agent: Agent[Any] = Agent(name="d", model=AsksAndDeploys(), tools=[approved_deploy, ask_user])
    with pytest.raises(ConfigurationError, match="turnlog keys new"):
        await openai_agents.pause_run(
            tl,  # type: ignore[arg-type]
            await Runner.run(agent, "x", run_config=RunConfig(tracing_disabled=True)),
            thread_id="t", run_id="r", session_id="s", scope_hash="h",
        )  # fmt: skip
