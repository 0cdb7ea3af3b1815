"""The OpenAI Agents SDK: a run interrupted for a tool approval (``needs_approval=True``) becomes
a durable ``approve_tool_call`` pause, and the resumed turn becomes the input that continues the
run -- in any process (``pip install turnlog[openai-agents]``)::

    result = await Runner.run(agent, prompt)
    if result.interruptions:
        paused = await pause_approval(tl, result, thread_id=..., run_id=..., session_id=...,
                                      scope_hash=...)
    ...
    async for turn in turns:                      # after the worker resumed it
        await Runner.run(agent, await resume_input(turn, agent))

The SDK's ``RunState`` lives in one process; the pause instead keeps the run's items as
turnlog's role/content records, so a process that never saw the pause rebuilds the input from
the resumed turn alone. On resume, an approved call (with the person's arguments when edited)
is run through the agent's own tool, as the SDK runs an approved call; a rejected call has
:func:`~turnlog.adapters.rejection_message` as its output, the wording the other adapters give
the model. One approval per pause: a run stopped for several is refused
(:class:`~turnlog.errors.PauseInvalid`, saying what to do) rather than half-paused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

try:
    from agents import Agent, FunctionTool, RunResult, ToolApprovalItem
    from agents.tool_context import ToolContext
except ImportError as exc:  # the optional extra is not installed
    needs = "turnlog.adapters.openai_agents needs `pip install turnlog[openai-agents]`"
    raise ImportError(needs) from exc

from turnlog.adapters import rejection_message
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_call
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import TurnResumed
from turnlog.errors import PauseInvalid


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def to_records(items: Sequence[Any]) -> list[dict[str, Any]]:
    """SDK input items (``result.to_input_list()``) as role/content records."""
    records: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "function_call":
            call = {"id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}
            last = records[-1] if records else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                records.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            records.append({"role": "tool", "content": text, "tool_call_id": item["call_id"]})
        elif item.get("role") in ("system", "developer", "user", "assistant"):
            role = "system" if item["role"] == "developer" else item["role"]
            records.append({"role": role, "content": _text(item.get("content"))})
    return records


def to_items(records: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Role/content records (a resumed turn's history) as SDK input items."""
    items: list[Any] = []
    for record in records:
        role = record["role"]
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": record.get("tool_call_id") or "",
                    "output": record["content"],
                }
            )
            continue
        if record.get("content") or role != "assistant":
            items.append({"role": role, "content": record["content"]})
        for call in record.get("tool_calls") or ():
            items.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": call["name"],
                    "arguments": call["arguments"],
                }
            )
    return items


async def pause_approval(
    tl: Turnlog,
    result: RunResult,
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> Paused:
    """Record the run's one pending tool approval as an ``approve_tool_call`` pause."""
    pending = [i for i in result.interruptions if isinstance(i, ToolApprovalItem)]
    if len(pending) != 1 or len(result.interruptions) != 1:
        names = ", ".join(str(getattr(i, "tool_name", None) or "?") for i in result.interruptions)
        raise PauseInvalid(
            "result.interruptions",
            f"one approval per pause, and this run stopped for {len(result.interruptions)} "
            f"({names}); nothing was paused. Ask the model for one call per response: "
            "Agent(..., model_settings=ModelSettings(parallel_tool_calls=False))",
        )
    raw = pending[0].raw_item
    call_id, name, arguments = _call_of(raw)
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"approval-{call_id}",
        scope_hash=scope_hash,
        tool_call_id=call_id,
        name=APPROVE_TOOL_CALL,
        prompt=prompt,
        messages=tuple(to_records(result.to_input_list())),
        created_at=utc_now(),
    )
    request = approval_request(name, json.loads(arguments or "{}"))
    return await tl.pause(checkpoint, request=request, interaction=APPROVE_TOOL_CALL, ttl=ttl)


def _call_of(raw: Any) -> tuple[str, str, str]:
    if isinstance(raw, Mapping):
        return str(raw["call_id"]), str(raw["name"]), str(raw.get("arguments") or "{}")
    return str(raw.call_id), str(raw.name), str(raw.arguments or "{}")


async def resume_input(turn: TurnResumed, agent: Agent[Any], *, context: Any = None) -> list[Any]:
    """The input continuing the run: the resumed history, and -- when the call was approved --
    its output, from the agent's own tool run with the approved (or edited) arguments; when it
    was rejected, :func:`~turnlog.adapters.rejection_message` is its output, the wording every
    adapter gives the model."""
    items = to_items(turn.history)
    call = approved_call(turn)
    if call is None:
        return _rejected(items, turn)
    tool = next(
        (t for t in agent.tools if isinstance(t, FunctionTool) and t.name == call["name"]), None
    )
    if tool is None:
        raise ValueError(f"agent {agent.name!r} has no function tool {call['name']!r}")
    arguments = json.dumps(call["arguments"])
    tool_context = ToolContext(
        context, tool_name=call["name"], tool_call_id=call["id"], tool_arguments=arguments
    )
    output = await tool.on_invoke_tool(tool_context, arguments)
    text = output if isinstance(output, str) else json.dumps(output)
    items.append({"type": "function_call_output", "call_id": call["id"], "output": text})
    return items


def _rejected(items: list[Any], turn: TurnResumed) -> list[Any]:
    """The items with the rejected call's output set to the shared rejection wording (the
    worker wrote the same text into the history; set here, it cannot drift from the others)."""
    if turn.name != APPROVE_TOOL_CALL:
        raise ValueError(f"turn of {turn.name!r} is no approval")
    output = rejection_message(json.loads(turn.response_json))
    for item in items:
        if item.get("type") == "function_call_output" and item["call_id"] == turn.tool_call_id:
            item["output"] = output
            return items
    items.append({"type": "function_call_output", "call_id": turn.tool_call_id, "output": output})
    return items
