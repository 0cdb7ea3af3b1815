"""The OpenAI Agents SDK: a run interrupted for tool approvals (``needs_approval=True``) --
approvals, and questions (a question tool named after an interaction, such as ``ask_user``,
with ``needs_approval=True``: its arguments are the questions), in any mix -- becomes one
durable pause, and the resumed turn continues the run, exactly once, in any process
(``pip install turnlog[openai-agents]``)::

    result = await Runner.run(agent, prompt)
    if result.interruptions:
        paused = await pause_run(tl, result, thread_id=..., run_id=..., session_id=...,
                                 scope_hash=...)      # one Paused per call
    ...                                               # any process, after the worker resumed it
    result = await continue_run(tl, token, agent)     # AlreadyContinued if it ran already

The pause keeps the run's items (``result.to_input_list()``) as turnlog's role/content
records, so a process that never saw the pause rebuilds the input from the resumed turn alone
and nothing of the SDK's -- not its ``RunState``, which the SDK can serialise
(``result.to_state().to_json()``) but which would then have to be stored somewhere -- is kept
beside the log. :func:`continue_run` claims the resumed turn (``Turnlog.continue_turn``), runs
each approved call (with the person's arguments when edited) through the agent's own tool, as
the SDK runs an approved call, gives a rejected call :func:`~turnlog.adapters.rejection_message`
and a question its answer as the resume worker rendered it, runs the agent on, and says done:
run twice, or by two processes at once, the approved tool runs once and every other caller
gets ``turnlog.AlreadyContinued``. The tool reads its call's idempotency key with
:func:`idempotency_key`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

try:
    from agents import Agent, FunctionTool, Runner, RunResult, ToolApprovalItem
    from agents.tool_context import ToolContext
except ImportError as exc:  # the optional extra is not installed
    needs = "turnlog.adapters.openai_agents needs `pip install turnlog[openai-agents]`"
    raise ImportError(needs) from exc

from turnlog.adapters import (
    answers_of,
    call_fields,
    observation_of,
    rejection_message,
    require_signing_key,
    with_asking_round,
)
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_calls
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.group import CallToPause
from turnlog.errors import PauseInvalid

__all__ = [
    "continue_run",
    "idempotency_key",
    "pause_approval",
    "pause_approvals",
    "pause_run",
    "resume_input",
    "to_items",
    "to_records",
]


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
    """Role/content records as SDK input items: a resumed turn's ``turn.history``, or the
    OpenAI-style dicts ``history_dicts(turn)`` gives. ``ValueError`` naming the record and
    what it lacks."""
    items: list[Any] = []
    for index, record in enumerate(records):
        where = f"records[{index}]"
        role = record.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"{where} has role {role!r}, not system, user, assistant or tool")
        content = record.get("content") or ""
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": record.get("tool_call_id") or "",
                    "output": content,
                }
            )
            continue
        if content or role != "assistant":
            items.append({"role": role, "content": content})
        for number, call in enumerate(record.get("tool_calls") or ()):
            call_id, name, arguments = call_fields(call, f"{where}.tool_calls[{number}]")
            items.append(
                {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
            )
    return items


async def pause_run(
    tl: Turnlog,
    result: RunResult,
    *,
    thread_id: str,
    run_id: str | None = None,
    session_id: str | None = None,
    scope_hash: str,
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> tuple[Paused, ...]:
    """Pause everything the run stopped for, once: each tool approval as ``approve_tool_call``,
    each question tool (a tool named after a registered interaction, such as ``ask_user``) as
    that interaction, its arguments the request. One ``Paused`` per call, in the order the
    model made them, each answered on its own; the turn resumes once, when the last is
    answered. The run's items are the checkpoint, the asking round in them once.
    :class:`~turnlog.errors.PauseInvalid` for a run that is not interrupted or stopped for
    something else than a tool approval -- before anything is written. ``run_id`` and
    ``session_id`` default to the thread id (one run per thread); ``scope_hash`` binds the
    answer to your tenant or scope."""
    require_signing_key(tl)
    _refuse_others(result)
    if not result.interruptions:
        raise PauseInvalid("result.interruptions", "the run is not interrupted; nothing to pause")
    to_pause: list[CallToPause] = []
    reserved: list[ReservedCall] = []
    for item in result.interruptions:
        call_id, name, text = _call_of(item.raw_item)
        arguments = json.loads(text or "{}")
        reserved.append(ReservedCall(call_id, name, arguments))
        if name in tl.interactions and name != APPROVE_TOOL_CALL:
            to_pause.append(CallToPause(call_id, name, arguments))
        else:
            to_pause.append(
                CallToPause(call_id, APPROVE_TOOL_CALL, approval_request(name, arguments))
            )
    first = to_pause[0]
    checkpoint = TurnCheckpoint(
        run_id=run_id or thread_id,
        session_id=session_id or thread_id,
        thread_id=thread_id,
        checkpoint_id=f"interrupted-{first.tool_call_id}",
        scope_hash=scope_hash,
        tool_call_id=first.tool_call_id,
        name=first.interaction or APPROVE_TOOL_CALL,
        prompt=prompt,
        messages=with_asking_round(to_records(result.to_input_list()), reserved),
        created_at=utc_now(),
    )
    if len(to_pause) == 1:
        return (
            await tl.pause(checkpoint, request=first.request, interaction=first.interaction,
                           ttl=ttl),
        )  # fmt: skip
    return await tl.pause_calls(checkpoint, to_pause, ttl=ttl)


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
    """Record the run's one interruption as a pause (:func:`pause_run` pauses any number)."""
    _refuse_others(result)
    if len(result.interruptions) != 1:
        raise PauseInvalid(
            "result.interruptions",
            f"this run stopped for {len(result.interruptions)} approvals ({_names(result)}); "
            "nothing was paused. Pause them once, for all of them, with pause_run(), "
            "which returns one Paused per call",
        )
    (paused,) = await pause_run(
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
    """The former name of :func:`pause_run`."""
    return await pause_run(
        tl, result, thread_id=thread_id, run_id=run_id, session_id=session_id,
        scope_hash=scope_hash, prompt=prompt, ttl=ttl,
    )  # fmt: skip


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


class KeyedToolContext(ToolContext[Any]):
    """The tool context an approved call runs with on resume: the SDK's, and the call's
    idempotency key (read it with :func:`idempotency_key`)."""

    idempotency_key: str = ""


def idempotency_key(context: Any) -> str | None:
    """In a tool, the idempotency key of the approved call being run by :func:`continue_run`
    (``"<token id>:<call id>"``, the same on a retake), or ``None`` when the tool runs
    otherwise. A tool that honours it (a payment's idempotency key, a deployment id) cannot
    run twice even across a crash between the claim and done."""
    key = getattr(context, "idempotency_key", None)
    return key if isinstance(key, str) and key else None


async def resume_input(
    turn: TurnResumed,
    agent: Agent[Any],
    *,
    context: Any = None,
    key_for: Callable[[str], str] | None = None,
) -> list[Any]:
    """The input continuing the run: the resumed history, and, for each call the person
    answered -- one, or every call of a pause of several, in the order the model made them
    -- its output: from the agent's own tool run with the approved (or edited) arguments, for
    a rejected call :func:`~turnlog.adapters.rejection_message` (the wording every adapter
    gives the model), for a question its answer as the resume worker rendered it. ``key_for``
    (a continuation's) gives each approved call's tool its idempotency key."""
    items = to_items(turn.history)
    approved = {call["id"]: call for call in approved_calls(turn)}
    outputs: dict[str, str] = {}
    for answer in answers_of(turn):  # in the order of the calls
        call_id = str(answer["tool_call_id"])
        call = approved.get(call_id)
        if call is not None:
            key = key_for(call_id) if key_for is not None else ""
            outputs[call_id] = await _run(agent, call, context, key)
        elif answer["name"] == APPROVE_TOOL_CALL:
            outputs[call_id] = rejection_message(json.loads(str(answer["response_json"])))
        else:
            observed = observation_of(turn, call_id)
            outputs[call_id] = observed if observed is not None else str(answer["response_json"])
    for item in items:  # the worker wrote the rejection text too; set here, it cannot drift
        if item.get("type") == "function_call_output" and item["call_id"] in outputs:
            item["output"] = outputs.pop(item["call_id"])
    items.extend(
        {"type": "function_call_output", "call_id": call_id, "output": output}
        for call_id, output in outputs.items()
    )
    return items


async def _run(agent: Agent[Any], call: Mapping[str, Any], context: Any, key: str) -> str:
    """The output of the agent's own tool run on an approved call, as the SDK runs it."""
    tool = next(
        (t for t in agent.tools if isinstance(t, FunctionTool) and t.name == call["name"]), None
    )
    if tool is None:
        raise ValueError(f"agent {agent.name!r} has no function tool {call['name']!r}")
    arguments = json.dumps(call["arguments"])
    tool_context = KeyedToolContext(
        context, tool_name=call["name"], tool_call_id=call["id"], tool_arguments=arguments
    )
    tool_context.idempotency_key = key
    output = await tool.on_invoke_tool(tool_context, arguments)
    return output if isinstance(output, str) else json.dumps(output)


async def continue_run(
    tl: Turnlog,
    token: str,
    agent: Agent[Any],
    *,
    context: Any = None,
    retake: bool = False,
    timeout: float = 30.0,
    **run: Any,
) -> RunResult:
    """Continue the paused run of ``token`` (any call's token of the pause), exactly once: claim
    its resumed turn (``tl.continue_turn``; waits up to ``timeout`` for it), build the input
    (:func:`resume_input`: the approved calls run through the agent's tools, each with its
    idempotency key), ``Runner.run`` the agent on it (``context`` and ``run`` -- ``run_config=``
    and the rest -- passed on), and say done. Another caller of the same turn gets
    ``turnlog.AlreadyContinued`` naming who continued it, and runs nothing; ``retake=True``
    takes a claim whose holder died before done (the tool may have run: it gets the same
    idempotency key as before)."""
    async with tl.continue_turn(token, timeout=timeout, retake=retake) as claim:
        items = await resume_input(claim.turn, agent, context=context, key_for=claim.key_for)
        return await Runner.run(agent, items, context=context, **run)
