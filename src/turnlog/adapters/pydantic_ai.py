"""Pydantic AI: a run that ends in deferred tool requests -- approvals (a tool with
``requires_approval=True``) and questions (an external call, ``CallDeferred``, named after an
interaction such as ``ask_user``), in any mix -- becomes one durable pause, and the resumed turn
continues the run, exactly once, in any process (``pip install turnlog[pydantic-ai]``)::

    result = await agent.run(prompt)
    if isinstance(result.output, DeferredToolRequests):
        paused = await pause_run(tl, result, thread_id=..., run_id=..., session_id=...,
                                 scope_hash=...)      # one Paused per call
    ...                                               # any process, after the worker resumed it
    result = await continue_run(tl, token, agent)     # AlreadyContinued if it ran already

The run's messages travel as turnlog's role/content records (seed 000: the mapping is the
wire), so a process that never saw the pause rebuilds the history from the resumed turn alone.
:func:`continue_run` claims the resumed turn (``Turnlog.continue_turn``), runs the agent on the
history and ``DeferredToolResults`` (:func:`resume_arguments`) and says done: run twice, or by
two processes at once, the approved tool runs once and every other caller gets
``turnlog.AlreadyContinued``. An approved call's idempotency key reaches its tool as
``ctx.tool_call_metadata["idempotency_key"]``. A rejected call is denied with
:func:`~turnlog.adapters.rejection_message`, the wording the other adapters give the model; a
question's result is the answer as the resume worker rendered it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

try:
    from pydantic_ai import (
        Agent,
        DeferredToolRequests,
        DeferredToolResults,
        ToolApproved,
        ToolDenied,
    )
    from pydantic_ai.agent import AgentRunResult
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
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, EDIT, REJECT, approval_request
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.group import CallToPause
from turnlog.errors import PauseInvalid

__all__ = [
    "continue_run",
    "pause_deferred",
    "pause_deferred_calls",
    "pause_run",
    "resume_arguments",
    "to_messages",
    "to_records",
]


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


def to_messages(records: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    """Role/content records as Pydantic AI messages: a resumed turn's ``turn.history``, or the
    OpenAI-style dicts ``history_dicts(turn)`` gives. ``ValueError`` naming the record and
    what it lacks."""
    messages: list[ModelMessage] = []
    pending: list[ModelRequestPart] = []
    for index, record in enumerate(records):
        where = f"records[{index}]"
        role = record.get("role")
        content = record.get("content") or ""
        if not isinstance(content, str):
            raise ValueError(f"{where} has content that is not text")
        if role == "assistant":
            if pending:
                messages.append(ModelRequest(parts=pending))
                pending = []
            parts: list[ModelResponsePart] = []
            if content:
                parts.append(TextPart(content=content))
            for number, call in enumerate(record.get("tool_calls") or ()):
                call_id, name, arguments = call_fields(call, f"{where}.tool_calls[{number}]")
                parts.append(ToolCallPart(tool_name=name, args=arguments, tool_call_id=call_id))
            messages.append(ModelResponse(parts=parts))
        elif role == "system":
            pending.append(SystemPromptPart(content=content))
        elif role == "user":
            pending.append(UserPromptPart(content=content))
        elif role == "tool":
            pending.append(
                ToolReturnPart(
                    tool_name=record.get("name") or "",
                    content=content,
                    tool_call_id=record.get("tool_call_id") or "",
                )
            )
        else:
            raise ValueError(f"{where} has role {role!r}, not system, user, assistant or tool")
    if pending:
        messages.append(ModelRequest(parts=pending))
    return messages


async def pause_run(
    tl: Turnlog,
    result: AgentRunResult[Any],
    *,
    thread_id: str,
    run_id: str | None = None,
    session_id: str | None = None,
    scope_hash: str,
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> tuple[Paused, ...]:
    """Pause everything the run deferred, once: each approval as ``approve_tool_call``, each
    external call named after a registered interaction (``ask_user``: its arguments are the
    questions) as that interaction. One ``Paused`` per call, in the order the model made them,
    each answered on its own; the turn resumes once, when the last is answered. The run's
    messages (``result.all_messages()``) are the checkpoint, with the asking round once.
    :class:`~turnlog.errors.PauseInvalid` for a run that deferred nothing, or an external call
    no interaction is registered for -- before anything is written. ``run_id`` and
    ``session_id`` default to the thread id (one run per thread); ``scope_hash`` binds the
    answer to your tenant or scope."""
    if not isinstance(result.output, DeferredToolRequests):
        raise PauseInvalid(
            "result", "the run ended without deferred tool requests; nothing to pause"
        )
    return await _pause(
        tl, result.output, result.all_messages(), thread_id=thread_id,
        run_id=run_id or thread_id, session_id=session_id or thread_id, scope_hash=scope_hash,
        prompt=prompt, ttl=ttl,
    )  # fmt: skip


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
    """Record the run's one deferred call (:func:`pause_run` pauses any number) as a pause,
    its history (``result.all_messages()``) as the checkpoint."""
    deferred = [*requests.approvals, *requests.calls]
    if len(deferred) != 1:
        raise PauseInvalid(
            "requests",
            f"this run deferred {len(deferred)} calls "
            f"({', '.join(c.tool_name for c in deferred)}); nothing was paused. "
            "Pause them once, for all of them, with pause_run(), which returns "
            "one Paused per call",
        )
    (paused,) = await _pause(
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
    """:func:`pause_run` on the run's requests and messages given apart."""
    return await _pause(
        tl, requests, messages, thread_id=thread_id, run_id=run_id, session_id=session_id,
        scope_hash=scope_hash, prompt=prompt, ttl=ttl,
    )  # fmt: skip


async def _pause(
    tl: Turnlog,
    requests: DeferredToolRequests,
    messages: Sequence[ModelMessage],
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    prompt: str,
    ttl: timedelta | float | None,
) -> tuple[Paused, ...]:
    require_signing_key(tl)
    to_pause: list[CallToPause] = []
    reserved: list[ReservedCall] = []
    for call in requests.approvals:
        arguments = call.args_as_dict()
        reserved.append(ReservedCall(call.tool_call_id, call.tool_name, arguments))
        to_pause.append(
            CallToPause(
                call.tool_call_id, APPROVE_TOOL_CALL, approval_request(call.tool_name, arguments)
            )
        )
    for call in requests.calls:
        if call.tool_name not in tl.interactions or call.tool_name == APPROVE_TOOL_CALL:
            raise PauseInvalid(
                "requests.calls",
                f"external call {call.tool_name!r} names no interaction registered here "
                f"({', '.join(tl.interactions.names)}); nothing was paused. Name the tool "
                "after one (ask_user asks questions with options), or run it yourself: its "
                "result goes in DeferredToolResults(calls=...) of the next run",
            )
        arguments = call.args_as_dict()
        reserved.append(ReservedCall(call.tool_call_id, call.tool_name, arguments))
        to_pause.append(CallToPause(call.tool_call_id, call.tool_name, arguments))
    if not to_pause:
        raise PauseInvalid("requests", "this run deferred no call; nothing was paused")
    first = to_pause[0]
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"deferred-{first.tool_call_id}",
        scope_hash=scope_hash,
        tool_call_id=first.tool_call_id,
        name=first.interaction or APPROVE_TOOL_CALL,
        prompt=prompt,
        messages=with_asking_round(to_records(messages), reserved),
        created_at=utc_now(),
    )
    if len(to_pause) == 1:
        return (
            await tl.pause(checkpoint, request=first.request, interaction=first.interaction,
                           ttl=ttl),
        )  # fmt: skip
    return await tl.pause_calls(checkpoint, to_pause, ttl=ttl)


def _approval(decision: dict[str, Any]) -> bool | ToolApproved | ToolDenied:
    if decision["decision"] == EDIT:
        return ToolApproved(override_args=json.loads(decision["arguments_json"]))
    if decision["decision"] == REJECT:
        return ToolDenied(rejection_message(decision))
    return True


def resume_arguments(
    turn: TurnResumed, *, key_for: Callable[[str], str] | None = None
) -> tuple[list[ModelMessage], DeferredToolResults]:
    """``(message_history, deferred_tool_results)`` for ``agent.run`` from a resumed turn: the
    history up to the asking round, and every call's result -- an approval's decision (a
    rejection as ``ToolDenied(rejection_message(...))``, what every adapter's model reads), a
    question's answer as the resume worker rendered it. ``key_for`` (a continuation's
    ``key_for``) gives each approved call its idempotency key, as
    ``ctx.tool_call_metadata["idempotency_key"]`` in the tool."""
    history = list(turn.history)
    asking = max(
        (i for i, m in enumerate(history) if m["role"] == "assistant" and m.get("tool_calls")),
        default=None,
    )
    if asking is None:
        raise ValueError(f"turn {turn.token_id} has no asking round to continue")
    results = DeferredToolResults()
    for answer in answers_of(turn):
        call_id = str(answer["tool_call_id"])
        if answer["name"] != APPROVE_TOOL_CALL:
            observed = observation_of(turn, call_id)
            results.calls[call_id] = (
                observed if observed is not None else json.loads(str(answer["response_json"]))
            )
            continue
        approval = _approval(json.loads(str(answer["response_json"])))
        results.approvals[call_id] = approval
        if key_for is not None and not isinstance(approval, ToolDenied):
            results.metadata[call_id] = {"idempotency_key": key_for(call_id)}
    return to_messages(history[: asking + 1]), results


async def continue_run(
    tl: Turnlog,
    token: str,
    agent: Agent[Any, Any],
    *,
    retake: bool = False,
    timeout: float = 30.0,
    **run: Any,
) -> AgentRunResult[Any]:
    """Continue the paused run of ``token`` (any call's token of the pause), exactly once: claim
    its resumed turn (``tl.continue_turn``; waits up to ``timeout`` for it), run ``agent`` on
    its history and results (``run`` passes ``deps=`` and the rest to ``agent.run``), and say
    done. Another caller of the same turn -- a retried job, a second replica -- gets
    ``turnlog.AlreadyContinued`` naming who continued it, and runs nothing. A process that died
    after its claim, before done, leaves the claim taken: ``retake=True`` takes it again (the
    tool may have run: each approved call has the same idempotency key as before)."""
    async with tl.continue_turn(token, timeout=timeout, retake=retake) as claim:
        history, results = resume_arguments(claim.turn, key_for=claim.key_for)
        return await agent.run(message_history=history, deferred_tool_results=results, **run)
