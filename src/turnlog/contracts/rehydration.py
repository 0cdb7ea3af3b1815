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

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.messages import NOT_DISPATCHED, normalize_message
from turnlog.contracts.refusals import RefusalReason, refuse


class AskingRound(NamedTuple):
    """What rehydration needs to know of a checkpoint's messages: where its asking round is, the
    calls it reserved (id, name) and the call ids answered after it. The resume path can learn
    it from the encoded messages without decoding them (:mod:`turnlog.wire.resumed_bytes`)."""

    #: Index of the last assistant message with tool calls; -1 when there is none.
    position: int
    calls: tuple[tuple[str, str], ...]
    #: The ``tool_call_id`` of every tool message after the asking round.
    observed: frozenset[str]


def asking_round(messages: Sequence[Mapping[str, Any]]) -> AskingRound:
    """The asking round of ``messages``: the last assistant message that made any tool calls
    (the round the pause stopped). Same rule as ``messages.reserved_call_ids``, with the
    position and what came after it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls = tuple(
                (str(call.get("id", "")), str(call.get("name", "")))
                for call in message["tool_calls"]
            )
            observed = frozenset(
                str(m.get("tool_call_id"))
                for m in messages[index + 1 :]
                if m.get("role") == "tool" and m.get("tool_call_id")
            )
            return AskingRound(index, calls, observed)
    return AskingRound(-1, (), frozenset())


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
    found = asking_round(messages)
    added = continuation(
        checkpoint.checkpoint_id, found, answered_call_id, observation_text, leave_open=leave_open
    )
    rebuilt = [dict(m) for m in messages]
    if leave_open:
        asking = dict(rebuilt[found.position])
        asking["tool_calls"] = [
            {**call, "arguments": leave_open} if call.get("id") == answered_call_id else call
            for call in asking["tool_calls"]
        ]
        rebuilt[found.position] = normalize_message(asking)
    return (*rebuilt, *added)


def continuation(
    checkpoint_id: str,
    found: AskingRound,
    answered_call_id: str,
    observation_text: str,
    *,
    leave_open: str | None = None,
) -> tuple[dict[str, Any], ...]:
    """The messages rehydration appends after the checkpoint's own (see :func:`rehydrate`):
    the answer's tool message unless ``leave_open``, then "not dispatched" for every other
    reserved call without a result. An edit (``leave_open`` non-empty) also rewrites the asking
    round, which is :func:`rehydrate`'s part. Raises ``Refused(asking_round_missing)``."""
    if found.position < 0:
        raise refuse(
            RefusalReason.ASKING_ROUND_MISSING,
            f"checkpoint {checkpoint_id!r} holds no assistant message with tool calls",
        )
    names = dict(found.calls)
    if not answered_call_id or answered_call_id not in names:
        raise refuse(
            RefusalReason.ASKING_ROUND_MISSING,
            f"the asking round of checkpoint {checkpoint_id!r} did not reserve the "
            f"answered call {answered_call_id!r}",
        )
    observed = found.observed
    if answered_call_id in observed:
        raise refuse(
            RefusalReason.ASKING_ROUND_MISSING,
            f"call {answered_call_id!r} already has a result; its asking round is closed",
        )
    added = []
    if leave_open is None:
        added.append(_tool_message(answered_call_id, names[answered_call_id], observation_text))
    for call_id, name in names.items():
        if call_id and call_id != answered_call_id and call_id not in observed:
            added.append(_tool_message(call_id, name, NOT_DISPATCHED))
    return tuple(added)


def _tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    return normalize_message(
        {"role": "tool", "content": content, "tool_call_id": call_id, "name": name or None}
    )
