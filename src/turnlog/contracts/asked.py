"""What a pause asks, in one line a person reads before answering it.

The person answering from the command line approves what they see: the tool and its arguments,
or the question and its options. The request is the model's (and the user's) text, so it is
shown as the inbox shows it -- every control, format or invisible character written out as
``⟨U+XXXX⟩`` (:mod:`turnlog.contracts.visible`), so a bidi override cannot make ``9999 0000``
read ``0000 9999`` -- and clipped, with an ellipsis, so one pause stays one line. Newlines are
marked too: a line is a line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.visible import SUMMARY_CHARS, clip, visible

#: The table of ``turnlog pending`` and ``show`` clips what a pause asks to this many
#: characters (``--json`` and ``trail`` keep :data:`~turnlog.contracts.visible.SUMMARY_CHARS`).
TABLE_CHARS = 40


@dataclass(frozen=True, slots=True)
class Asked:
    """One pause's (one call's) question or call to approve, marked and clipped."""

    interaction: str
    #: The tool an approval runs (``None``: not an approval).
    tool: str | None
    #: Its arguments, compact JSON (``None``: not an approval).
    arguments: str | None
    #: The whole line: ``approve TOOL ARGUMENTS``, or ``INTERACTION: ...`` -- an ``ask_user``
    #: pause's first question and its options, any other's request.
    text: str

    def as_dict(self) -> dict[str, str | None]:
        return {
            "interaction": self.interaction,
            "tool": self.tool,
            "arguments": self.arguments,
            "asks": self.text,
        }


def asked(interaction: str, request_json: str, *, limit: int = SUMMARY_CHARS) -> Asked:
    """What the request of an ``interaction`` pause asks, each part marked and clipped to
    ``limit`` characters."""
    try:
        request: Any = json.loads(request_json)
    except (ValueError, TypeError, RecursionError):
        request = request_json
    if (
        interaction == APPROVE_TOOL_CALL
        and isinstance(request, dict)
        and isinstance(request.get("tool"), str)
    ):
        tool = _line(request["tool"], limit)
        arguments = _line(_compact(request.get("arguments")), limit)
        return Asked(interaction, tool, arguments, clip(f"approve {tool} {arguments}", limit))
    question = _first_question(request)
    text = question if question is not None else _compact(request)
    return Asked(interaction, None, None, _line(f"{interaction}: {text}", limit))


def _first_question(request: Any) -> str | None:
    """``Which region? [eu / us] (+1 more)`` of an ``ask_user`` request; ``None`` for any
    other shape."""
    if not isinstance(request, dict):
        return None
    questions = request.get("questions")
    if not isinstance(questions, list) or not questions or not isinstance(questions[0], dict):
        return None
    first = questions[0]
    text = str(first.get("question") or "")
    labels = [
        str(option.get("label")) if isinstance(option, dict) else str(option)
        for option in first.get("options") or ()
    ]
    if labels:
        text += f" [{' / '.join(labels)}]"
    if len(questions) > 1:
        text += f" (+{len(questions) - 1} more)"
    return text


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _line(text: str, limit: int) -> str:
    return clip(visible(text), limit)


__all__ = ["TABLE_CHARS", "Asked", "asked"]
