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
the model. A run stopped for several approvals (parallel tool calls) pauses once for all of
them with :func:`pause_approvals`; each call is answered on its own, the turn resumes once,
and :func:`resume_input` gives every call its output, in the order of the calls.
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

from turnlog.adapters import approval_answers, rejection_message
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_calls
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.group import CallToPause
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
    """Record the run's one pending tool approval as an ``approve_tool_call`` pause. A run
    stopped for several is paused by :func:`pause_approvals`, once for all of them."""
    _refuse_others(result)
    if len(result.interruptions) != 1:
        raise PauseInvalid(
            "result.interruptions",
            f"this run stopped for {len(result.interruptions)} approvals ({_names(result)}); "
            "nothing was paused. Pause them once, for all of them, with pause_approvals(), "
            "which returns one Paused per call",
        )
    (paused,) = await pause_approvals(
        tl, result, thread_id=thread_id, run_id=run_id, session_id=session_id,
        scope_hash=scope_hash, prompt=prompt, ttl=ttl,
    )  # fmt: skip
    return paused


async def pause_approvals(
    tl: Turnlog,
    result: RunResult,
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> tuple[Paused, ...]:
    """Record every pending tool approval of the run as one pause: one ``Paused`` per call,
    in the order the model made them, each answered on its own; the turn resumes once, when
    the last is answered. One approval is a pause of one call, as :func:`pause_approval`
    records it."""
    _refuse_others(result)
    if not result.interruptions:
        raise PauseInvalid("result.interruptions", "the run is not interrupted; nothing to pause")
    calls = [_call_of(item.raw_item) for item in result.interruptions]
    first_id, first_name, first_arguments = calls[0]
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"approval-{first_id}",
        scope_hash=scope_hash,
        tool_call_id=first_id,
        name=APPROVE_TOOL_CALL,
        prompt=prompt,
        messages=tuple(to_records(result.to_input_list())),
        created_at=utc_now(),
    )
    if len(calls) == 1:
        request = approval_request(first_name, json.loads(first_arguments or "{}"))
        return (
            await tl.pause(checkpoint, request=request, interaction=APPROVE_TOOL_CALL, ttl=ttl),
        )
    to_pause = [
        CallToPause(
            call_id, APPROVE_TOOL_CALL, approval_request(name, json.loads(arguments or "{}"))
        )
        for call_id, name, arguments in calls
    ]
    return await tl.pause_calls(checkpoint, to_pause, ttl=ttl)


def _names(result: RunResult) -> str:
    return ", ".join(str(getattr(i, "tool_name", None) or "?") for i in result.interruptions)


def _refuse_others(result: RunResult) -> None:
    if not all(isinstance(i, ToolApprovalItem) for i in result.interruptions):
        raise PauseInvalid(
            "result.interruptions",
            f"this run stopped for {_names(result)}, not only tool approvals; nothing was "
            "paused: only ToolApprovalItem interruptions become a pause",
        )


def _call_of(raw: Any) -> tuple[str, str, str]:
    if isinstance(raw, Mapping):
        return str(raw["call_id"]), str(raw["name"]), str(raw.get("arguments") or "{}")
    return str(raw.call_id), str(raw.name), str(raw.arguments or "{}")


async def resume_input(turn: TurnResumed, agent: Agent[Any], *, context: Any = None) -> list[Any]:
    """The input continuing the run: the resumed history, and, for each call the person
    decided on -- one, or every call of a pause of several, in the order the model made them
    -- its output: from the agent's own tool run with the approved (or edited) arguments, or
    for a rejected call :func:`~turnlog.adapters.rejection_message`, the wording every adapter
    gives the model."""
    answers = approval_answers(turn)
    items = to_items(turn.history)
    approved = {call["id"]: call for call in approved_calls(turn)}
    outputs: dict[str, str] = {}
    for answer in answers:  # in the order of the calls
        call_id = str(answer["tool_call_id"])
        call = approved.get(call_id)
        if call is None:
            outputs[call_id] = rejection_message(json.loads(str(answer["response_json"])))
        else:
            outputs[call_id] = await _run(agent, call, context)
    for item in items:  # the worker wrote the rejection text too; set here, it cannot drift
        if item.get("type") == "function_call_output" and item["call_id"] in outputs:
            item["output"] = outputs.pop(item["call_id"])
    items.extend(
        {"type": "function_call_output", "call_id": call_id, "output": output}
        for call_id, output in outputs.items()
    )
    return items


async def _run(agent: Agent[Any], call: Mapping[str, Any], context: Any) -> str:
    """The output of the agent's own tool run on an approved call, as the SDK runs it."""
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
    return output if isinstance(output, str) else json.dumps(output)
