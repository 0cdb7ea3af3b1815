"""Human interactions by name: the response each accepts, and how that response reads to a model.

A pause names its interaction; the answer's response must satisfy that interaction's registered
Avro record schema before anything is consumed (step 4 of the resume contract), because a response
the continuing turn cannot interpret would spend the token on a question nobody answered. Fitting
the schema is not enough: an interaction may also bind the response to the request the pause
recorded -- ``ask_user`` takes one answer per question asked, selections among the options
offered -- and refuse a request it could never bind an answer to when the pause is made.
``ask_user`` and ``approve_tool_call`` are built in; a deployment registers its own next to them
(``registry.register(name, response_schema, render, check_request=..., check_response=...)``)
without changing turnlog.

It is one module, over the usual length, because a response is checked twice over: in one pass
for the common response already in shape, and by the full fastavro check that words every
refusal. The one pass must return exactly what the full check returns; apart, a change to one
would be easy to miss on the other. ``ask_user``'s request and answer rules are here too, beside
the schema and renderer they complete, as are the words of a schema refusal (the path to the
field, and what is wrong there), which both checks share.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import SchemaParseException
from fastavro.validation import ValidationError, validate

from turnlog.contracts.approvals import (
    APPROVE_TOOL_CALL,
    APPROVE_TOOL_CALL_RESPONSE_SCHEMA,
    render_approval,
)
from turnlog.contracts.refusals import RefusalReason, refuse
from turnlog.errors import ConfigurationError

#: Renders a validated response as the text of the answered call's tool message.
Render = Callable[[Any], str]
#: A datum in, the datum as a schema reader would return it out; raises when it cannot vouch.
Shape = Callable[[Any], Any]
#: A pause's request (a JSON value) in; ``None`` when answers can be bound to it, else what is
#: wrong with it.
RequestCheck = Callable[[Any], "str | None"]
#: The recorded request and a schema-valid response in; ``None`` when the response answers the
#: request, else what does not.
ResponseCheck = Callable[[Any, Any], "str | None"]
#: A response check on the request's JSON text (how the worker holds it).
Bind = Callable[[str, Any], "str | None"]

ASK_USER: Final = "ask_user"

#: ``{"answers": [{"selections": [str], "other": str | null}]}``, one entry per question asked.
ASK_USER_RESPONSE_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "record",
    "name": "AskUserResponse",
    "namespace": "turnlog.interactions",
    "fields": [
        {
            "name": "answers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "AskUserAnswer",
                    "fields": [
                        {"name": "selections", "type": {"type": "array", "items": "string"}},
                        {"name": "other", "type": ["null", "string"], "default": None},
                    ],
                },
            },
        }
    ],
}


def render_json(response: Any) -> str:
    """The default observation: the response as canonical JSON, which any model can read."""
    return json.dumps(response, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: ``json.dumps(value, ensure_ascii=False)`` without building an encoder for every call.
_quote: Final = json.JSONEncoder(ensure_ascii=False).encode


def render_ask_user(response: Any) -> str:
    """One line per question, selections and free text quoted so that labels containing
    punctuation cannot be misread as several choices."""
    lines = []
    for number, answer in enumerate(response["answers"], start=1):
        parts = []
        if answer["selections"]:
            chosen = ", ".join(_quote(s) for s in answer["selections"])
            parts.append(f"selected {chosen}")
        if answer.get("other") is not None:
            parts.append(f"wrote {_quote(answer['other'])}")
        lines.append(f"answer {number}: {'; '.join(parts) if parts else 'no selection'}")
    if not lines:
        return "The person answered without choosing anything."
    return "The person answered.\n" + "\n".join(lines)


# -- ask_user: the answer bound to the questions asked -------------------------------------------

#: The keys of an ``ask_user`` request, of one question and of an option given as an object. Any
#: other key is refused when the pause is made, as an unknown field of a response is: a misspelt
#: ``options`` or ``multiSelect`` would otherwise silently change which answers are accepted.
_REQUEST_KEYS: Final = frozenset({"questions"})
_QUESTION_KEYS: Final = frozenset(
    {"question", "header", "options", "multiSelect", "multi_select", "allow_other", "allowOther"}
)
_OPTION_KEYS: Final = frozenset({"label", "description"})


@dataclass(frozen=True, slots=True)
class _Question:
    """One question as the answer check reads it."""

    text: str
    labels: tuple[str, ...]
    offered: frozenset[str]
    #: ``True``: any number of selections; ``False``: at most one; ``None``: the question does
    #: not say, and the number is not checked.
    multi: bool | None
    allow_other: bool


def _kind(value: Any) -> str:
    """A JSON value's kind, as a refusal names it."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _flag(item: dict[str, Any], names: tuple[str, str], where: str) -> bool | None:
    """A question's yes/no setting under either of its two spellings; ``None`` when unstated."""
    found: bool | None = None
    for name in names:
        if name in item:
            value = item[name]
            if value is not True and value is not False:
                raise ValueError(f"{where}.{name} must be true or false, got {_kind(value)}")
            if found is not None and found is not value:
                raise ValueError(f"{where}: {names[0]} and {names[1]} disagree")
            found = value
    return found


def _read_question(item: Any, where: str) -> _Question:
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be an object, got {_kind(item)}")
    for key in item:
        if key not in _QUESTION_KEYS:
            known = ", ".join(sorted(_QUESTION_KEYS))
            raise ValueError(f"{where}.{key} is not a question field (known: {known})")
    text = item.get("question")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}.question must be non-empty text, got {_kind(text)}")
    header = item.get("header")
    if header is not None and not isinstance(header, str):
        raise ValueError(f"{where}.header must be text, got {_kind(header)}")
    options = item.get("options")
    if options is None:
        options = []
    if not isinstance(options, list):
        raise ValueError(f"{where}.options must be a list, got {_kind(options)}")
    labels: list[str] = []
    for index, option in enumerate(options):
        at = f"{where}.options[{index}]"
        label = option
        if isinstance(option, dict):
            for key in option:
                if key not in _OPTION_KEYS:
                    raise ValueError(
                        f"{at}.{key} is not an option field (known: description, label)"
                    )
            description = option.get("description")
            if description is not None and not isinstance(description, str):
                raise ValueError(f"{at}.description must be text, got {_kind(description)}")
            label = option.get("label")
        if not isinstance(label, str) or not label:
            raise ValueError(
                f'{at} must be non-empty text or {{"label": text}}, got {_kind(label)}'
            )
        if label in labels:
            raise ValueError(f"{at}: {label!r} is offered twice")
        labels.append(label)
    multi = _flag(item, ("multiSelect", "multi_select"), where)
    allow = _flag(item, ("allow_other", "allowOther"), where)
    allow_other = allow is not False
    if not labels and not allow_other:
        raise ValueError(
            f"{where} offers no options and takes no free text (allow_other is false): "
            "nothing could answer it"
        )
    return _Question(text, tuple(labels), frozenset(labels), multi, allow_other)


def _read_questions(request: Any) -> tuple[_Question, ...]:
    """The questions of an ``ask_user`` request, or ``ValueError`` saying where it is wrong."""
    if not isinstance(request, dict):
        raise ValueError(f"the request must be an object, got {_kind(request)}")
    if "questions" not in request and "tool" in request:
        # An approval paused without naming its interaction: say which one it needs.
        raise ValueError(
            'the request is a tool call to approve ({"tool", "arguments"}), not questions: '
            'pause it with interaction=APPROVE_TOOL_CALL ("approve_tool_call")'
        )
    if "questions" not in request:
        raise ValueError(
            'the request has no "questions"; ask_user asks '
            '{"questions": [{"question": text, "options": [...]}, ...]}'
        )
    for key in request:
        if key not in _REQUEST_KEYS:
            raise ValueError(f"{key} is not a field of an ask_user request (known: questions)")
    raw = request["questions"]
    if not isinstance(raw, list) or not raw:
        got = "an empty list" if raw == [] else _kind(raw)
        raise ValueError(f"questions must be a non-empty list, got {got}")
    return tuple(_read_question(item, f"questions[{index}]") for index, item in enumerate(raw))


def _held(value: Any) -> str:
    """What an answer holds where a refusal points, never the value itself: a rejection is
    kept for the rejections topic's retention, past any ``turnlog forget``, so its words name
    the place and the kind (and a text's length), not what a person wrote."""
    if isinstance(value, str):
        return f"text of {_count(len(value), 'character')}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return _kind(value)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _answers_mismatch(questions: tuple[_Question, ...], response: Any) -> str | None:
    """What in a schema-valid ``ask_user`` response does not answer ``questions``, or ``None``.

    One answer per question, in the order asked; each selection one of that question's options,
    once; one selection at most where the question says ``multiSelect: false``; free text
    (``other``) unless the question says ``allow_other: false``; and every answer selects or
    writes something -- an empty answer leaves its question unanswered while spending the token.
    """
    answers = response["answers"]
    if len(answers) != len(questions):
        detail = (
            f"answers: {_count(len(answers), 'answer')} to {_count(len(questions), 'question')}; "
            "each question takes exactly one answer, in the order asked"
        )
        if len(answers) < len(questions):
            missing = len(answers)
            detail += f" (question {missing + 1} has none)"
        return detail
    for index, question in enumerate(questions):
        answer = answers[index]
        problem = _answer_problem(index + 1, question, answer["selections"], answer.get("other"))
        if problem is not None:
            return f"answers[{index}]{problem}"
    return None


def _answer_problem(
    number: int, question: _Question, selections: list[str], other: Any
) -> str | None:
    """:func:`_answers_mismatch` for answer ``number``: the problem, its path relative to the
    answer, or ``None``. Nothing is worded unless something is wrong (the worker's path)."""
    offered = question.offered
    for position, selection in enumerate(selections):
        if selection not in offered:
            if not question.labels:
                return (
                    f".selections[{position}]: question {number} offers no options to select "
                    f"(got {_held(selection)}); free text goes in other"
                )
            return (
                f".selections[{position}]: {_held(selection)}, not one of question {number}'s "
                f"{_count(len(question.labels), 'offered option')}"
            )
    if len(selections) > 1:
        chosen: set[str] = set()
        for position, selection in enumerate(selections):
            if selection in chosen:
                return (
                    f".selections[{position}]: the same option as an earlier selection "
                    "(each option is selected once)"
                )
            chosen.add(selection)
        if question.multi is False:
            return (
                f".selections: question {number} takes one selection (multiSelect is false), "
                f"got {len(selections)}"
            )
    wrote = isinstance(other, str) and bool(other.strip())
    if wrote and not question.allow_other:
        return f".other: question {number} takes no free text (allow_other is false)"
    if not selections and not wrote:
        return f": neither a selection nor free text; question {number} is left unanswered"
    return None


def check_ask_user_request(request: Any) -> str | None:
    """``ask_user``'s request check: ``None``, or what makes the request one no answer could be
    bound to. Run when the pause is made, so such a pause is refused before it is written.

    The request is ``{"questions": [question, ...]}``, at least one question, each
    ``{"question": text, "header"?: text, "options"?: [text | {"label": text,
    "description"?: text}], "multiSelect"?: bool, "allow_other"?: bool}`` (``multi_select`` and
    ``allowOther`` are the same settings spelt the other way). Labels are distinct and non-empty;
    a question without options is answered in free text, so it cannot also say
    ``allow_other: false``; no other key is read, so none is accepted.
    """
    try:
        _read_questions(request)
    except ValueError as exc:
        return str(exc)
    return None


def check_ask_user_response(request: Any, response: Any) -> str | None:
    """``ask_user``'s answer check: ``None``, or what in the (schema-valid) response does not
    answer the request: one answer per question, in order; selections among the question's
    options, each once, at most one where it says ``multiSelect: false``; free text unless it
    says ``allow_other: false``; something in every answer. A request it cannot read (see
    :func:`check_ask_user_request`) binds no answer."""
    try:
        questions = _read_questions(request)
    except ValueError:  # its words may quote the request's text: a rejection names no content
        return "the recorded request is not one ask_user can read; no answer binds to it"
    return _answers_mismatch(questions, response)


#: ``ask_user``'s questions (or why its request cannot be read), by request text: a function of
#: the text alone, so a pause asked of many threads, or an answer refused and sent again, reads
#: its request once. Bounded like the request hashes of :mod:`turnlog.contracts.resume`.
_ASKED: dict[str, tuple[_Question, ...] | str] = {}
_ASKED_MAX: Final = 1024
_ASKED_CHARS: Final = 4096


def _ask_user_mismatch(request_json: str, response: Any) -> str | None:
    """:func:`check_ask_user_response` on the request's JSON text, the text read once."""
    asked = _ASKED.get(request_json)
    if asked is None:
        try:
            asked = _read_questions(json.loads(request_json))
        except (ValueError, RecursionError):
            # Its words may quote the request's text: a rejection names no content.
            asked = "the recorded request is not one ask_user can read; no answer binds to it"
        if len(request_json) <= _ASKED_CHARS:
            if len(_ASKED) >= _ASKED_MAX:
                _ASKED.clear()
            _ASKED[request_json] = asked
    if isinstance(asked, str):
        return asked
    return _answers_mismatch(asked, response)


def _said(result: object, name: str, hook: str) -> str | None:
    """A registered check's verdict: ``None`` (fine) or its text (what is wrong). Anything else
    is a bug in the check, raised rather than read as either: the worker then refuses the
    answer ``answer_unprocessable``, naming the exception, instead of guessing."""
    if result is None:
        return None
    if isinstance(result, str):
        return result or f"{name}'s {hook} refused it without saying why"
    raise TypeError(f"interaction {name!r}: {hook} must return None or text, got {result!r}")


def _bound(check: ResponseCheck, name: str) -> Bind:
    """A registered ``check_response`` on the request's JSON text, parsed for each answer (a
    shared parsed value could be changed by one call under the next)."""
    call = cast(Callable[[Any, Any], object], check)

    def bind(request_json: str, response: Any) -> str | None:
        try:
            request = json.loads(request_json)
        except (ValueError, TypeError, RecursionError) as exc:
            return f"the recorded request is not JSON: {exc}"
        return _said(call(request, response), name, "check_response")

    return bind


def _field_names(schema: Any) -> frozenset[str]:
    """Every record field name ``schema`` declares: the words a refusal's path may use."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for spec in node.get("fields") or ():
                if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
                    names.add(spec["name"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


def _unknown_field(given: Any, known: Any, path: str, fields: frozenset[str]) -> str | None:
    """The first key of ``given`` that the schema-shaped ``known`` lacks.

    Avro validation accepts records with extra keys; refusing them catches a client that spells a
    field wrong, whose answer would otherwise be silently read as if that field were absent.
    The unknown key is named by its place and length, not quoted: it is the answer's text; so is
    a map's key on the way to it (``[entry n]``), where a field of the schema (``fields``) is
    named.
    """
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        for position, (key, value) in enumerate(given.items()):
            if key not in known:
                name = f"field {position + 1} (a name of {_count(len(str(key)), 'character')})"
                return f"{path}: {name}" if path else name
            if key in fields:
                at = f"{path}.{key}" if path else str(key)
            else:
                at = f"{path}[entry {position}]"
            found = _unknown_field(value, known[key], at, fields)
            if found is not None:
                return found
    elif isinstance(given, list) and isinstance(known, list):
        for index, (g, k) in enumerate(zip(given, known, strict=False)):
            found = _unknown_field(g, k, f"{path}[{index}]", fields)
            if found is not None:
                return found
    return None


#: What a schema type asks for, in a refusal's words.
_WANTED: Final[Mapping[str, str]] = {
    "null": "null",
    "boolean": "true or false",
    "string": "text",
    "bytes": "bytes",
    "fixed": "bytes",
    "int": "a whole number of 32 bits",
    "long": "a whole number of 64 bits",
    "float": "a number",
    "double": "a number",
    "array": "a list",
    "map": "an object",
    "record": "an object",
    "error": "an object",
}


def _type_of(schema: Any, named: Mapping[str, Any]) -> tuple[str, Any]:
    """A fastavro-parsed schema's type name and the schema itself, names resolved."""
    if isinstance(schema, list):
        return "union", schema
    if isinstance(schema, str):
        found = named.get(schema)
        return (schema, schema) if found is None else _type_of(found, named)
    kind = schema.get("type")
    if isinstance(kind, str) and kind in named:
        return _type_of(named[kind], named)
    if isinstance(kind, (list, dict)):
        return _type_of(kind, named)
    return str(kind), schema


def _wanted(schema: Any, named: Mapping[str, Any]) -> str:
    kind, resolved = _type_of(schema, named)
    if kind == "enum":
        return "one of " + ", ".join(repr(s) for s in resolved["symbols"])
    if kind == "union":
        return " or ".join(_wanted(branch, named) for branch in resolved)
    return _WANTED.get(kind, kind)


def _schema_problem(datum: Any, schema: Any, named: Mapping[str, Any], path: str) -> str | None:
    """Where ``datum`` first fails ``schema`` and how -- ``answers[0].selections is missing``,
    ``answers[0].other must be null or text, got a number`` -- or ``None`` when this walk
    finds nothing (the caller then names fastavro's fields). Run only on the way to a refusal.

    It follows fastavro's validation (a missing field is its default, else null; ints are not
    booleans; a union takes its first branch that fits), so the problem named is one fastavro
    refused; why: "does not fit at ``AskUserAnswer.selections``" leaves a person guessing
    which answer, and whether the field was missing or of the wrong type.
    """
    where = path or "the response"
    kind, resolved = _type_of(schema, named)
    if kind == "union":
        if any(_schema_problem(datum, branch, named, path) is None for branch in resolved):
            return None
        others = [branch for branch in resolved if branch != "null"]
        if (
            datum is not None
            and len(others) == 1
            and _type_of(others[0], named)[0]
            in (
                "record",
                "error",
                "array",
                "map",
            )
        ):
            return _schema_problem(datum, others[0], named, path)
        return f"{where} must be {_wanted(resolved, named)}, got {_held(datum)}"
    wrong = f"{where} must be {_wanted(resolved, named)}, got {_held(datum)}"
    if kind in ("record", "error"):
        if not isinstance(datum, Mapping):
            return wrong
        if "-type" in datum and datum["-type"] != resolved["name"]:
            return f"{where} names another type than {resolved['name']!r}"
        for spec in resolved["fields"]:
            name = spec["name"]
            at = f"{path}.{name}" if path else str(name)
            if name not in datum and "default" not in spec:
                if _schema_problem(None, spec["type"], named, at) is not None:
                    return f"{at} is missing"
                continue
            found = _schema_problem(datum.get(name, spec.get("default")), spec["type"], named, at)
            if found is not None:
                return found
        return None
    if kind == "array":
        if isinstance(datum, str) or not isinstance(datum, (list, tuple)):
            return wrong
        for index, item in enumerate(datum):
            found = _schema_problem(item, resolved["items"], named, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if kind == "map":
        if not isinstance(datum, Mapping) or not all(isinstance(k, str) for k in datum):
            return wrong
        for position, item in enumerate(datum.values()):
            # A map's keys are the answer's text: the place is the entry's position.
            found = _schema_problem(item, resolved["values"], named, f"{path}[entry {position}]")
            if found is not None:
                return found
        return None
    if kind == "enum":
        if isinstance(datum, str) and datum in resolved["symbols"]:
            return None
        return f"{where} must be {_wanted(resolved, named)}, got {_held(datum)}"
    fits = {
        "null": datum is None,
        "boolean": datum is True or datum is False,
        "string": isinstance(datum, str),
        "int": _whole(datum, 31),
        "long": _whole(datum, 63),
        "float": _number(datum),
        "double": _number(datum),
        "bytes": isinstance(datum, (bytes, bytearray)),
    }.get(kind)
    if fits is None or "logicalType" in resolved:
        return None  # a type this walk does not follow: fastavro's fields are named instead
    return None if fits else wrong


def _whole(value: Any, bits: int) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and -(1 << bits) <= value <= (1 << bits) - 1
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Doubt(Exception):
    """A datum the one-pass shaping does not vouch for; the full check decides."""


class _Unsupported(Exception):
    """A schema construct the one-pass shaping leaves to the full check."""


def _shape_null(value: Any) -> None:
    if value is not None:
        raise _Doubt
    return None


def _shape_boolean(value: Any) -> bool:
    if value is True or value is False:
        return value
    raise _Doubt


def _shape_string(value: Any) -> str:
    if type(value) is not str:
        raise _Doubt
    if not value.isascii():
        value.encode()  # a lone surrogate: fastavro's writer raises, so the full check must run
    return value


def _shape_int(value: Any) -> int:
    if type(value) is int and -(1 << 31) <= value < 1 << 31:
        return value
    raise _Doubt


def _shape_long(value: Any) -> int:
    if type(value) is int and -(1 << 63) <= value < 1 << 63:
        return value
    raise _Doubt


def _shape_double(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)  # as fastavro writes it; too large: OverflowError, the full check
    raise _Doubt


_PRIMITIVE_SHAPES: Final[Mapping[str, Shape]] = {
    "null": _shape_null,
    "boolean": _shape_boolean,
    "string": _shape_string,
    "int": _shape_int,
    "long": _shape_long,
    "double": _shape_double,
}


def _absent(_: Any = None) -> Any:
    raise _Doubt


def _shaper(schema: Any, named: dict[str, list[Shape]]) -> Shape:
    """One pass over a JSON datum giving what fastavro's validate, write and read return for it
    (records as dicts in field order, defaults filled in, ints in doubles as floats), for the
    data that would pass the full check; it raises for everything else, unknown keys included.

    Why: the full check interprets the schema three times and serialises the datum to bytes to
    learn its shape, which for a response already in shape is a copy in field order. Covered:
    records, enums, arrays, maps, the primitives but float and bytes, and unions of ``null``
    with one other type; :class:`_Unsupported` (no fast path at all) for anything else, such as
    logical types, whose readers change the value's type. ``schema`` is fastavro-parsed;
    ``named`` holds the records and enums met so far by full name, so that a later field (or the
    record itself) may refer to them.
    """
    if isinstance(schema, str):
        primitive = _PRIMITIVE_SHAPES.get(schema)
        if primitive is not None:
            return primitive
        found = named.get(schema)
        if found is None:
            raise _Unsupported(schema)
        return lambda value: found[0](value)
    if isinstance(schema, list):
        others = [branch for branch in schema if branch != "null"]
        if len(schema) != 2 or len(others) != 1:
            raise _Unsupported("a union other than null and one type")
        inner = _shaper(others[0], named)
        return lambda value: None if value is None else inner(value)
    if not isinstance(schema, Mapping) or "logicalType" in schema:
        raise _Unsupported(repr(schema))
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVE_SHAPES:
        return _PRIMITIVE_SHAPES[kind]
    if kind == "enum":
        enum = _enum_shaper(frozenset(schema["symbols"]))
        named[schema["name"]] = [enum]
        return enum
    if kind == "array":
        return _array_shaper(_shaper(schema["items"], named))
    if kind == "map":
        return _map_shaper(_shaper(schema["values"], named))
    if kind in ("record", "error"):
        cell: list[Shape] = []  # filled once the fields are built: a self-reference calls it
        named[schema["name"]] = cell
        fields = []
        for spec in schema["fields"]:
            shape = _shaper(spec["type"], named)
            if "default" in spec:
                default = spec["default"]
                absent = _default_shaper(shape, default)
            elif isinstance(spec["type"], list) and "null" in spec["type"]:
                absent = _shape_null  # fastavro validates and writes a missing field as null
            else:
                absent = _absent
            fields.append((spec["name"], shape, absent))
        record = _record_shaper(tuple(fields))
        cell.append(record)
        return record
    raise _Unsupported(repr(kind))


def _enum_shaper(symbols: frozenset[str]) -> Shape:
    def shape(value: Any) -> Any:
        if type(value) is str and value in symbols:
            return value
        raise _Doubt

    return shape


def _array_shaper(items: Shape) -> Shape:
    def shape(value: Any) -> Any:
        if type(value) is not list:
            raise _Doubt
        return [items(item) for item in value]

    return shape


def _map_shaper(values: Shape) -> Shape:
    def shape(value: Any) -> Any:
        if type(value) is not dict:
            raise _Doubt
        return {key: values(item) for key, item in value.items()}

    return shape


def _default_shaper(shape: Shape, default: Any) -> Shape:
    """A missing field's value: its default, shaped afresh each time as a reader builds it."""
    return lambda _: shape(default)


def _record_shaper(fields: tuple[tuple[str, Shape, Shape], ...]) -> Shape:
    known = frozenset(name for name, _, _ in fields)

    def shape(value: Any) -> Any:
        if type(value) is not dict or not known.issuperset(value):
            raise _Doubt
        shaped = {}
        for name, field_shape, absent in fields:
            if name in value:
                shaped[name] = field_shape(value[name])
            else:
                shaped[name] = absent(None)
        return shaped

    return shape


@dataclass(frozen=True, slots=True)
class Interaction:
    """One registered interaction: its name, response schema and observation renderer, and the
    two optional checks that bind an answer to what its pause asked.

    ``check_request(request)`` runs when a pause is made, on its request as a JSON value:
    ``None`` when an answer can be bound to it, else a sentence saying what is wrong -- the
    pause is then refused (:class:`~turnlog.errors.PauseInvalid` on ``request_json``) before
    anything is written, rather than left waiting for an answer no check could accept.
    ``check_response(request, response)`` runs at step 4, after the schema check, on the
    request the pause recorded and the response as the schema reads it: ``None``, or what in
    the response does not answer the request (refused ``response_mismatch``). Both must be
    pure and quick -- the second runs on the worker's path for every answer -- and neither may
    change the values it is given.
    """

    name: str
    response_schema: Mapping[str, Any]
    render: Render = render_json
    check_request: RequestCheck | None = None
    check_response: ResponseCheck | None = None
    _parsed: Any = field(init=False, repr=False, compare=False)
    _shape: Shape | None = field(init=False, repr=False, compare=False)
    _bind: Bind | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigurationError("an interaction needs a name")
        if not isinstance(self.response_schema, Mapping) or self.response_schema.get("type") != (
            "record"
        ):
            raise ConfigurationError(
                f"interaction {self.name!r}: the response schema must be an Avro record"
            )
        for hook in ("check_request", "check_response"):
            if getattr(self, hook) is not None and not callable(getattr(self, hook)):
                raise ConfigurationError(f"interaction {self.name!r}: {hook} must be callable")
        try:
            parsed = parse_schema(json.loads(json.dumps(self.response_schema)))
        except (SchemaParseException, ValueError, TypeError, KeyError) as exc:
            raise ConfigurationError(
                f"interaction {self.name!r}: invalid response schema: {exc}"
            ) from None
        object.__setattr__(self, "_parsed", parsed)
        try:
            shape: Shape | None = _shaper(parsed, {})
        except _Unsupported:
            shape = None  # every response takes the full check
        object.__setattr__(self, "_shape", shape)
        check = self.check_response
        bind: Bind | None = None
        if check is check_ask_user_response:
            bind = _ask_user_mismatch  # the same rule, each request text read once
        elif check is not None:
            bind = _bound(check, self.name)
        object.__setattr__(self, "_bind", bind)

    def validate(self, response_json: str) -> Any:
        """The response as the schema reads it (defaults filled in), or ``response_invalid``.

        A response that is plainly in shape is shaped in one pass (see :func:`_shaper`); anything
        else -- every response that will be refused among them -- takes the full check, which
        alone words the refusals.
        """
        try:
            datum = json.loads(response_json)
        except (ValueError, TypeError, RecursionError) as exc:
            raise refuse(
                RefusalReason.RESPONSE_INVALID, f"the response is not JSON: {exc}"
            ) from None
        shape = self._shape
        if shape is not None:
            try:
                return shape(datum)
            except (_Doubt, ValueError, OverflowError, RecursionError):
                pass  # not vouched for: the full check decides, and words any refusal
        return self._checked(datum)

    def _checked(self, datum: Any) -> Any:
        """The full check of a decoded response: fastavro's validation, a write/read round trip
        and the unknown-field walk. The reference :func:`_shaper` is held to."""
        try:
            validate(datum, self._parsed)
        except ValidationError as exc:
            raise refuse(RefusalReason.RESPONSE_INVALID, self._misfit(datum, exc)) from None
        # A write/read round trip gives the datum exactly as a schema reader sees it.
        buffer = io.BytesIO()
        schemaless_writer(buffer, self._parsed, datum)
        buffer.seek(0)
        shaped = schemaless_reader(buffer, self._parsed, None)
        unknown = _unknown_field(datum, shaped, "", _field_names(self.response_schema))
        if unknown is not None:
            raise refuse(
                RefusalReason.RESPONSE_INVALID,
                f"the response has a field the {self.name} schema does not know, at {unknown}",
            )
        return shaped

    def _misfit(self, datum: Any, error: ValidationError) -> str:
        """The refusal's words for a datum fastavro's validation refused: the path and what is
        wrong there, or -- for a construct :func:`_schema_problem` does not follow -- the
        schema fields fastavro names."""
        named = self._parsed.get("__named_schemas", {}) if isinstance(self._parsed, dict) else {}
        try:
            problem = _schema_problem(datum, self._parsed, named, "")
        except RecursionError:
            problem = None
        if problem is None:
            fields = ", ".join(sorted({e.field or "(root)" for e in error.errors}))
            problem = f"at {fields}"
        return f"the response does not fit the {self.name} schema: {problem}"

    def request_problem(self, request_json: str) -> str | None:
        """``check_request`` on a pause's request text: ``None`` when it can be asked (or the
        interaction has no such check), else what is wrong with it."""
        check = self.check_request
        if check is None:
            return None
        try:
            request = json.loads(request_json)
        except (ValueError, TypeError, RecursionError) as exc:
            return f"the request is not JSON: {exc}"
        return _said(cast(Callable[[Any], object], check)(request), self.name, "check_request")

    def mismatch(self, request_json: str, response: Any) -> str | None:
        """``check_response`` on the recorded request's text and a response :meth:`validate`
        returned: ``None`` when the response answers the request (or the interaction has no
        such check -- then the request is not even parsed), else what does not."""
        bind = self._bind
        return None if bind is None else bind(request_json, response)

    def observation(self, response: Any) -> str:
        """The tool-message text for a response returned by :meth:`validate`."""
        return self.render(response)


class InteractionRegistry:
    """Interactions by name. Built once at startup and then only read."""

    __slots__ = ("_by_name",)

    def __init__(self, interactions: Iterable[Interaction] = ()) -> None:
        self._by_name: dict[str, Interaction] = {}
        for interaction in interactions:
            self.add(interaction)

    def add(self, interaction: Interaction) -> Interaction:
        """Register ``interaction``; a second one under a taken name is refused, since a pause
        already handed out would then be answered against a schema it was not issued for."""
        if interaction.name in self._by_name:
            raise ConfigurationError(f"interaction {interaction.name!r} is already registered")
        self._by_name[interaction.name] = interaction
        return interaction

    def register(
        self,
        name: str,
        response_schema: Mapping[str, Any],
        render: Render = render_json,
        *,
        check_request: RequestCheck | None = None,
        check_response: ResponseCheck | None = None,
    ) -> Interaction:
        """Register an interaction by name; ``check_request``/``check_response`` bind its
        answers to what the pause asked (see :class:`Interaction`)::

            def one_of_the_dates(request, response):
                if response["date"] not in request["dates"]:
                    # the place and the reason: a rejection never quotes the answer
                    return f"date: not one of the {len(request['dates'])} dates offered"
                return None

            tl.interactions.register("pick_date", schema, check_response=one_of_the_dates)
        """
        return self.add(
            Interaction(
                name,
                response_schema,
                render,
                check_request=check_request,
                check_response=check_response,
            )
        )

    def get(self, name: str) -> Interaction:
        """The interaction, or ``interaction_unknown``."""
        found = self._by_name.get(name)
        if found is None:
            raise refuse(
                RefusalReason.INTERACTION_UNKNOWN, f"no interaction {name!r} is registered here"
            )
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_name))


def default_interactions() -> InteractionRegistry:
    """A registry holding the built-in ``ask_user`` and ``approve_tool_call``, for a deployment
    to add its own to."""
    return InteractionRegistry(
        [
            Interaction(
                ASK_USER,
                ASK_USER_RESPONSE_SCHEMA,
                render_ask_user,
                check_request=check_ask_user_request,
                check_response=check_ask_user_response,
            ),
            Interaction(APPROVE_TOOL_CALL, APPROVE_TOOL_CALL_RESPONSE_SCHEMA, render_approval),
        ]
    )
