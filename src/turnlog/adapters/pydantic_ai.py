"""Pydantic AI: a run that ends in deferred tool requests (a tool with ``requires_approval=True``)
becomes a durable ``approve_tool_call`` pause, and the resumed turn becomes the message history
and ``DeferredToolResults`` that continue the run (``pip install turnlog[pydantic-ai]``)::

    result = await agent.run(prompt)
    if isinstance(result.output, DeferredToolRequests):
        paused = await pause_deferred(tl, result.output, result.all_messages(), thread_id=...,
                                      run_id=..., session_id=..., scope_hash=...)
    ...
    async for turn in turns:                       # in any process, after the worker resumed it
        history, results = resume_arguments(turn)
        await agent.run(message_history=history, deferred_tool_results=results)

The run's messages travel as turnlog's role/content records (seed 000: the mapping is the
wire), so a process that never saw the pause rebuilds the history from the resumed turn alone.
One approval per pause: a run that defers several calls, or external calls, is refused here
(:class:`~turnlog.errors.PauseInvalid`, saying what to do) rather than half-paused. A rejected
call is denied with :func:`~turnlog.adapters.rejection_message`, so the model reads the wording
the other adapters give it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

try:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
except ImportError as exc:  # the optional extra is not installed
    raise ImportError(
        "turnlog.adapters.pydantic_ai needs `pip install turnlog[pydantic-ai]`"
    ) from exc

from turnlog.adapters import rejection_message
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, EDIT, REJECT, approval_request
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import TurnResumed
from turnlog.errors import PauseInvalid


def to_records(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Pydantic AI messages as role/content records (text, tool calls, tool returns)."""
    records: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [
                {"id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_json_str()}
                for p in message.parts
                if isinstance(p, ToolCallPart)
            ]
            record: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                record["tool_calls"] = calls
            records.append(record)
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                records.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
                records.append({"role": "user", "content": part.content})
            elif isinstance(part, ToolReturnPart):
                records.append(
                    {
                        "role": "tool",
                        "content": part.model_response_str(),
                        "tool_call_id": part.tool_call_id,
                        "name": part.tool_name,
                    }
                )
    return records


def to_messages(records: Sequence[Any]) -> list[ModelMessage]:
    """Role/content records (a resumed turn's history) as Pydantic AI messages."""
    messages: list[ModelMessage] = []
    pending: list[ModelRequestPart] = []
    for record in records:
        role = record["role"]
        if role == "assistant":
            if pending:
                messages.append(ModelRequest(parts=pending))
                pending = []
            parts: list[ModelResponsePart] = []
            if record.get("content"):
                parts.append(TextPart(content=record["content"]))
            for call in record.get("tool_calls") or ():
                parts.append(
                    ToolCallPart(
                        tool_name=call["name"], args=call["arguments"], tool_call_id=call["id"]
                    )
                )
            messages.append(ModelResponse(parts=parts))
        elif role == "system":
            pending.append(SystemPromptPart(content=record["content"]))
        elif role == "user":
            pending.append(UserPromptPart(content=record["content"]))
        elif role == "tool":
            pending.append(
                ToolReturnPart(
                    tool_name=record.get("name") or "",
                    content=record["content"],
                    tool_call_id=record.get("tool_call_id") or "",
                )
            )
    if pending:
        messages.append(ModelRequest(parts=pending))
    return messages


async def pause_deferred(
    tl: Turnlog,
    requests: DeferredToolRequests,
    messages: Sequence[ModelMessage],
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> Paused:
    """Record the run's one deferred approval as an ``approve_tool_call`` pause, its history
    (``result.all_messages()``) as the checkpoint."""
    if requests.calls or len(requests.approvals) != 1:
        names = ", ".join(c.tool_name for c in (*requests.approvals, *requests.calls))
        raise PauseInvalid(
            "requests",
            f"one approval per pause, and this run deferred {len(requests.approvals)} "
            f"approval(s) and {len(requests.calls)} external call(s) ({names}); nothing was "
            "paused. Ask the model for one call per response (agent.run(..., "
            "model_settings={'parallel_tool_calls': False})), and run external calls yourself: "
            "their results go in DeferredToolResults(calls=...) of the next run",
        )
    call = requests.approvals[0]
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"approval-{call.tool_call_id}",
        scope_hash=scope_hash,
        tool_call_id=call.tool_call_id,
        name=APPROVE_TOOL_CALL,
        prompt=prompt,
        messages=tuple(to_records(messages)),
        created_at=utc_now(),
    )
    request = approval_request(call.tool_name, call.args_as_dict())
    return await tl.pause(checkpoint, request=request, interaction=APPROVE_TOOL_CALL, ttl=ttl)


def resume_arguments(turn: TurnResumed) -> tuple[list[ModelMessage], DeferredToolResults]:
    """``(message_history, deferred_tool_results)`` for ``agent.run`` from a resumed approval:
    the history up to the asking round, and the person's decision on its call (a rejection as
    ``ToolDenied(rejection_message(...))``, what every adapter's model reads)."""
    if turn.name != APPROVE_TOOL_CALL:
        raise ValueError(f"turn of {turn.name!r} is no approval")
    history = list(turn.history)
    asking = max(
        i for i, m in enumerate(history) if m["role"] == "assistant" and m.get("tool_calls")
    )
    decision = json.loads(turn.response_json)
    approval: bool | ToolApproved | ToolDenied = True
    if decision["decision"] == EDIT:
        approval = ToolApproved(override_args=json.loads(decision["arguments_json"]))
    elif decision["decision"] == REJECT:
        approval = ToolDenied(rejection_message(decision))
    results = DeferredToolResults(approvals={turn.tool_call_id: approval})
    return to_messages(history[: asking + 1]), results
