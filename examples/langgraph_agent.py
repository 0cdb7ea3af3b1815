"""A LangGraph graph whose ``interrupt()`` is a durable turnlog pause, continued, once, in
another process. LangGraph's fake chat model stands in for the LLM: no network, no API key.

    pip install -e '.[langgraph]'
    turnlog keys new --kid example
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/langgraph_agent.py

runs the three steps one after the other, with a resume worker, in one process; each step is
also a process of its own, as in a deployment (a worker, ``turnlog worker``, runs meanwhile):

    python examples/langgraph_agent.py start      # the graph asks; the interrupt is paused
    python examples/langgraph_agent.py answer     # the person answers, from anywhere
    python examples/langgraph_agent.py continue   # the graph goes on with the answer

The graph asks the person which region and stops at ``interrupt()``; ``pause_run`` records
what it waits on as a pause and the process may exit. The graph's state lives in LangGraph's
checkpointer, so it must be a durable one -- here ``AsyncSqliteSaver``
(``langgraph-checkpoint-sqlite``) on a file; ``InMemorySaver`` would be gone with the first
process. ``continue_run`` claims the pause's resumed turn and continues the graph from its
checkpoint, the answer being what ``interrupt()`` returns. Run ``continue`` twice, or in two
processes at once: the graph goes on once (its ``deploy`` node writes a line to
``deployments.log``), and every other ``continue`` ends with ``AlreadyContinued`` naming who
continued it. The files are kept beside turnlog's state directory, in ``langgraph-example/``:
``checkpoints.sqlite``, ``deployments.log`` and ``pause.json`` (the token and axes handed to
the person). Lines marked ``# turnlog`` are what turnlog adds to the agent, ``# turnlog:
answering`` to the person's side, ``# turnlog: both`` to both.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from turnlog import Settings, Turnlog, TurnlogError  # turnlog: both
from turnlog.adapters.langgraph import continue_run, pause_run  # turnlog


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    region: str


@asynccontextmanager
async def durable_graph(files: Path) -> AsyncIterator[Any]:
    """The graph, compiled on a checkpointer every process of the thread reads: a file here,
    ``AsyncPostgresSaver`` (``langgraph-checkpoint-postgres``) across machines."""
    model = FakeMessagesListChatModel(responses=[AIMessage(content="Deploying billing.")])

    def ask(state: State) -> State:
        # Runs again, from the top, when the graph is resumed: keep side effects after this.
        answer = interrupt({"questions": [{"question": "Which region?", "options": ["eu", "us"]}]})
        return {"region": answer["answers"][0]["selections"][0]}

    def deploy(state: State) -> State:
        with (files / "deployments.log").open("a") as deployments:
            deployments.write(f"billing {state['region']}\n")  # the side effect, after asking
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_node("deploy", deploy)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "deploy")
    graph.add_edge("deploy", END)
    async with AsyncSqliteSaver.from_conn_string(str(files / "checkpoints.sqlite")) as saver:
        yield graph.compile(checkpointer=saver)


async def start(tl: Turnlog, files: Path) -> None:
    """The agent's process: run the graph to its interrupt, pause it, hand the token over."""
    config = {"configurable": {"thread_id": f"langgraph-{uuid.uuid4().hex[:8]}"}}
    async with durable_graph(files) as graph:
        result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
    (paused,) = await pause_run(tl, result, config, scope_hash="tenant-a")  # turnlog
    handed = {"token": paused.token, "axes": dict(paused.axes)}  # turnlog
    (files / "pause.json").write_text(json.dumps(handed))
    print("paused")


async def answer(tl: Turnlog, files: Path) -> None:
    """The person's side, in any process: the token and the axes are all it needs."""
    handed = json.loads((files / "pause.json").read_text())
    reply = {"answers": [{"selections": ["us"], "other": None}]}
    sent = await tl.answer(handed["token"], reply, **handed["axes"])  # turnlog: answering
    outcome = await tl.outcome(sent.answer_id, timeout=60)  # turnlog: answering
    print("outcome accepted:", outcome.accepted)


async def continue_step(tl: Turnlog, files: Path) -> None:
    """Any process, any number of times: the graph continued from its checkpoint, once."""
    handed = json.loads((files / "pause.json").read_text())
    async with durable_graph(files) as graph:
        result = await continue_run(tl, handed["token"], graph)  # turnlog
    print(f"graph: {result['messages'][-1].content} region={result['region']}")


STEPS = {"start": [start], "answer": [answer], "continue": [continue_step]}


async def main(step: str) -> None:
    async with Turnlog(Settings.from_env()) as tl:  # turnlog: both
        files = tl.settings.state_dir.parent / "langgraph-example"  # the demo's own files
        files.mkdir(parents=True, exist_ok=True)
        # One process for the whole story: it runs the worker a deployment runs apart.
        worker = asyncio.create_task(tl.run_worker()) if step == "all" else None
        for run in STEPS.get(step) or [start, answer, continue_step]:
            await run(tl, files)
    if worker is not None:
        await worker


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "all"
    if chosen not in {*STEPS, "all"}:
        sys.exit(f"usage: {sys.argv[0]} [start|answer|continue]")
    try:
        asyncio.run(asyncio.wait_for(main(chosen), 120))
    except TurnlogError as refused:  # turnlog: AlreadyContinued (another continued it), ...
        sys.exit(f"{type(refused).__name__}: {refused}")
