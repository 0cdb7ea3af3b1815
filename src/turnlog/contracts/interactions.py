"""Human interactions by name: the response each accepts, and how that response reads to a model.

A pause names its interaction; the answer's response must satisfy that interaction's registered
Avro record schema before anything is consumed (step 4 of the resume contract), because a response
the continuing turn cannot interpret would spend the token on a question nobody answered.
``ask_user`` and ``approve_tool_call`` are built in; a deployment registers its own next to them
(``registry.register(name, response_schema, render)``) without changing turnlog.

It is one module, over the usual length, because a response is checked twice over: in one pass
for the common response already in shape, and by the full fastavro check that words every
refusal. The one pass must return exactly what the full check returns; apart, a change to one
would be easy to miss on the other.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

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


def _unknown_field(given: Any, known: Any, path: str) -> str | None:
    """The first key of ``given`` that the schema-shaped ``known`` lacks.

    Avro validation accepts records with extra keys; refusing them catches a client that spells a
    field wrong, whose answer would otherwise be silently read as if that field were absent.
    """
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        for key, value in given.items():
            if key not in known:
                return f"{path}.{key}" if path else str(key)
            found = _unknown_field(value, known[key], f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(given, list) and isinstance(known, list):
        for index, (g, k) in enumerate(zip(given, known, strict=False)):
            found = _unknown_field(g, k, f"{path}[{index}]")
            if found is not None:
                return found
    return None


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
    """One registered interaction: its name, response schema and observation renderer."""

    name: str
    response_schema: Mapping[str, Any]
    render: Render = render_json
    _parsed: Any = field(init=False, repr=False, compare=False)
    _shape: Shape | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigurationError("an interaction needs a name")
        if not isinstance(self.response_schema, Mapping) or self.response_schema.get("type") != (
            "record"
        ):
            raise ConfigurationError(
                f"interaction {self.name!r}: the response schema must be an Avro record"
            )
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
            fields = ", ".join(sorted({e.field or "(root)" for e in exc.errors}))
            raise refuse(
                RefusalReason.RESPONSE_INVALID,
                f"the response does not fit {self.name!r}'s schema at: {fields}",
            ) from None
        # A write/read round trip gives the datum exactly as a schema reader sees it.
        buffer = io.BytesIO()
        schemaless_writer(buffer, self._parsed, datum)
        buffer.seek(0)
        shaped = schemaless_reader(buffer, self._parsed, None)
        unknown = _unknown_field(datum, shaped, "")
        if unknown is not None:
            raise refuse(
                RefusalReason.RESPONSE_INVALID,
                f"the response has a field {self.name!r}'s schema does not know: {unknown}",
            )
        return shaped

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
        self, name: str, response_schema: Mapping[str, Any], render: Render = render_json
    ) -> Interaction:
        return self.add(Interaction(name, response_schema, render))

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
            Interaction(ASK_USER, ASK_USER_RESPONSE_SCHEMA, render_ask_user),
            Interaction(APPROVE_TOOL_CALL, APPROVE_TOOL_CALL_RESPONSE_SCHEMA, render_approval),
        ]
    )
