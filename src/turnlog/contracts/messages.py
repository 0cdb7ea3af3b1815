"""Messages as plain mappings: the wire form of a conversation.

A checkpoint must outlive the classes of whatever agent framework produced it, so a message is
kept as a mapping with a fixed vocabulary -- ``role``, ``content``, ``tool_calls`` (each ``id``,
``name``, ``arguments`` as JSON text), ``tool_call_id``, ``name`` -- and converted at the edges.
Pickling an adopter's object instead would tie every paused run to an importable class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})

#: The observation given to every call the asking round reserved but never ran.
NOT_DISPATCHED = "not dispatched: the turn paused for a person's answer before this call ran"


def tool_call(call_id: str, name: str, arguments: Any = None) -> dict[str, str]:
    """One tool call in wire form; ``arguments`` may be JSON text or a JSON-able value."""
    if arguments is None:
        text = "{}"
    elif isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, separators=(",", ":"), sort_keys=True)
    return {"id": str(call_id), "name": str(name), "arguments": text}


def normalize_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical mapping of one message, or ``ValueError`` naming what is wrong.

    Every key is present (``None`` where absent) so that two equal messages encode to the same
    bytes whatever the caller left out.
    """
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"a message role must be one of {sorted(ROLES)}, got {role!r}")
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise ValueError(f"message content must be text, got {type(content).__name__}")
    calls_in = message.get("tool_calls") or ()
    if not isinstance(calls_in, list | tuple):
        raise ValueError("a message's tool_calls must be a list")
    calls = []
    for call in calls_in:
        if not isinstance(call, Mapping):
            raise ValueError("each tool call must be a mapping with id, name and arguments")
        calls.append(tool_call(call.get("id", ""), call.get("name", ""), call.get("arguments")))
    tool_call_id = message.get("tool_call_id")
    name = message.get("name")
    return {
        "role": role,
        "content": content,
        "tool_calls": calls,
        "tool_call_id": None if tool_call_id is None else str(tool_call_id),
        "name": None if name is None else str(name),
    }


def reserved_call_ids(
    messages: tuple[Mapping[str, Any], ...] | list[Mapping[str, Any]],
) -> list[str]:
    """The call ids of the asking round: the tool calls of the last assistant message that has any.

    That round is the one the pause stopped; its calls are the ones a provider will expect to see
    answered when the conversation continues.
    """
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            return [str(call.get("id", "")) for call in message["tool_calls"]]
    return []
