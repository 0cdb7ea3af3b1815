"""The LangGraph adapter end to end, with LangGraph's own checkpointer and langchain-core's fake
chat model (no network): the graph interrupts, the interrupt is paused durably, a separate task
answers as the person, the worker resumes, and the graph continues with the answer as the value
``interrupt()`` returns -- for a question and for a tool-call approval."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from tests.conftest import Names
from tests.integration.test_api import api_settings
from turnlog import APPROVE_TOOL_CALL, Paused, Turnlog, approval_request, edit
from turnlog.adapters.langgraph import interrupts_of, pause_interrupt, resume_command

ARGS = {"service": "billing", "region": "eu"}


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    region: str
    deployed: str


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
        answer = interrupt({"questions": [{"question": "Which region?", "options": ["eu", "us"]}]})
        return {"region": answer["answers"][0]["selections"][0]}

    def approve_call(state: State) -> State:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
        decision = interrupt(approval_request(call["name"], call["args"]))
        if decision["decision"] == "reject":
            return {"deployed": "nothing"}
        arguments = json.loads(decision["arguments_json"]) if decision["arguments_json"] else ARGS
        return {"deployed": f"{arguments['service']} to {arguments['region']}"}

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("ask", ask)
    graph.add_node("approve", approve_call)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "ask")
    graph.add_edge("ask", "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=InMemorySaver())


async def test_a_langgraph_interrupt_pauses_and_the_resumed_turn_continues_the_graph(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    graph = build_graph()
    thread = "lg-thread"
    config = {"configurable": {"thread_id": thread}}
    ids = {"thread_id": thread, "run_id": "run-lg", "session_id": "s-lg", "scope_hash": "t-a"}

    async def person(tl: Turnlog, paused: Paused, response: dict[str, Any]) -> None:
        sent = await tl.answer(paused.token, response, **paused.axes)
        assert (await tl.outcome(sent.answer_id, timeout=45)).accepted

    async with Turnlog(api_settings(bootstrap, names, tmp_path)) as tl:
        worker = asyncio.create_task(tl.run_worker())
        result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
        async with tl.resumed() as turns:
            steps = [
                (None, {"answers": [{"selections": ["us"], "other": None}]}),
                (APPROVE_TOOL_CALL, edit("deploy", ARGS, {**ARGS, "region": "us"})),
            ]
            for interaction, response in steps:
                (pending,) = interrupts_of(result)
                paused = await pause_interrupt(
                    tl, pending, interaction=interaction or "ask_user", **ids
                )
                answering = asyncio.create_task(person(tl, paused, response))
                turn = await anext(aiter(turns))
                await answering
                assert turn.thread_id == thread and turn.interrupt_id == pending.id
                result = await graph.ainvoke(resume_command(turn), config)
        assert not worker.done()

    assert interrupts_of(result) == []
    assert result["region"] == "us"
    assert result["deployed"] == "billing to us"
