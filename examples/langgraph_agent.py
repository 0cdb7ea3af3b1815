"""A LangGraph graph whose ``interrupt()`` is a durable turnlog pause. LangGraph's fake chat
model stands in for the LLM: no network, no API key.

    pip install -e '.[langgraph]'
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/langgraph_agent.py

The graph asks the person which region, stops at ``interrupt()``; the interrupt is recorded as a
pause, a separate task answers, the worker resumes it, and ``Command(resume=...)`` continues the
graph with the person's answer as the value ``interrupt()`` returns.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from turnlog import Paused, Settings, Turnlog, write_keypair
from turnlog.adapters.langgraph import interrupts_of, pause_interrupt, resume_command


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    region: str


def build_graph() -> Any:
    model = FakeMessagesListChatModel(responses=[AIMessage(content="Deploying billing.")])

    def ask(state: State) -> State:
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
    return graph.compile(checkpointer=InMemorySaver())


async def person_answers(tl: Turnlog, paused: Paused) -> None:
    reply = {"answers": [{"selections": ["us"], "other": None}]}
    sent = await tl.answer(paused.token, reply, **paused.axes)
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def main() -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    thread = f"langgraph-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    graph = build_graph()
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
        (pending,) = interrupts_of(result)
        paused = await pause_interrupt(
            tl, pending, thread_id=thread, run_id="run-1", session_id="s-1", scope_hash="t-a"
        )
        print("paused; token", paused.token_id)
        answering = asyncio.create_task(person_answers(tl, paused))
        async with tl.resumed() as turns:
            async for turn in turns:
                if turn.thread_id == thread:
                    result = await graph.ainvoke(resume_command(turn), config)
                    await turns.commit()  # leaving the loop: this turn is handled
                    break
        await answering
    await worker
    print(f"graph: {result['messages'][-1].content} region={result['region']}")


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 120))
