"""Framework adapters, each an optional extra: they map a framework's own pause and resume onto
turnlog's, so an agent keeps its framework and gains a durable, exactly-once pause.

- :mod:`turnlog.adapters.langgraph` (``pip install turnlog[langgraph]``): an ``interrupt()``
  becomes a pause; the resumed turn becomes ``Command(resume={interrupt_id: ...})``.
- :mod:`turnlog.adapters.pydantic_ai` (``pip install turnlog[pydantic-ai]``): deferred tool
  requests become an approval pause; the resumed turn becomes the message history and
  ``DeferredToolResults``.
- :mod:`turnlog.adapters.openai_agents` (``pip install turnlog[openai-agents]``): a run's tool
  approval becomes an approval pause; the resumed turn becomes the input that continues it.

What the three share lives here, so an agent reads the same thing whichever framework runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, REJECT, render_approval

if TYPE_CHECKING:
    from turnlog.contracts.events import TurnResumed

__all__ = ["approval_answers", "rejection_message"]


def approval_answers(turn: TurnResumed) -> tuple[Mapping[str, Any], ...]:
    """Every call's answer of a resumed approval turn, in the order of the calls -- the one
    call of a single pause, or each call of a pause of several (``turn.answers``) -- each with
    ``tool_call_id``, ``name`` and ``response_json``. ``ValueError`` for a call answered as
    anything but an approval: the approval adapters continue approvals only."""
    answers: tuple[Mapping[str, Any], ...] = tuple(turn.answers) or (
        {"tool_call_id": turn.tool_call_id, "name": turn.name, "response_json": turn.response_json},
    )
    for answer in answers:
        if answer["name"] != APPROVE_TOOL_CALL:
            raise ValueError(
                f"call {answer['tool_call_id']!r} of the turn is answered as "
                f"{answer['name']!r}, no approval"
            )
    return answers


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
