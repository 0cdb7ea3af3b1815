"""Rebuilding a paused turn's conversation from its checkpoint, the answer folded in.

Only the recorded checkpoint is read, so a worker that never saw the pause can continue it. The
answer becomes the tool message of the call the turn stopped at: the model asked for that call and
is waiting for its result, and anything else (a new user message, say) would leave the call without
a result, a transcript strict providers reject. Every other call of that asking round never ran, so
each gets an explicit "not dispatched" result for the same reason.

A checkpoint whose asking round is missing -- no assistant message with tool calls, or one that
does not hold the answered call -- is refused as ``asking_round_missing`` (step 5): the recorded
turn exists but cannot be continued, and a result for a call the model never made is refused by
providers just the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.messages import NOT_DISPATCHED, normalize_message
from turnlog.contracts.refusals import RefusalReason, refuse


def _asking_round(messages: tuple[Mapping[str, Any], ...]) -> tuple[int, list[Mapping[str, Any]]]:
    """The index and tool calls of the last assistant message that made any (the round the pause
    stopped), or ``(-1, [])``. Same rule as ``messages.reserved_call_ids``, with the position."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "assistant" and message.get("tool_calls"):
            return index, list(message["tool_calls"])
    return -1, []


def rehydrate(
    checkpoint: TurnCheckpoint,
    answered_call_id: str,
    observation_text: str,
    *,
    leave_open: str | None = None,
) -> tuple[dict[str, Any], ...]:
    """The checkpoint's messages, then the answer on ``answered_call_id``, then "not dispatched"
    for every other call the asking round reserved.

    ``leave_open`` (an approved tool call) gives the answered call no result: the continuing
    agent runs it. Non-empty, it is the JSON text of the arguments the call runs with, written
    into the asking round in place of the model's (an edit).

    Calls that already have a result after the asking round keep it and get nothing more: two
    results for one call are as invalid as none. Raises ``Refused(asking_round_missing)``.
    """
    messages = checkpoint.messages
    position, calls = _asking_round(messages)
    if position < 0:
        raise refuse(
            RefusalReason.ASKING_ROUND_MISSING,
            f"checkpoint {checkpoint.checkpoint_id!r} holds no assistant message with tool calls",
        )
    names = {str(call.get("id", "")): str(call.get("name", "")) for call in calls}
    if not answered_call_id or answered_call_id not in names:
        raise refuse(
            RefusalReason.ASKING_ROUND_MISSING,
            f"the asking round of checkpoint {checkpoint.checkpoint_id!r} did not reserve the "
            f"answered call {answered_call_id!r}",
        )
    observed = {
        str(m.get("tool_call_id"))
        for m in messages[position + 1 :]
        if m.get("role") == "tool" and m.get("tool_call_id")
    }
    if answered_call_id in observed:
        raise refuse(
            RefusalReason.ASKING_ROUND_MISSING,
            f"call {answered_call_id!r} already has a result; its asking round is closed",
        )
    rebuilt = [dict(m) for m in messages]
    if leave_open is None:
        rebuilt.append(_tool_message(answered_call_id, names[answered_call_id], observation_text))
    elif leave_open:
        asking = dict(rebuilt[position])
        asking["tool_calls"] = [
            {**call, "arguments": leave_open} if call.get("id") == answered_call_id else call
            for call in asking["tool_calls"]
        ]
        rebuilt[position] = normalize_message(asking)
    for call_id, name in names.items():
        if call_id and call_id != answered_call_id and call_id not in observed:
            rebuilt.append(_tool_message(call_id, name, NOT_DISPATCHED))
    return tuple(rebuilt)


def _tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    return normalize_message(
        {"role": "tool", "content": content, "tool_call_id": call_id, "name": name or None}
    )
