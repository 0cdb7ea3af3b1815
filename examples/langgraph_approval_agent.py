"""A LangGraph node that asks a person to approve a tool call, paused durably by turnlog.
LangGraph's fake chat model stands in for the LLM: no network, no API key.

    pip install -e '.[langgraph]'
    TURNLOG_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/langgraph_approval_agent.py edit

The model asks to deploy; the ``approve`` node interrupts with the call
(``approval_request``), the interrupt is paused as ``approve_tool_call``, a separate task
decides as the person (``approve``, ``edit`` -- another region -- or ``reject``), the worker
resumes it, and the node runs the call the person let run (``approved_call``) or answers it
with the rejection every adapter gives the model (``rejection_message``). One process here, so
``InMemorySaver`` does; ``examples/langgraph_agent.py`` continues a graph in another process.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from turnlog import (
    APPROVE_TOOL_CALL,
    Paused,
    Settings,
    Turnlog,
    TurnResumed,
    approval_request,
    approve,
    edit,
    reject,
    write_keypair,
)
from turnlog.adapters.langgraph import (
    approved_call,
    interrupts_of,
    pause_interrupt,
    rejection_message,
    resume_command,
)

ARGS = {"service": "billing", "region": "eu"}


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def deploy(service: str, region: str) -> str:
    return f"deployed {service} to {region}"


# --8<-- [start:approve]
def approve_deploy(state: State) -> State:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
    request = approval_request(call["name"], call["args"])
    decision = interrupt(request)  # the person's decision, once resumed
    run = approved_call(decision, request)  # None: the person rejected it
    content = rejection_message(decision) if run is None else deploy(**run["arguments"])
    return {"messages": [ToolMessage(content, tool_call_id=call["id"])]}


# --8<-- [end:approve]


def build_graph() -> Any:
    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(content="", tool_calls=[{"id": "call-1", "name": "deploy", "args": ARGS}])
        ]
    )

    def agent(state: State) -> State:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("approve", approve_deploy)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=InMemorySaver())


DECISIONS = {
    "approve": approve("deploy", ARGS),
    "edit": edit("deploy", ARGS, {**ARGS, "region": "us"}),
    "reject": reject("deploy", ARGS, "not on a Friday"),
}


async def person_decides(tl: Turnlog, paused: Paused, decision: str) -> None:
    sent = await tl.answer(paused.token, DECISIONS[decision], **paused.axes)
    print("outcome accepted:", (await tl.outcome(sent.answer_id, timeout=60)).accepted)


async def main(decision: str) -> None:
    settings = Settings.from_env()
    if not any(settings.keys_dir.glob("*.private.pem")):
        write_keypair(settings.keys_dir, "example")
    thread = f"langgraph-approval-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    graph = build_graph()
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        result = await graph.ainvoke({"messages": [HumanMessage("Deploy billing.")]}, config)
        (pending,) = interrupts_of(result)
        paused = await pause_interrupt(
            tl, pending, interaction=APPROVE_TOOL_CALL,
            thread_id=thread, run_id="run-1", session_id="s-1", scope_hash="t-a",
        )  # fmt: skip
        print("paused for approval; token", paused.token_id)
        deciding = asyncio.create_task(person_decides(tl, paused, decision))
        async with tl.resumed() as turns:
            async for turn in turns:
                if isinstance(turn, TurnResumed) and turn.token_id == paused.token_id:
                    result = await graph.ainvoke(resume_command(turn), config)
                    await turns.commit()  # leaving the loop: this turn is handled
                    break
        await deciding
    await worker
    print("graph:", result["messages"][-1].content)


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "approve"
    if chosen not in DECISIONS:
        sys.exit(f"usage: {sys.argv[0]} [approve|edit|reject]")
    asyncio.run(asyncio.wait_for(main(chosen), 120))
