"""The LangGraph adapter end to end, with LangGraph's own checkpointers and langchain-core's fake
chat model (no network): the graph interrupts, the interrupt is paused durably, a separate task
answers as the person, the worker resumes, and the graph continues with the answer as the value
``interrupt()`` returns -- for a question and a tool-call approval, for two parallel nodes
interrupting at once, and across three processes over a durable (sqlite) checkpointer."""

from __future__ import annotations

import asyncio
import json
import operator
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from tests.conftest import Names
from tests.integration.cli_support import Cli, Spawned, cli_env
from tests.integration.test_api import api_settings
from turnlog import (
    APPROVE_TOOL_CALL,
    AlreadyContinued,
    Paused,
    Turnlog,
    approval_request,
    approve,
    edit,
    reject,
)
from turnlog.adapters.langgraph import (
    GraphNotWaiting,
    approved_call,
    continue_run,
    idempotency_key,
    interrupts_of,
    pause_interrupt,
    pause_interrupts,
    pause_run,
    rejection_message,
    resume_command,
    resume_value,
)
from turnlog.contracts.events import TurnResumed
from turnlog.tokens.peek import peek_claims

ROOT = Path(__file__).resolve().parents[2]
ARGS = {"service": "billing", "region": "eu"}
REGION = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
SIZE = {"questions": [{"question": "Which size?", "options": ["small", "large"]}]}
DEPLOYED: list[dict[str, str]] = []


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    region: str


def build_graph() -> Any:
    """agent (fake model asks to deploy) -> ask (which region?) -> approve (the deploy call)."""
    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(content="", tool_calls=[{"id": "call-1", "name": "deploy", "args": ARGS}])
        ]
    )

    def agent(state: State) -> State:
        return {"messages": [model.invoke(state["messages"])]}

    def ask(state: State) -> State:
        answer = interrupt(REGION)
        return {"region": answer["answers"][0]["selections"][0]}

    def approve_deploy(state: State) -> State:  # the node docs/adapters/langgraph.md shows
        call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
        request = approval_request(call["name"], call["args"])
        decision = interrupt(request)
        run = approved_call(decision, request)
        if run is None:
            content = rejection_message(decision)
        else:
            DEPLOYED.append(run["arguments"])
            content = f"deployed {run['arguments']['service']} to {run['arguments']['region']}"
        return {"messages": [ToolMessage(content, tool_call_id=call["id"])]}

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("ask", ask)
    graph.add_node("approve", approve_deploy)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "ask")
    graph.add_edge("ask", "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=InMemorySaver())


async def person(tl: Turnlog, paused: Paused, response: dict[str, Any]) -> None:
    sent = await tl.answer(paused.token, response, **paused.axes)
    assert (await tl.outcome(sent.answer_id, timeout=45)).accepted


@pytest.mark.parametrize(
    ("decision", "says"),
    [
        (edit("deploy", ARGS, {**ARGS, "region": "us"}), "deployed billing to us"),
        (reject("deploy", ARGS, "not on a Friday"), None),
    ],
    ids=["edit", "reject"],
)
async def test_a_langgraph_interrupt_pauses_and_the_resumed_turn_continues_the_graph(
    bootstrap: str, names: Names, tmp_path: Path, decision: dict[str, Any], says: str | None
) -> None:
    DEPLOYED.clear()
    graph = build_graph()
    thread = "lg-thread"
    config = {"configurable": {"thread_id": thread}}
    ids = {"thread_id": thread, "run_id": "run-lg", "session_id": "s-lg", "scope_hash": "t-a"}

    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
        async with tl.resumed() as turns:
            steps = [
                ("ask_user", {"answers": [{"selections": ["us"], "other": None}]}),
                (APPROVE_TOOL_CALL, decision),
            ]
            for interaction, response in steps:
                (pending,) = interrupts_of(result)
                paused = await pause_interrupt(tl, pending, interaction=interaction, **ids)
                answering = asyncio.create_task(person(tl, paused, response))
                turn = await anext(aiter(turns))
                await answering
                assert turn.thread_id == thread and turn.interrupt_id == pending.id
                command = resume_command(turn)
                # keyed with one pending, too; an approval's value names the call it binds
                bound = {"tool_call_id": pending.id} if interaction == APPROVE_TOOL_CALL else {}
                assert command.resume == {pending.id: {**response, **bound}}
                result = await graph.ainvoke(command, config)
        assert not worker.done()

    assert interrupts_of(result) == []
    assert result["region"] == "us"
    said = result["messages"][-1]
    assert isinstance(said, ToolMessage) and said.tool_call_id == "call-1"
    if says is None:  # rejected: nothing ran, and the model reads the worker's own wording
        assert DEPLOYED == []
        assert said.content == rejection_message(decision) == turn.history[-1]["content"]
        assert "it was not run" in said.content and "not on a Friday" in said.content
    else:
        assert DEPLOYED == [{**ARGS, "region": "us"}]
        assert said.content == says


class Parallel(TypedDict, total=False):
    answers: Annotated[list[str], operator.add]


def parallel_graph(ran: list[str]) -> Any:
    """START -> region and size, in parallel, each interrupting -> join -> END; every step a
    node runs is written to ``ran``, so the test shows what re-runs on each resume."""

    def asking(name: str, question: dict[str, Any]) -> Any:
        def node(state: Parallel) -> Parallel:
            ran.append(f"{name}: before interrupt")
            answer = interrupt(question)
            ran.append(f"{name}: answered")
            return {"answers": [f"{name}={answer['answers'][0]['selections'][0]}"]}

        return node

    def join(state: Parallel) -> Parallel:
        ran.append("join")
        return {"answers": ["joined"]}

    graph = StateGraph(Parallel)
    graph.add_node("region", asking("region", REGION))
    graph.add_node("size", asking("size", SIZE))
    graph.add_node("join", join)
    graph.add_edge(START, "region")
    graph.add_edge(START, "size")
    graph.add_edge(["region", "size"], "join")
    graph.add_edge("join", END)
    return graph.compile(checkpointer=InMemorySaver())


async def test_two_parallel_interrupts_each_resumed_from_its_own_turn_one_at_a_time(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """What a user sees on LangGraph 1.2 (docs/adapters/langgraph.md says it): both interrupts
    are paused, each answered and resumed from its own turn; the resumed node re-runs from its
    top, the node still waiting re-runs up to its ``interrupt()`` (same id: not paused again),
    a redelivered turn answers nothing, and the join runs once, after the last answer."""
    ran: list[str] = []
    graph = parallel_graph(ran)
    thread = "lg-parallel"
    config = {"configurable": {"thread_id": thread}}
    ids = {"thread_id": thread, "run_id": "run-p", "session_id": "s-p", "scope_hash": "t-a"}
    result = await graph.ainvoke({"answers": []}, config)
    region, size = sorted(interrupts_of(result), key=lambda i: i.value != REGION)
    assert (region.value, size.value) == (REGION, SIZE)
    assert sorted(ran) == ["region: before interrupt", "size: before interrupt"]

    async def resumed_one(tl: Turnlog, turns: Any, paused: Paused, pick: str) -> TurnResumed:
        answering = asyncio.create_task(
            person(tl, paused, {"answers": [{"selections": [pick], "other": None}]})
        )
        turn = await anext(aiter(turns))
        await answering
        return turn  # type: ignore[no-any-return]

    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = {i.id: await pause_interrupt(tl, i, **ids) for i in (region, size)}
        async with tl.resumed() as turns:
            first = await resumed_one(tl, turns, paused[region.id], "eu")
            assert first.interrupt_id == region.id
            # The bare value LangGraph refuses with two pending; the adapter keys it.
            with pytest.raises(RuntimeError, match="multiple pending interrupts"):
                await graph.ainvoke(Command(resume=resume_value(first)), config)

            ran.clear()
            before = (await graph.aget_state(config)).interrupts
            result = await graph.ainvoke(resume_command(first), config)
            assert sorted(ran) == [
                "region: answered",
                "region: before interrupt",  # the resumed node runs again from its top
                "size: before interrupt",  # and the one still waiting, up to its interrupt
            ]
            assert [i.id for i in interrupts_of(result)] == [size.id]  # listed again ...
            assert interrupts_of(result, besides=before) == []  # ... but paused already
            assert result["answers"] == ["region=eu"]

            ran.clear()  # the same turn delivered again: its interrupt is answered already
            result = await graph.ainvoke(resume_command(first), config)
            assert ran == ["size: before interrupt"]
            assert result["answers"] == ["region=eu"]
            assert [i.id for i in interrupts_of(result)] == [size.id]  # still unanswered

            second = await resumed_one(tl, turns, paused[size.id], "large")
            assert second.interrupt_id == size.id
            ran.clear()
            result = await graph.ainvoke(resume_command(second), config)
        assert not worker.done()

    # The node answered first does not fire again (langgraph#5952 is not seen on 1.2).
    assert ran == ["size: before interrupt", "size: answered", "join"]
    assert result["answers"] == ["region=eu", "size=large", "joined"]
    assert interrupts_of(result) == []


async def test_two_parallel_interrupts_pause_once_and_one_command_answers_both(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """The way the adapter recommends for parallel nodes: one pause for both interrupts
    (``pause_interrupts``), each answered by a publisher of its own -- the first held, the
    second resuming -- and one resumed turn whose ``resume_command`` answers both at once: no
    node runs before both answers are in, each answered node runs once, the join once."""
    ran: list[str] = []
    graph = parallel_graph(ran)
    thread = "lg-group"
    config = {"configurable": {"thread_id": thread}}
    ids = {"thread_id": thread, "run_id": "run-g", "session_id": "s-g", "scope_hash": "t-a"}
    result = await graph.ainvoke({"answers": []}, config)
    pending = interrupts_of(result)
    assert sorted(i.value["questions"][0]["question"] for i in pending) == [
        "Which region?",
        "Which size?",
    ]
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as agent_side:
        calls = await pause_interrupts(agent_side, pending, **ids)
    assert len(calls) == 2 and len({c.token_id for c in calls}) == 2
    by_question = {c.pause.request_json: c for c in calls}
    region = next(c for q, c in by_question.items() if "region" in q)
    size = next(c for q, c in by_question.items() if "size" in q)

    async with Turnlog(settings) as worker_side:
        worker = asyncio.create_task(worker_side.run_worker())
        async with Turnlog(settings) as one_person:
            sent = await one_person.answer(
                region.token, {"answers": [{"selections": ["eu"], "other": None}]}, **region.axes
            )
        async with Turnlog(settings) as another_person:
            await person(
                another_person, size, {"answers": [{"selections": ["large"], "other": None}]}
            )
        async with worker_side.resumed() as turns:
            turn = await anext(aiter(turns))
        assert not worker.done()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)

    assert sent.answer_id in {a["answer_id"] for a in turn.answers}
    command = resume_command(turn)
    assert set(command.resume) == {i.id for i in pending}  # every interrupt, by its id
    ran.clear()
    result = await graph.ainvoke(command, config)
    assert sorted(ran) == [  # a resumed node runs again from its top, as LangGraph does
        "join",
        "region: answered",
        "region: before interrupt",
        "size: answered",
        "size: before interrupt",
    ]
    assert sorted(result["answers"]) == ["joined", "region=eu", "size=large"]
    assert interrupts_of(result) == []


def test_the_example_starts_answers_and_continues_in_three_processes(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """start, answer and continue are three processes (a `turnlog worker` a fourth); the third
    has only the resumed turn on Kafka and the graph's sqlite checkpoint on disk -- with
    InMemorySaver it would find no interrupt to resume."""
    env = cli_env(bootstrap, names.prefix, names.app, tmp_path)
    cli = Cli(env)
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    script = str(ROOT / "examples" / "langgraph_agent.py")

    def step(name: str) -> str:
        run = subprocess.run(
            [sys.executable, script, name],
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    worker = Spawned(cli, "worker")
    try:
        worker.wait_for_line("worker ")
        assert step("start") == "paused\n"
        files = tmp_path / "langgraph-example"
        thread = peek_claims(json.loads((files / "pause.json").read_text())["token"])["thread_id"]
        assert step("answer") == "outcome accepted: True\n"
        assert step("continue") == "graph: Deploying billing. region=us\n"
    finally:
        worker.proc.send_signal(2)
        code, _ = worker.finish(timeout=60)
    assert code == 0

    async def finished_state() -> Any:
        async with AsyncSqliteSaver.from_conn_string(str(files / "checkpoints.sqlite")) as saver:
            return await saver.aget_tuple({"configurable": {"thread_id": thread}})

    saved = asyncio.run(finished_state())
    values = saved.checkpoint["channel_values"]
    assert values["region"] == "us"
    assert [m.content for m in values["messages"]] == ["Deploy billing.", "Deploying billing."]


@pytest.mark.parametrize(
    ("decision", "says"),
    [
        ("approve", "graph: deployed billing to eu"),
        ("edit", "graph: deployed billing to us"),
        (
            "reject",
            'graph: The person rejected this call; it was not run. Their message: "not on a '
            'Friday"',
        ),
    ],
)
def test_the_approval_example_runs_the_call_the_person_let_run(
    bootstrap: str, names: Names, tmp_path: Path, decision: str, says: str
) -> None:
    """The node docs/adapters/langgraph.md shows, paused and resumed for each decision."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langgraph_approval_agent.py"), decision],
        env=cli_env(bootstrap, names.prefix, names.app, tmp_path),
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1:] == ["outcome accepted: True", says], run.stdout


KEYS: list[str | None] = []
PICKED = {"answers": [{"selections": ["us"], "other": None}]}


def approval_graph(crash: list[bool]) -> Any:
    """START -> approve (the deploy, run on the person's decision) -> END; while ``crash`` holds
    True the node dies after the deploy ran -- after the claim, before done."""

    def approve_deploy(state: State) -> State:
        request = approval_request("deploy", ARGS)
        decision = interrupt(request)
        run = approved_call(decision, request)
        if run is not None:
            DEPLOYED.append(run["arguments"])
            KEYS.append(idempotency_key(decision))
        if crash[0]:
            raise RuntimeError("the process died here")
        return {"region": "eu" if run else "none"}

    graph = StateGraph(State)
    graph.add_node("approve", approve_deploy)
    graph.add_edge(START, "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=InMemorySaver())


async def paused_and_approved(tl: Turnlog, graph: Any, thread: str) -> Paused:
    config = {"configurable": {"thread_id": thread}}
    result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
    (paused,) = await pause_run(tl, result, config, scope_hash="t")
    assert paused.pause.checkpoint.name == APPROVE_TOOL_CALL  # read from the payload
    sent = await tl.answer(paused.token, approve("deploy", ARGS), **paused.axes)
    assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
    return paused


async def test_the_continue_step_twice_at_once_and_again_runs_the_approved_node_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Issue 37: continue_run by two clients at once and by a third afterwards -- one resumes
    the graph and the deploy runs once, with its idempotency key; the others get
    AlreadyContinued and invoke nothing."""
    DEPLOYED.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    graph = approval_graph([False])
    async with Turnlog(settings) as tl, Turnlog(settings) as other, Turnlog(settings) as late:
        worker = asyncio.create_task(tl.run_worker())
        paused = await paused_and_approved(tl, graph, "lg-once")
        both = await asyncio.gather(
            continue_run(tl, paused.token, graph),
            continue_run(other, paused.token, graph),
            return_exceptions=True,
        )
        with pytest.raises(AlreadyContinued) as afterwards:
            await continue_run(late, paused.token, graph)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    won = [r for r in both if not isinstance(r, BaseException)]
    assert len(won) == 1 and won[0]["region"] == "eu"
    assert [type(r) for r in both if isinstance(r, BaseException)] == [AlreadyContinued]
    assert afterwards.value.finished and afterwards.value.claimant
    assert [ARGS] == DEPLOYED
    assert [f"{paused.token_id}:{paused.pause.checkpoint.interrupt_id}"] == KEYS


async def test_a_crash_after_the_claim_is_retaken_only_explicitly_with_the_same_key(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """The node dies after its claim, before done: the next continue is refused (the claim is
    held, not finished); retake=True resumes the graph again, and the node gets the key it
    got before."""
    DEPLOYED.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    crash = [True]
    graph = approval_graph(crash)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await paused_and_approved(tl, graph, "lg-crash")
        with pytest.raises(RuntimeError, match="died here"):
            await continue_run(tl, paused.token, graph)
        crash[0] = False
        with pytest.raises(AlreadyContinued) as held:
            await continue_run(tl, paused.token, graph)
        assert not held.value.finished
        retaken = await continue_run(tl, paused.token, graph, retake=True)
        with pytest.raises(AlreadyContinued) as finished:
            await continue_run(tl, paused.token, graph, retake=True)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert retaken["region"] == "eu"
    assert finished.value.finished  # a finished claim is never taken again
    assert len(DEPLOYED) == 2 and KEYS[0] == KEYS[1] is not None


async def test_a_question_with_options_is_paused_and_continued_through_the_adapter(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """An interrupt asking a question with options: pause_run pauses it as ask_user (read from
    the payload), continue_run resumes the graph with the person's answer."""

    def ask(state: State) -> State:
        answer = interrupt(REGION)
        return {"region": answer["answers"][0]["selections"][0]}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "lg-ask"}}
    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
        (paused,) = await pause_run(tl, result, config, scope_hash="t")
        assert paused.pause.checkpoint.name == "ask_user"
        sent = await tl.answer(paused.token, PICKED, **paused.axes)
        assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
        continued = await continue_run(tl, paused.token, graph)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert continued["region"] == "us"
    assert interrupts_of(continued) == []


async def test_a_question_and_an_approval_in_parallel_nodes_pause_once_and_continue_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Issue 37, item 2: two parallel nodes, one asking a question with options, one asking to
    approve the deploy -- one pause_run (each interaction read from its payload), answered by
    two clients, one continue_run with the question's token: the deploy runs once, with its
    key, and the join once."""
    DEPLOYED.clear()
    KEYS.clear()

    def ask(state: Parallel) -> Parallel:
        answer = interrupt(REGION)
        return {"answers": [f"region={answer['answers'][0]['selections'][0]}"]}

    def approve_deploy(state: Parallel) -> Parallel:
        request = approval_request("deploy", ARGS)
        decision = interrupt(request)
        run = approved_call(decision, request)
        if run is not None:
            DEPLOYED.append(run["arguments"])
            KEYS.append(idempotency_key(decision))
        return {"answers": [f"deploy={'ran' if run else 'not run'}"]}

    builder = StateGraph(Parallel)
    builder.add_node("ask", ask)
    builder.add_node("approve", approve_deploy)
    builder.add_node("join", lambda state: {"answers": ["joined"]})
    builder.add_edge(START, "ask")
    builder.add_edge(START, "approve")
    builder.add_edge(["ask", "approve"], "join")
    builder.add_edge("join", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "lg-mixed"}}
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        result = await graph.ainvoke({"answers": []}, config)
        calls = await pause_run(tl, result, config, scope_hash="t")
        by_name = {c.pause.checkpoint.name: c for c in calls}  # read from each payload
        assert sorted(by_name) == sorted([APPROVE_TOOL_CALL, "ask_user"])
        question, deploy_call = by_name["ask_user"], by_name[APPROVE_TOOL_CALL]
        async with Turnlog(settings) as one, Turnlog(settings) as another:
            await one.answer(question.token, PICKED, **question.axes)
            sent = await another.answer(
                deploy_call.token, approve("deploy", ARGS), **deploy_call.axes
            )
            assert (await another.outcome(sent.answer_id, timeout=45)).accepted
        continued = await continue_run(tl, question.token, graph)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert sorted(continued["answers"]) == ["deploy=ran", "joined", "region=us"]
    assert [ARGS] == DEPLOYED
    assert [f"{deploy_call.token_id}:{deploy_call.pause.checkpoint.tool_call_id}"] == KEYS


async def test_a_graph_not_waiting_invokes_nothing_and_the_right_graph_retakes_the_turn(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """continue_run on a graph whose checkpointer never saw the pause (a fresh InMemorySaver:
    the pausing process's memory is gone) raises GraphNotWaiting and invokes nothing; the
    claim stays taken, not done, so the same call on the graph that paused is refused until it
    retakes, and then runs the approved node once."""
    DEPLOYED.clear()
    KEYS.clear()
    settings = api_settings(bootstrap, names, tmp_path)
    graph = approval_graph([False])
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await paused_and_approved(tl, graph, "lg-not-waiting")
        with pytest.raises(GraphNotWaiting, match="retake=True"):
            await continue_run(tl, paused.token, approval_graph([False]))
        with pytest.raises(AlreadyContinued) as held:
            await continue_run(tl, paused.token, graph)
        assert not held.value.finished
        continued = await continue_run(tl, paused.token, graph, retake=True)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert continued["region"] == "eu"
    assert [ARGS] == DEPLOYED
