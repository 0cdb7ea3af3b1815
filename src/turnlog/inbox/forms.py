"""A submitted answer form into the interaction's response, and refusals into plain words.

The form only ever carries the person's decision (choices, text, edited arguments, a reason):
which pause it answers is the URL, and the four axes are the pause's own. Whatever a form could
tamper with -- a choice the question never offered, a decision that is not one of the three --
is refused here by name, before the library's own pre-check sees it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from turnlog.contracts import approvals
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.interactions import ASK_USER
from turnlog.contracts.refusals import RefusalReason
from turnlog.inbox.views import PauseView

#: The longest free text or reason accepted from a form (the answer size limit is the worker's;
#: this keeps one field from filling it by accident).
MAX_TEXT: Final = 10_000

#: What a person reads for each refusal: a rule's name is for logs, not for the page.
PLAIN_WORDS: Final[Mapping[str, str]] = {
    # Not "already answered": beside a Reject button, "rejected: already answered" read as if
    # the person's own decision had been refused.
    RefusalReason.ALREADY_CONSUMED: "someone else answered first",
    RefusalReason.PAUSE_EXPIRED: "the pause expired before the answer arrived",
    RefusalReason.TOKEN_EXPIRED: "the pause expired before the answer arrived",
    RefusalReason.TOKEN_NOT_YET_VALID: "the pause is not open yet",
    RefusalReason.RESPONSE_INVALID: "the answer does not fit what was asked",
    RefusalReason.RESPONSE_MISMATCH: "the answer does not match the question's choices",
    RefusalReason.APPROVAL_MISMATCH: "the approval is for another call than the one paused",
    RefusalReason.ANSWER_TOO_LARGE: "the answer is too long",
    RefusalReason.NO_RECORDED_TURN_STATE: "the paused turn is no longer on record",
    RefusalReason.FORGOTTEN: "this conversation was forgotten: nothing of it is kept",
    RefusalReason.PAUSE_SUPERSEDED: "the turn paused again on this question: answer the new pause",
    RefusalReason.INTERACTION_UNKNOWN: "this kind of question is not known to the worker",
    RefusalReason.TOKEN_UNKNOWN_KEY: "the pause was signed by a key this deployment no longer has",
}


def plain_words(reason: str) -> str:
    """The page's words for a refusal reason (a rule not listed reads as itself, spaced)."""
    return PLAIN_WORDS.get(reason, "refused: " + reason.replace("_", " "))


#: What happens once the worker took the answer, by what the person decided: the page says
#: what comes next, never a bare "resumed" (beside a rejection it read as "the call ran").
NEXT_STEP: Final[Mapping[str, str]] = {
    "answer": "sent: the agent continues with your answer",
    approvals.APPROVE: "sent: the agent runs the call",
    approvals.EDIT: "sent: the agent runs the call with your edited arguments",
    approvals.REJECT: "sent: the agent continues with your rejection",
}

#: Python's JSON parser messages, as a person reads them.
_JSON_WORDS: Final = (
    ("Expecting property name", "a name in double quotes was expected (or a comma is extra)"),
    ("Expecting ',' delimiter", "a comma is missing"),
    ("Expecting ':' delimiter", "a colon is missing after a name"),
    ("Expecting value", "a value was expected (text needs double quotes)"),
    ("Unterminated string", "a text has no closing double quote"),
    ("Invalid control character", "a text holds a line break or tab (write \\n or \\t)"),
    ("Invalid \\escape", "a backslash starts no valid escape"),
    ("Extra data", "there is more after the end of the JSON"),
)


def decision_of(form: Mapping[str, Sequence[str]]) -> str:
    """The key of :data:`NEXT_STEP` for a form: its approval decision, else an answer."""
    decision = (form.get("decision") or ("",))[0]
    return decision if decision in NEXT_STEP else "answer"


def loads(text: str, what: str) -> Any:
    """``text`` as JSON, or :class:`FormProblem` saying where (line and column) and what is
    wrong in plain words -- not the parser's own message."""
    if not text.strip():
        raise FormProblem(f"{what}: empty; write it as JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        said = next((plain for key, plain in _JSON_WORDS if exc.msg.startswith(key)), "")
        where = f"line {exc.lineno}, column {exc.colno}"
        raise FormProblem(f"{what}: not valid JSON at {where}: {said or 'not JSON'}") from None
    except RecursionError:
        raise FormProblem(f"{what}: nested deeper than JSON may be here") from None


def skeleton(schema: Any) -> str:
    """A starting point for a response of the Avro record ``schema``: every field without a
    default, each with a placeholder of its type (``""``, ``0``, ``false``, ``[]``, an enum's
    first symbol, a nested record's own skeleton), as indented JSON. Empty for a schema this
    cannot follow (the person then writes the JSON whole)."""
    try:
        return json.dumps(_placeholder(schema, {}, 0), indent=2, ensure_ascii=False)
    except (KeyError, TypeError, ValueError, AttributeError):
        return ""


def _placeholder(schema: Any, named: dict[str, Any], depth: int) -> Any:
    if depth > 20:
        raise ValueError("too deep")
    if isinstance(schema, list):  # a union: its first branch that is not null
        branches = [b for b in schema if b != "null"]
        return _placeholder(branches[0], named, depth + 1) if branches else None
    if isinstance(schema, str):
        simple: dict[str, Any] = {"null": None, "boolean": False, "int": 0, "long": 0}
        simple |= {"float": 0.0}
        simple |= {"double": 0.0, "string": "", "bytes": ""}
        if schema in simple:
            return simple[schema]
        return _placeholder(named[schema], named, depth + 1)
    kind = schema["type"]
    if "name" in schema and kind in ("record", "enum", "fixed"):
        named[schema["name"]] = schema
    if kind == "record":
        return {
            f["name"]: _placeholder(f["type"], named, depth + 1)
            for f in schema["fields"]
            if "default" not in f
        }
    if kind == "enum":
        return schema["symbols"][0]
    if kind == "array":
        return []
    if kind == "map":
        return {}
    if kind == "fixed":
        return ""
    return _placeholder(kind, named, depth + 1)


class FormProblem(ValueError):
    """A form that does not make an answer; the message is shown beside the form."""


Form = Mapping[str, Sequence[str]]


def _one(form: Form, name: str) -> str:
    values = form.get(name) or ()
    if len(values) > 1:
        raise FormProblem(f"the field {name!r} was sent more than once")
    text = values[0] if values else ""
    if len(text) > MAX_TEXT:
        raise FormProblem(f"the field {name!r} is longer than {MAX_TEXT} characters")
    return text


def response_for(pause: PauseView, form: Form) -> Any:
    """The response the form states for ``pause``'s interaction, or :class:`FormProblem`."""
    if pause.interaction == ASK_USER and pause.questions:
        return _ask_user(pause, form)
    if pause.interaction == APPROVE_TOOL_CALL and pause.tool is not None:
        return _approval(pause, form)
    return loads(_one(form, "response"), "the response")


def _ask_user(pause: PauseView, form: Form) -> Any:
    answers = []
    for number, question in enumerate(pause.questions):
        chosen = [c for c in form.get(f"q{number}") or () if c]
        offered = {o.label for o in question.options}
        unknown = [c for c in chosen if c not in offered]
        if unknown:
            raise FormProblem(f"question {number + 1} offers no choice {unknown[0]!r}")
        if len(chosen) > 1 and not question.multi:
            raise FormProblem(f"question {number + 1} takes one choice")
        other = _one(form, f"other{number}").strip()
        if not chosen and not other:
            raise FormProblem(f"answer question {number + 1}: choose an option or write one")
        answers.append({"selections": chosen, "other": other or None})
    return {"answers": answers}


def _approval(pause: PauseView, form: Form) -> Any:
    tool, original = pause.tool or "", pause.arguments
    decision = _one(form, "decision")
    message = _one(form, "message").strip() or None
    if decision == approvals.APPROVE:
        return approvals.approve(tool, original, message=message)
    if decision == approvals.REJECT:
        if message is None:
            raise FormProblem("say why you reject the call: the agent reads your reason")
        return approvals.reject(tool, original, message)
    if decision == approvals.EDIT:
        edited = edited_arguments(_one(form, "arguments"), original)
        return approvals.edit(tool, original, edited, message=message)
    raise FormProblem("choose approve, edit or reject")


def edited_arguments(text: str, original: Any) -> Any:
    """The edited arguments, checked against the call they edit (a pause carries no schema of
    the tool, so the call's own arguments stand for it): JSON; an object when the model's were
    one, with no name the call did not have and each value of the same JSON type as before --
    an edit changes values, it does not invent parameters or shapes the tool may not take."""
    edited = loads(text, "the edited arguments")
    if isinstance(original, dict):
        if not isinstance(edited, dict):
            raise FormProblem("the edited arguments must be a JSON object, like the call's")
        extra = sorted(set(edited) - set(original))
        if extra:
            raise FormProblem(f"the call has no argument {extra[0]!r}")
        for name, value in edited.items():
            was, now = _json_type(original[name]), _json_type(value)
            if original[name] is not None and was != now:
                raise FormProblem(f"the argument {name!r} must stay {was}, got {now}")
    return edited


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"
