"""LangGraph: a graph's ``interrupt(payload)`` becomes a durable turnlog pause, and the resumed
turn the ``Command(resume=...)`` that continues the graph (``pip install turnlog[langgraph]``).

LangGraph's own checkpointer keeps the graph's state; what it does not give is a pause that
survives the process, is answered from anywhere and resumes exactly once. So the interrupt is
recorded as a pause whose request is the interrupt's payload and whose answered call is the
interrupt's id; the person's answer is checked against the interaction like any other; and the
resumed turn's response -- already validated -- is the value ``interrupt()`` returns::

    result = graph.invoke(inputs, config)
    for pending in interrupts_of(result):
        paused = await pause_interrupt(tl, pending, thread_id=..., run_id=..., session_id=...,
                                       scope_hash=...)
    ...
    async with tl.resumed() as turns:
        async for turn in turns:
            graph.invoke(resume_command(turn), {"configurable": {"thread_id": turn.thread_id}})

An interrupt for ``approve_tool_call`` carries the approval request (``{"tool", "arguments"}``);
its asking round is then that very call, so the approval is bound to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

try:
    from langgraph.types import Command, Interrupt
except ImportError as exc:  # the optional extra is not installed
    raise ImportError("turnlog.adapters.langgraph needs `pip install turnlog[langgraph]`") from exc

from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.interactions import ASK_USER


def interrupts_of(result: Mapping[str, Any]) -> list[Interrupt]:
    """The interrupts a ``graph.invoke`` result stopped on (none when the graph finished)."""
    return list(result.get("__interrupt__", ()))


async def pause_interrupt(
    tl: Turnlog,
    interrupt: Interrupt,
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    interaction: str = ASK_USER,
    messages: Sequence[Mapping[str, Any]] = (),
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> Paused:
    """Record ``interrupt`` as a pause of ``thread_id`` (use the graph's own thread id, so the
    resumed turn names the graph thread to continue). ``messages`` is the conversation so far,
    as role/content dicts; the interrupt is appended as the asking round."""
    value = interrupt.value
    if interaction == APPROVE_TOOL_CALL and isinstance(value, Mapping):
        call = ReservedCall(interrupt.id, str(value.get("tool", "")), value.get("arguments"))
    else:
        call = ReservedCall(interrupt.id, interaction, value)
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"interrupt-{interrupt.id}",
        scope_hash=scope_hash,
        interrupt_id=interrupt.id,
        name=interaction,
        prompt=prompt,
        messages=captured_messages(messages, "", [call]),
        created_at=utc_now(),
    )
    return await tl.pause(checkpoint, request=value, interaction=interaction, ttl=ttl)


def resume_value(turn: TurnResumed) -> Any:
    """What ``interrupt()`` returns in the continued graph: the person's validated response."""
    return json.loads(turn.response_json)


def resume_command(turn: TurnResumed) -> Command[Any]:
    """``Command(resume=response)`` for ``graph.invoke`` / ``ainvoke`` on the turn's thread."""
    return Command(resume=resume_value(turn))
