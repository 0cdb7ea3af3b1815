"""Human interactions by name: the response each accepts, and how that response reads to a model.

A pause names its interaction; the answer's response must satisfy that interaction's registered
Avro record schema before anything is consumed (step 4 of the resume contract), because a response
the continuing turn cannot interpret would spend the token on a question nobody answered.
``ask_user`` and ``approve_tool_call`` are built in; a deployment registers its own next to them
(``registry.register(name, response_schema, render)``) without changing turnlog.
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


def render_ask_user(response: Any) -> str:
    """One line per question, selections and free text quoted so that labels containing
    punctuation cannot be misread as several choices."""
    lines = []
    for number, answer in enumerate(response["answers"], start=1):
        parts = []
        if answer["selections"]:
            chosen = ", ".join(json.dumps(s, ensure_ascii=False) for s in answer["selections"])
            parts.append(f"selected {chosen}")
        if answer.get("other") is not None:
            parts.append(f"wrote {json.dumps(answer['other'], ensure_ascii=False)}")
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


@dataclass(frozen=True, slots=True)
class Interaction:
    """One registered interaction: its name, response schema and observation renderer."""

    name: str
    response_schema: Mapping[str, Any]
    render: Render = render_json
    _parsed: Any = field(init=False, repr=False, compare=False)

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

    def validate(self, response_json: str) -> Any:
        """The response as the schema reads it (defaults filled in), or ``response_invalid``."""
        try:
            datum = json.loads(response_json)
        except (ValueError, TypeError, RecursionError) as exc:
            raise refuse(
                RefusalReason.RESPONSE_INVALID, f"the response is not JSON: {exc}"
            ) from None
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
