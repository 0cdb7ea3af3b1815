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
A run that deferred several approvals (parallel tool calls) pauses once for all of them with
:func:`pause_deferred_calls`; each call is answered on its own and the turn resumes once, with
every decision in ``DeferredToolResults``. External calls (``requests.calls``) are refused
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

from turnlog.adapters import approval_answers, rejection_message
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, EDIT, REJECT, approval_request
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.group import CallToPause
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
    (``result.all_messages()``) as the checkpoint. A run that deferred several approvals is
    paused by :func:`pause_deferred_calls`, once for all of them."""
    _refuse_external(requests)
    if len(requests.approvals) != 1:
        raise PauseInvalid(
            "requests",
            f"this run deferred {len(requests.approvals)} approvals "
            f"({', '.join(c.tool_name for c in requests.approvals)}); nothing was paused. "
            "Pause them once, for all of them, with pause_deferred_calls(), which returns "
            "one Paused per call",
        )
    (paused,) = await pause_deferred_calls(
        tl, requests, messages, thread_id=thread_id, run_id=run_id, session_id=session_id,
        scope_hash=scope_hash, prompt=prompt, ttl=ttl,
    )  # fmt: skip
    return paused


async def pause_deferred_calls(
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
) -> tuple[Paused, ...]:
    """Record every deferred approval of the run as one pause: one ``Paused`` per call, in the
    order the model made them, each answered on its own (``tl.answer(p.token, ...,
    **p.axes)``); the turn resumes once, when the last is answered. One approval is a pause of
    one call, as :func:`pause_deferred` records it."""
    _refuse_external(requests)
    if not requests.approvals:
        raise PauseInvalid("requests", "this run deferred no approval; nothing was paused")
    first = requests.approvals[0]
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"approval-{first.tool_call_id}",
        scope_hash=scope_hash,
        tool_call_id=first.tool_call_id,
        name=APPROVE_TOOL_CALL,
        prompt=prompt,
        messages=tuple(to_records(messages)),
        created_at=utc_now(),
    )
    if len(requests.approvals) == 1:
        request = approval_request(first.tool_name, first.args_as_dict())
        return (
            await tl.pause(checkpoint, request=request, interaction=APPROVE_TOOL_CALL, ttl=ttl),
        )
    calls = [
        CallToPause(
            call.tool_call_id,
            APPROVE_TOOL_CALL,
            approval_request(call.tool_name, call.args_as_dict()),
        )
        for call in requests.approvals
    ]
    return await tl.pause_calls(checkpoint, calls, ttl=ttl)


def _refuse_external(requests: DeferredToolRequests) -> None:
    if requests.calls:
        names = ", ".join(c.tool_name for c in requests.calls)
        raise PauseInvalid(
            "requests",
            f"this run deferred {len(requests.calls)} external call(s) ({names}); nothing was "
            "paused. Run external calls yourself: their results go in "
            "DeferredToolResults(calls=...) of the next run",
        )


def _approval(decision: dict[str, Any]) -> bool | ToolApproved | ToolDenied:
    if decision["decision"] == EDIT:
        return ToolApproved(override_args=json.loads(decision["arguments_json"]))
    if decision["decision"] == REJECT:
        return ToolDenied(rejection_message(decision))
    return True


def resume_arguments(turn: TurnResumed) -> tuple[list[ModelMessage], DeferredToolResults]:
    """``(message_history, deferred_tool_results)`` for ``agent.run`` from a resumed approval:
    the history up to the asking round, and the person's decision on each of its calls -- one,
    or every call of a pause of several (a rejection as ``ToolDenied(rejection_message(...))``,
    what every adapter's model reads)."""
    answers = approval_answers(turn)
    history = list(turn.history)
    asking = max(
        i for i, m in enumerate(history) if m["role"] == "assistant" and m.get("tool_calls")
    )
    results = DeferredToolResults(
        approvals={
            str(answer["tool_call_id"]): _approval(json.loads(str(answer["response_json"])))
            for answer in answers
        }
    )
    return to_messages(history[: asking + 1]), results
