"""Framework adapters, each an optional extra: they map a framework's own pause and resume onto
turnlog's, so an agent keeps its framework and gains a durable, exactly-once pause.

Each adapter has the same two calls, framework-native objects in and out:

- ``pause_run(tl, result, ...)`` pauses whatever the run is waiting on -- any mix of approvals
  and questions (an interaction such as ``ask_user``) -- once, and returns one ``Paused`` per
  call;
- ``continue_run(tl, token, ...)`` claims the resumed turn (``Turnlog.continue_turn``: run twice,
  or by two processes at once, the continuation happens once and every other caller gets
  ``turnlog.AlreadyContinued``), continues the run with every answer folded in, hands each
  approved call its idempotency key, says done, and returns what the framework returns.

- :mod:`turnlog.adapters.langgraph` (``pip install turnlog[langgraph]``): ``interrupt()``.
- :mod:`turnlog.adapters.pydantic_ai` (``pip install turnlog[pydantic-ai]``): deferred tool
  requests, approvals and external calls.
- :mod:`turnlog.adapters.openai_agents` (``pip install turnlog[openai-agents]``): a run's
  interruptions, tool approvals and question tools.

What the three share lives here, so an agent reads the same thing whichever framework runs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, REJECT, render_approval
from turnlog.contracts.checkpoint import ReservedCall, captured_messages
from turnlog.contracts.messages import normalize_message
from turnlog.errors import ConfigurationError

if TYPE_CHECKING:
    from turnlog.api import Turnlog
    from turnlog.contracts.events import TurnResumed

__all__ = [
    "answers_of",
    "approval_answers",
    "call_fields",
    "observation_of",
    "rejection_message",
    "require_signing_key",
    "with_asking_round",
]


def answers_of(turn: TurnResumed) -> tuple[Mapping[str, Any], ...]:
    """Every call's answer of a resumed turn, in the order of the calls -- the one call of a
    single pause, or each call of a pause of several (``turn.answers``) -- each with
    ``tool_call_id``, ``interrupt_id``, ``name`` (the interaction) and ``response_json``."""
    if turn.answers:
        return tuple(turn.answers)
    return (
        {
            "tool_call_id": turn.tool_call_id,
            "interrupt_id": turn.interrupt_id,
            "name": turn.name,
            "response_json": turn.response_json,
        },
    )


def approval_answers(turn: TurnResumed) -> tuple[Mapping[str, Any], ...]:
    """:func:`answers_of` for a turn of approvals only; ``ValueError`` for a call answered as
    anything but an approval."""
    answers = answers_of(turn)
    for answer in answers:
        if answer["name"] != APPROVE_TOOL_CALL:
            raise ValueError(
                f"call {answer['tool_call_id']!r} of the turn is answered as "
                f"{answer['name']!r}, no approval"
            )
    return answers


def observation_of(turn: TurnResumed, call_id: str) -> str | None:
    """The tool message the resume worker wrote for ``call_id`` (a question's rendered answer,
    a rejection), or ``None`` for a call left open to run (an approved one)."""
    for message in reversed(turn.history):
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            return str(message.get("content") or "")
    return None


def rejection_message(response: Mapping[str, Any]) -> str:
    """What the model reads as the result of a call the person rejected -- ``The person rejected
    this call; it was not run. Their message: "..."`` -- through every adapter.

    It is the very text the resume worker writes into the resumed turn's history as the call's
    tool message, so a model continued through Pydantic AI's ``ToolDenied``, through the OpenAI
    Agents SDK's function output or through a LangGraph ``ToolMessage`` reads one wording, and
    is told that nothing ran, not only the person's message. ``ValueError`` for a response that
    is no rejection: an approved call has a real result, never this text.
    """
    if response.get("decision") != REJECT:
        raise ValueError(f"a {response.get('decision')!r} decision is no rejection")
    return render_approval(response)


def call_fields(call: Mapping[str, Any], where: str = "tool call") -> tuple[str, str, str]:
    """``(id, name, arguments as JSON text)`` of one tool call in either shape a history comes
    in: turnlog's wire form (``{"id", "name", "arguments"}``, ``turn.history``) or the
    OpenAI-style form ``history_dicts`` gives (``{"id", "function": {"name", "arguments"}}``).
    ``ValueError`` naming ``where`` and the missing key, never a bare ``KeyError``."""
    function = call.get("function")
    source = function if isinstance(function, Mapping) else call
    name = source.get("name")
    if not isinstance(name, str):
        raise ValueError(f"{where} has no name (neither 'name' nor 'function.name')")
    arguments = source.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments, separators=(",", ":"), sort_keys=True)
    return str(call.get("id") or ""), name, arguments


def with_asking_round(
    records: Sequence[Mapping[str, Any]], calls: Sequence[ReservedCall], text: str = ""
) -> tuple[dict[str, Any], ...]:
    """The run's messages with its asking round in them exactly once, whatever the framework
    already put in its list.

    A framework's own list may already end with the assistant message that asked for the calls
    (Pydantic AI's ``all_messages()``, the OpenAI SDK's ``to_input_list()``), or hold the
    model's own call for what an interrupt now asks (LangGraph's ``AIMessage``), or not hold
    it at all. Appending the round regardless doubled the call in the checkpoint; so: the
    messages are kept as they are when an assistant message after the last user message
    already reserves every call; a trailing assistant message whose calls no tool message
    answered is the round, replaced by the calls paused (its text kept); otherwise the round
    is appended.
    """
    messages = [normalize_message(m) for m in records]
    wanted = {call.id for call in calls}
    for message in reversed(messages):
        if message["role"] == "user":
            break
        if message["role"] == "assistant" and message["tool_calls"]:
            if wanted <= {c["id"] for c in message["tool_calls"]}:
                return tuple(messages)
            break
    if messages and messages[-1]["role"] == "assistant" and messages[-1]["tool_calls"]:
        last = messages.pop()
        text = text or last["content"]
    return captured_messages(messages, text, list(calls))


def require_signing_key(tl: Turnlog) -> None:
    """``ConfigurationError`` naming ``turnlog keys new`` when ``tl`` has no key to sign pause
    tokens with. Call it before the run: a run that stopped and then could not be paused
    leaves a question nobody is asked."""
    if tl.keyring.signing_kid is None:
        raise ConfigurationError(
            f"no key signs pause tokens in {tl.settings.keys_dir}: run "
            "`turnlog keys new --kid <kid>` there (or set TURNLOG_KEYS_DIR) before running "
            "the agent, so a run that stops can be paused"
        )
