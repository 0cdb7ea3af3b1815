"""The interaction registry: response schemas, refusals by name, observation text."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.validation import ValidationError, validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, APPROVE_TOOL_CALL_RESPONSE_SCHEMA
from turnlog.contracts.interactions import (
    ASK_USER,
    ASK_USER_RESPONSE_SCHEMA,
    Interaction,
    InteractionRegistry,
    default_interactions,
    render_ask_user,
)
from turnlog.contracts.refusals import RefusalReason, Refused, refuse
from turnlog.errors import ConfigurationError

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Approval",
    "fields": [
        {"name": "approved", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def refused_as(reason: RefusalReason, registry: InteractionRegistry, name: str, text: str) -> None:
    with pytest.raises(Refused) as caught:
        registry.get(name).validate(text)
    assert caught.value.reason is reason, caught.value


def test_ask_user_and_approve_tool_call_are_built_in() -> None:
    registry = default_interactions()
    assert ASK_USER in registry
    assert registry.names == ("approve_tool_call", ASK_USER)


def test_ask_user_response_validates_and_fills_defaults() -> None:
    response = (
        default_interactions()
        .get(ASK_USER)
        .validate(
            json.dumps({"answers": [{"selections": ["Blue"]}, {"selections": [], "other": "teal"}]})
        )
    )
    assert response == {
        "answers": [{"selections": ["Blue"], "other": None}, {"selections": [], "other": "teal"}]
    }


def test_ask_user_observation_quotes_every_choice() -> None:
    registry = default_interactions()
    ask = registry.get(ASK_USER)
    text = ask.observation(
        ask.validate(
            json.dumps(
                {
                    "answers": [
                        {"selections": ["Red, dark", "Blue"], "other": None},
                        {"selections": [], "other": "something else"},
                        {"selections": [], "other": None},
                    ]
                }
            )
        )
    )
    assert text == (
        "The person answered.\n"
        'answer 1: selected "Red, dark", "Blue"\n'
        'answer 2: wrote "something else"\n'
        "answer 3: no selection"
    )
    assert render_ask_user({"answers": []}).startswith("The person answered without")


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps({"answers": "Blue"}),
        json.dumps({"answers": [{"selections": [1]}]}),
        json.dumps({"answers": [{"selections": ["a"], "other": 3}]}),
        json.dumps({}),
        json.dumps({"answers": [{"selections": ["a"], "othr": "typo"}]}),
        json.dumps({"answers": [], "extra": True}),
        "[" * 100_000,
    ],
)
def test_invalid_ask_user_responses_are_refused(text: str) -> None:
    refused_as(RefusalReason.RESPONSE_INVALID, default_interactions(), ASK_USER, text)


def test_unknown_interaction_is_refused_by_name() -> None:
    with pytest.raises(Refused) as caught:
        default_interactions().get("approve_payment")
    assert caught.value.reason is RefusalReason.INTERACTION_UNKNOWN
    assert caught.value.refusal.step == 4


def test_a_deployment_registers_its_own_interaction() -> None:
    registry = default_interactions()
    registry.register(
        "approve_payment", APPROVAL_SCHEMA, lambda r: "approved" if r["approved"] else "declined"
    )
    approval = registry.get("approve_payment")
    response = approval.validate('{"approved": true}')
    assert response == {"approved": True, "note": None}
    assert approval.observation(response) == "approved"
    refused_as(RefusalReason.RESPONSE_INVALID, registry, "approve_payment", '{"approved": "yes"}')


def test_default_observation_is_canonical_json() -> None:
    registry = InteractionRegistry([Interaction("approve", APPROVAL_SCHEMA)])
    approval = registry.get("approve")
    assert approval.observation(approval.validate('{"note": "ok",  "approved": false}')) == (
        '{"approved":false,"note":"ok"}'
    )


def test_a_name_is_registered_once() -> None:
    registry = default_interactions()
    with pytest.raises(ConfigurationError):
        registry.register(ASK_USER, APPROVAL_SCHEMA)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "record", "name": "Broken", "fields": [{"name": "x", "type": "no_such_type"}]},
        {"type": "record", "fields": []},
    ],
)
def test_a_schema_that_is_not_a_valid_record_is_refused_at_registration(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(ConfigurationError):
        Interaction("broken", schema)


# -- the one-pass shaping against the full check it stands in for -------------------------------


def _reference_unknown_field(given: Any, known: Any, path: str) -> str | None:
    """``_unknown_field`` as it was before the one-pass shaping, kept as the reference."""
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        for key, value in given.items():
            if key not in known:
                return f"{path}.{key}" if path else str(key)
            found = _reference_unknown_field(
                value, known[key], f"{path}.{key}" if path else str(key)
            )
            if found is not None:
                return found
    elif isinstance(given, list) and isinstance(known, list):
        for index, (g, k) in enumerate(zip(given, known, strict=False)):
            found = _reference_unknown_field(g, k, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def reference_validate(interaction: Interaction, response_json: str) -> Any:
    """``Interaction.validate`` as it was before the one-pass shaping: fastavro's validation, a
    write/read round trip through bytes, and the unknown-field walk, for every response."""
    parsed = parse_schema(json.loads(json.dumps(interaction.response_schema)))
    try:
        datum = json.loads(response_json)
    except (ValueError, TypeError, RecursionError) as exc:
        raise refuse(RefusalReason.RESPONSE_INVALID, f"the response is not JSON: {exc}") from None
    try:
        validate(datum, parsed)
    except ValidationError as exc:
        fields = ", ".join(sorted({e.field or "(root)" for e in exc.errors}))
        raise refuse(
            RefusalReason.RESPONSE_INVALID,
            f"the response does not fit {interaction.name!r}'s schema at: {fields}",
        ) from None
    buffer = io.BytesIO()
    schemaless_writer(buffer, parsed, datum)
    buffer.seek(0)
    shaped = schemaless_reader(buffer, parsed, None)
    unknown = _reference_unknown_field(datum, shaped, "")
    if unknown is not None:
        raise refuse(
            RefusalReason.RESPONSE_INVALID,
            f"the response has a field {interaction.name!r}'s schema does not know: {unknown}",
        )
    return shaped


def outcome(check: Callable[[], Any]) -> tuple[Any, ...]:
    """What a check did, comparable: the value's repr (dict order and int/float told apart), the
    refusal's reason and detail, or the exception that escaped."""
    try:
        return ("accepted", repr(check()))
    except Refused as refused:
        return ("refused", refused.refusal.reason, refused.refusal.detail)
    except Exception as exc:  # an exception that escaped one must escape the other alike
        return ("raised", type(exc), str(exc))


#: Every construct the one-pass shaping covers: nested and recursive records, a named enum used
#: again by name, a map, defaults of each kind, a nullable field without a default.
NESTED_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Survey",
    "namespace": "tests.survey",
    "fields": [
        {"name": "score", "type": "int"},
        {"name": "weight", "type": "double", "default": 1},
        {"name": "count", "type": "long"},
        {"name": "ok", "type": "boolean", "default": False},
        {"name": "mood", "type": {"type": "enum", "name": "Mood", "symbols": ["good", "bad"]}},
        {"name": "previous", "type": ["null", "Mood"], "default": None},
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {"k": "v"}},
        {
            "name": "detail",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Detail",
                    "fields": [
                        {"name": "note", "type": "string", "default": "none"},
                        {
                            "name": "items",
                            "type": {
                                "type": "array",
                                "items": {
                                    "type": "record",
                                    "name": "Item",
                                    "fields": [
                                        {"name": "label", "type": "string"},
                                        {"name": "extra", "type": ["string", "null"]},
                                    ],
                                },
                            },
                        },
                    ],
                },
            ],
        },
        {"name": "next", "type": ["null", "Survey"], "default": None},
    ],
}

#: A float and a logical type: no one-pass shaping, every response takes the full check.
UNSHAPED_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "value", "type": "float"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.just("\ud800"),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def near(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values for ``schema`` that are mostly in shape, with every kind of fault mixed in now and
    then: any JSON in place of a value, fields left out, keys added, ints out of range, enum
    symbols it lacks, lone surrogates."""
    return rarely(_near(schema, named), _JSON)


def rarely(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.integers(0, 11).flatmap(lambda n: bad if n == 0 else good)


def _near(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of(*(near(branch, named) for branch in schema))
    if isinstance(schema, str):
        if schema in named:
            return st.deferred(lambda: near(named[schema], named))
        schema = {"type": schema}
    kind = schema["type"]
    if isinstance(kind, (list, dict)) or (isinstance(kind, str) and kind in named):
        return near(kind, named)
    simple: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
        "null": (st.none(), st.just(0)),
        "boolean": (st.booleans(), st.sampled_from([0, 1])),
        "string": (st.text(max_size=8), st.just("\ud800") | st.text(max_size=4).map("\udfff".join)),
        "int": (st.integers(-(2**31), 2**31 - 1), st.integers() | st.just(2**31)),
        "long": (st.integers(-(2**63), 2**63 - 1), st.just(2**63) | st.just(-(2**63) - 1)),
        "double": (st.floats() | st.integers(-(10**6), 10**6), st.just(10**400)),
        "float": (st.floats(width=32) | st.integers(-100, 100), st.just("1.5")),
    }
    if kind in simple:
        return rarely(*simple[kind])
    if kind == "enum":
        named[schema["name"]] = schema
        return rarely(st.sampled_from(schema["symbols"]), st.sampled_from(["neutral", "Good"]))
    if kind == "array":
        return st.lists(near(schema["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), near(schema["values"], named), max_size=3)
    named[schema["name"]] = schema
    fields = {f["name"]: near(f["type"], named) for f in schema["fields"]}
    optional = {
        f["name"]
        for f in schema["fields"]
        if "default" in f or (isinstance(f["type"], list) and "null" in f["type"])
    }
    good = st.fixed_dictionaries(
        {name: value for name, value in fields.items() if name not in optional},
        optional={name: value for name, value in fields.items() if name in optional},
    )
    unknown = st.fixed_dictionaries(
        {name: value for name, value in fields.items() if name not in optional} | {"othr": _JSON},
        optional={name: value for name, value in fields.items() if name in optional},
    )
    bad = unknown | st.fixed_dictionaries(
        {},
        optional={
            **fields,
            "othr": _JSON,
            "-type": st.sampled_from([schema["name"], f"tests.survey.{schema['name']}"]),
        },
    )
    return rarely(good, bad)


def _registered(schema: dict[str, Any]) -> tuple[Interaction, st.SearchStrategy[Any]]:
    return Interaction("custom", schema), near(schema, {})


_BUILT_IN = default_interactions()
_CASES = {
    ASK_USER: (_BUILT_IN.get(ASK_USER), near(dict(ASK_USER_RESPONSE_SCHEMA), {})),
    APPROVE_TOOL_CALL: (
        _BUILT_IN.get(APPROVE_TOOL_CALL),
        near(dict(APPROVE_TOOL_CALL_RESPONSE_SCHEMA), {}),
    ),
    "nested": _registered(NESTED_SCHEMA),
    "unshaped": _registered(UNSHAPED_SCHEMA),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_validate_accepts_and_refuses_exactly_as_the_full_check(
    case: str, data: st.DataObject
) -> None:
    interaction, values = _CASES[case]
    text = data.draw(st.one_of(values.map(json.dumps), st.text(max_size=12)))
    expected = outcome(lambda: reference_validate(interaction, text))
    assert outcome(lambda: interaction.validate(text)) == expected
    if expected[0] == "accepted" and case != "unshaped":
        # ... and a response the full check accepts never needed it: the one pass vouched.
        shape = interaction._shape
        assert shape is not None
        assert repr(shape(json.loads(text))) == expected[1]


def test_the_shaping_covers_the_built_in_interactions_and_leaves_others_to_the_full_check() -> None:
    assert _BUILT_IN.get(ASK_USER)._shape is not None
    assert _BUILT_IN.get(APPROVE_TOOL_CALL)._shape is not None
    assert Interaction("custom", NESTED_SCHEMA)._shape is not None
    assert Interaction("custom", UNSHAPED_SCHEMA)._shape is None


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (
            '{"answers": [{"selections": ["a"], "othr": "typo"}]}',
            "the response has a field 'ask_user''s schema does not know: answers[0].othr",
        ),
        (
            '{"answers": [{"selections": [1]}]}',
            "the response does not fit 'ask_user''s schema at: "
            "turnlog.interactions.AskUserAnswer.selections",
        ),
        (
            '{"answers": [], "extra": true}',
            "the response has a field 'ask_user''s schema does not know: extra",
        ),
    ],
)
def test_refusals_keep_their_detail(text: str, detail: str) -> None:
    with pytest.raises(Refused) as caught:
        _BUILT_IN.get(ASK_USER).validate(text)
    assert caught.value.refusal.detail == detail
    assert outcome(lambda: reference_validate(_BUILT_IN.get(ASK_USER), text)) == (
        "refused",
        RefusalReason.RESPONSE_INVALID,
        detail,
    )


def test_shaped_responses_come_in_field_order_with_defaults_filled_in_afresh() -> None:
    survey = Interaction("custom", NESTED_SCHEMA)
    first = survey.validate('{"mood": "bad", "count": 2, "score": 1, "detail": null}')
    assert list(first) == [f["name"] for f in NESTED_SCHEMA["fields"]]
    assert first["weight"] == 1.0 and type(first["weight"]) is float
    first["tags"]["k"] = "changed"
    second = survey.validate('{"mood": "bad", "count": 2, "score": 1, "detail": null}')
    assert second["tags"] == {"k": "v"}


def reference_render_ask_user(response: Any) -> str:
    """``render_ask_user`` as it was, quoting with ``json.dumps`` for every label."""
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


_LABELS = st.text(max_size=8) | st.sampled_from(['"', "\\", "\n", "é", "\u2028", "\ud800", "😀"])


@settings(max_examples=300, deadline=None)
@given(
    answers=st.lists(
        st.fixed_dictionaries(
            {"selections": st.lists(_LABELS, max_size=3)},
            optional={"other": st.none() | _LABELS | _JSON},
        ),
        max_size=4,
    )
)
def test_the_ask_user_observation_is_the_one_json_dumps_quoting_gave(
    answers: list[dict[str, Any]],
) -> None:
    response = {"answers": answers}
    assert render_ask_user(response) == reference_render_ask_user(response)
