"""Approving a tool call: the person approves it, edits its arguments, or rejects it with a message.

The most common human-in-the-loop step: the model asked for a call with side effects (deploy,
send, pay) and a person must say yes before it runs. The pause's request is the exact call --
``{"tool": name, "arguments": {...}}`` -- and the token carries the tool name and the SHA-256 of
the arguments' canonical JSON as claims. The response names the same tool and hash, so an
approval is bound to the call it was given for: replayed onto a pause whose call has other
arguments (the same tool, a bigger amount) it is refused as ``approval_mismatch`` -- "yes" to
one call must never run another.

What the continuing turn sees (seed 003's rehydration, per decision):

- ``approve``: the asking round's call stays open with its arguments -- the agent runs it;
- ``edit``: the call stays open with the person's arguments in place of the model's, so the
  history shows the call that will run, not the one that was refused;
- ``reject``: the call's tool message is the rejection and the person's message -- the model
  reads why, and nothing runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from turnlog.contracts.events import TurnResumed
from turnlog.contracts.refusals import Refusal, RefusalReason

APPROVE_TOOL_CALL: Final = "approve_tool_call"

APPROVE: Final = "approve"
EDIT: Final = "edit"
REJECT: Final = "reject"

#: ``{"decision": "approve"|"edit"|"reject", "tool": str, "arguments_hash": str,
#: "arguments_json": str | null (the edited arguments), "message": str | null}``.
APPROVE_TOOL_CALL_RESPONSE_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "record",
    "name": "ApproveToolCallResponse",
    "namespace": "turnlog.interactions",
    "fields": [
        {
            "name": "decision",
            "type": {
                "type": "enum",
                "name": "ApprovalDecision",
                "symbols": [APPROVE, EDIT, REJECT],
            },
        },
        {"name": "tool", "type": "string"},
        {"name": "arguments_hash", "type": "string"},
        {"name": "arguments_json", "type": ["null", "string"], "default": None},
        {"name": "message", "type": ["null", "string"], "default": None},
    ],
}


def arguments_hash(arguments: Any) -> str:
    """SHA-256 (hex) of the arguments' canonical JSON (keys sorted, no spaces, UTF-8)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def request_binding(request_json: str) -> tuple[str, str]:
    """``(tool, arguments_hash)`` of an approval request, or ``ValueError`` saying what is wrong:
    a pause that names no tool could only ever be approved blind."""
    try:
        request = json.loads(request_json)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"an approval request must be JSON: {exc}") from None
    if not isinstance(request, dict) or set(request) != {"tool", "arguments"}:
        raise ValueError('an approval request is {"tool": name, "arguments": {...}}')
    tool = request["tool"]
    if not isinstance(tool, str) or not tool:
        raise ValueError("an approval request's tool must be a non-empty name")
    return tool, arguments_hash(request["arguments"])


def check_call(messages: Any, call_id: str, tool: str, hashed: str) -> None:
    """``ValueError`` unless the last asking round reserved ``call_id`` as ``tool`` with
    arguments hashing to ``hashed``: the person must be shown the call that will run."""
    for message in reversed(tuple(messages)):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                if call.get("id") != call_id:
                    continue
                try:
                    arguments = json.loads(call.get("arguments") or "{}")
                except (ValueError, RecursionError):
                    arguments = call.get("arguments")
                if call.get("name") != tool or arguments_hash(arguments) != hashed:
                    raise ValueError(
                        f"the approval request is not call {call_id!r} of the asking round "
                        f"({call.get('name')!r} with its arguments)"
                    )
                return
            break
    raise ValueError(f"the asking round reserved no call {call_id!r} to approve")


def approval_request(tool: str, arguments: Any) -> dict[str, Any]:
    """The request to pause with: ``tl.pause(cp, request=approval_request("deploy", args),
    interaction=APPROVE_TOOL_CALL)``."""
    return {"tool": tool, "arguments": arguments}


def approve(tool: str, arguments: Any, *, message: str | None = None) -> dict[str, Any]:
    """The response approving exactly ``tool(arguments)``, the call the person was shown."""
    return _response(APPROVE, tool, arguments, None, message)


def edit(tool: str, arguments: Any, edited: Any, *, message: str | None = None) -> dict[str, Any]:
    """The response running ``tool(edited)`` instead of the shown ``tool(arguments)``."""
    return _response(EDIT, tool, arguments, json.dumps(edited, sort_keys=True), message)


def reject(tool: str, arguments: Any, message: str) -> dict[str, Any]:
    """The response refusing ``tool(arguments)``; ``message`` is what the model reads."""
    return _response(REJECT, tool, arguments, None, message)


def _response(
    decision: str, tool: str, arguments: Any, edited: str | None, message: str | None
) -> dict[str, Any]:
    return {
        "decision": decision,
        "tool": tool,
        "arguments_hash": arguments_hash(arguments),
        "arguments_json": edited,
        "message": message,
    }


def approval_mismatch(response: Mapping[str, Any], tool: str, hashed: str) -> Refusal | None:
    """``approval_mismatch`` when the response approves another call than the paused one, or
    ``response_invalid`` when an edit carries no arguments (or a non-edit carries some)."""
    if response["tool"] != tool or response["arguments_hash"] != hashed:
        # The place, never the values: the tool and hash the answer states are its own text.
        which = "tool" if response["tool"] != tool else "arguments_hash"
        return Refusal(
            RefusalReason.APPROVAL_MISMATCH,
            f"{which}: the answer decides on another call than the pause asked about",
        )
    edited = response.get("arguments_json")
    if (response["decision"] == EDIT) != (edited is not None):
        return Refusal(
            RefusalReason.RESPONSE_INVALID,
            "arguments_json is given with an edit, and only with an edit",
        )
    if edited is not None:
        try:
            json.loads(edited)
        except (ValueError, RecursionError) as exc:
            return Refusal(RefusalReason.RESPONSE_INVALID, f"arguments_json is not JSON: {exc}")
    return None


def approved_calls(turn: TurnResumed) -> tuple[dict[str, Any], ...]:
    """Every call to run now -- ``{"id", "name", "arguments"}`` each (arguments as a value,
    edits applied) -- in the order the model made them, for a resumed turn of one call or of
    several (``Turnlog.pause_calls``): the approved and edited calls; a rejected call, a
    question and a call that waited on nobody are left out (their results are in the history).
    For a turn of one call it is ``approved_call`` as a tuple of none or one."""
    if not turn.answers:
        one = approved_call(turn)
        return () if one is None else (one,)
    approved = {
        str(answer["tool_call_id"])
        for answer in turn.answers
        if answer["name"] == APPROVE_TOOL_CALL
        and json.loads(str(answer["response_json"]))["decision"] != REJECT
    }
    for message in reversed(turn.history):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            return tuple(
                {
                    "id": call["id"],
                    "name": call["name"],
                    "arguments": json.loads(call.get("arguments") or "{}"),
                }
                for call in message["tool_calls"]
                if call.get("id") in approved
            )
    return ()


def render_approval(response: Any) -> str:
    """The tool message of a rejected call (an approved or edited call is left to run)."""
    decision = response["decision"]
    text = {
        APPROVE: "The person approved this call.",
        EDIT: "The person approved this call with edited arguments.",
        REJECT: "The person rejected this call; it was not run.",
    }[decision]
    if response.get("message"):
        text += f" Their message: {json.dumps(response['message'], ensure_ascii=False)}"
    return text


def approved_arguments(response: Mapping[str, Any]) -> str | None:
    """The arguments (JSON text) the call runs with: ``None`` for a rejection, the edited ones
    for an edit, ``""`` (keep the model's) for a plain approval."""
    if response["decision"] == REJECT:
        return None
    edited = response.get("arguments_json")
    return edited if isinstance(edited, str) else ""


def approved_call(turn: TurnResumed) -> dict[str, Any] | None:
    """The call to run now -- ``{"id", "name", "arguments"}`` (arguments as a value, edits
    applied) -- for a resumed approval; ``None`` when the person rejected it (the history then
    holds the rejection as the call's result) or the turn is no approval."""
    if turn.name != APPROVE_TOOL_CALL or json.loads(turn.response_json)["decision"] == REJECT:
        return None
    for message in reversed(turn.history):
        for call in message.get("tool_calls") or ():
            if call.get("id") == turn.tool_call_id:
                return {
                    "id": call["id"],
                    "name": call["name"],
                    "arguments": json.loads(call.get("arguments") or "{}"),
                }
    return None
