"""A LangGraph graph whose ``interrupt()`` is a durable turnlog pause, continued in another
process. LangGraph's fake chat model stands in for the LLM: no network, no API key.

    pip install -e '.[langgraph]'
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/langgraph_agent.py

runs the three steps one after the other, with a resume worker, in one process; each step is
also a process of its own, as in a deployment (a worker, ``turnlog worker``, runs meanwhile):

    python examples/langgraph_agent.py start      # the graph asks; the interrupt is paused
    python examples/langgraph_agent.py answer     # the person answers, from anywhere
    python examples/langgraph_agent.py continue   # the graph goes on with the answer

The graph asks the person which region and stops at ``interrupt()``; the interrupt is recorded
as a pause and the process may exit. The graph's state lives in LangGraph's checkpointer, so it
must be a durable one -- here ``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``) on a file;
``InMemorySaver`` would be gone with the first process. The continuing process reads the
pause's resumed turn and ``resume_command(turn)`` -- ``Command(resume={interrupt_id: answer})``
-- continues the graph from its checkpoint, the answer being what ``interrupt()`` returns.
The files are kept beside turnlog's state directory, in ``langgraph-example/``: the graph's
``checkpoints.sqlite`` and ``pause.json`` (the thread, and the token handed to the person).
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

from turnlog import Settings, Turnlog, TurnResumed, write_keypair
from turnlog.adapters.langgraph import interrupts_of, pause_interrupt, resume_command


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

    def agent(state: State) -> State:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_node("agent", agent)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "agent")
    graph.add_edge("agent", END)
    async with AsyncSqliteSaver.from_conn_string(str(files / "checkpoints.sqlite")) as saver:
        yield graph.compile(checkpointer=saver)


async def start(tl: Turnlog, files: Path) -> None:
    """The agent's process: run the graph to its interrupt, pause it, hand the token over."""
    thread = f"langgraph-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    async with durable_graph(files) as graph:
        result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
    (pending,) = interrupts_of(result)
    paused = await pause_interrupt(
        tl, pending, thread_id=thread, run_id="run-1", session_id="s-1", scope_hash="t-a"
    )
    handed = {
        "thread": thread,
        "token": paused.token,
        "token_id": paused.token_id,
        "axes": dict(paused.axes),
    }
    (files / "pause.json").write_text(json.dumps(handed))
    print("paused; token", paused.token_id)


async def answer(tl: Turnlog, files: Path) -> None:
    """The person's side, in any process: the token and the axes are all it needs."""
    handed = json.loads((files / "pause.json").read_text())
    reply = {"answers": [{"selections": ["us"], "other": None}]}
    sent = await tl.answer(handed["token"], reply, **handed["axes"])
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def continue_graph(tl: Turnlog, files: Path) -> None:
    """Any process: the pause's resumed turn, and the graph continued from its checkpoint."""
    handed = json.loads((files / "pause.json").read_text())
    config = {"configurable": {"thread_id": handed["thread"]}}
    async with durable_graph(files) as graph, tl.resumed() as turns:
        async for turn in turns:
            if not isinstance(turn, TurnResumed) or turn.token_id != handed["token_id"]:
                continue  # another pause's turn: an agent service continues each one
            before = (await graph.aget_state(config)).interrupts  # paused already, if any
            result = await graph.ainvoke(resume_command(turn), config)
            await turns.commit()  # leaving the loop: this turn is handled
            for new in interrupts_of(result, besides=before):
                print("the graph asks again:", new.value)  # a new interrupt: pause it too
            print(f"graph: {result['messages'][-1].content} region={result['region']}")
            return


STEPS = {"start": [start], "answer": [answer], "continue": [continue_graph]}


async def main(step: str) -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    files = settings.state_dir.parent / "langgraph-example"
    files.mkdir(parents=True, exist_ok=True)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker()) if step == "all" else None
        for run in STEPS.get(step) or [start, answer, continue_graph]:
            await run(tl, files)
    if worker is not None:
        await worker


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "all"
    if chosen not in {*STEPS, "all"}:
        sys.exit(f"usage: {sys.argv[0]} [start|answer|continue]")
    asyncio.run(asyncio.wait_for(main(chosen), 120))
