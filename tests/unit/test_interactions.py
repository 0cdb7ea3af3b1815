"""The interaction registry: response schemas, refusals by name, observation text."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
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
    _field_names,
    check_ask_user_request,
    check_ask_user_response,
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


def _reference_unknown_field(
    given: Any, known: Any, path: str, fields: frozenset[str]
) -> str | None:
    """``_unknown_field`` as it was before the one-pass shaping, kept as the reference (its
    words as they are now: the answer's keys told by place and length)."""
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        for position, (key, value) in enumerate(given.items()):
            if key not in known:
                chars = f"{len(key)} character" + ("" if len(key) == 1 else "s")
                name = f"field {position + 1} (a name of {chars})"
                return f"{path}: {name}" if path else name
            if key in fields:
                at = f"{path}.{key}" if path else str(key)
            else:
                at = f"{path}[entry {position}]"
            found = _reference_unknown_field(value, known[key], at, fields)
            if found is not None:
                return found
    elif isinstance(given, list) and isinstance(known, list):
        for index, (g, k) in enumerate(zip(given, known, strict=False)):
            found = _reference_unknown_field(g, k, f"{path}[{index}]", fields)
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
        # The wording is the interaction's own (what is wrong, and where); what is held to the
        # reference here is which responses are refused, and the shapes of those accepted.
        raise refuse(RefusalReason.RESPONSE_INVALID, interaction._misfit(datum, exc)) from None
    buffer = io.BytesIO()
    schemaless_writer(buffer, parsed, datum)
    buffer.seek(0)
    shaped = schemaless_reader(buffer, parsed, None)
    fields = _field_names(interaction.response_schema)
    unknown = _reference_unknown_field(datum, shaped, "", fields)
    if unknown is not None:
        raise refuse(
            RefusalReason.RESPONSE_INVALID,
            f"the response has a field the {interaction.name} schema does not know, at {unknown}",
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
            "the response has a field the ask_user schema does not know, at answers[0]: field 2 "
            "(a name of 4 characters)",
        ),
        (
            '{"answers": [{"selections": [1]}]}',
            "the response does not fit the ask_user schema: "
            "answers[0].selections[0] must be text, got a number",
        ),
        (
            '{"answers": [], "extra": true}',
            "the response has a field the ask_user schema does not know, at field 2 (a name of 5 "
            "characters)",
        ),
        (
            '{"answers": [{"other": "teal"}]}',
            "the response does not fit the ask_user schema: answers[0].selections is missing",
        ),
        (
            '{"answers": [{"selections": ["a"], "other": 3}]}',
            "the response does not fit the ask_user schema: "
            "answers[0].other must be null or text, got a number",
        ),
        (
            '{"answers": {"selections": ["a"]}}',
            "the response does not fit the ask_user schema: answers must be a list, got an object",
        ),
        (
            "[]",
            "the response does not fit the ask_user schema: "
            "the response must be an object, got a list",
        ),
    ],
)
def test_refusals_say_where_and_what_is_wrong(text: str, detail: str) -> None:
    """The path to the field and what is wrong there (missing, of another type), and the
    interaction's name unquoted -- not ``'ask_user''s schema at: ...AskUserAnswer.selections``,
    which named neither the answer nor the fault."""
    with pytest.raises(Refused) as caught:
        _BUILT_IN.get(ASK_USER).validate(text)
    assert caught.value.refusal.detail == detail
    assert outcome(lambda: reference_validate(_BUILT_IN.get(ASK_USER), text)) == (
        "refused",
        RefusalReason.RESPONSE_INVALID,
        detail,
    )


@pytest.mark.parametrize(
    ("name", "text", "detail"),
    [
        (
            APPROVE_TOOL_CALL,
            '{"decision": "yes", "tool": "deploy", "arguments_hash": "h"}',
            "decision must be one of 'approve', 'edit', 'reject', got text of 3 characters",
        ),
        (APPROVE_TOOL_CALL, '{"decision": "edit", "tool": "x"}', "arguments_hash is missing"),
        ("nested", '{"score": 1, "count": 2, "mood": "good", "detail": {"items": [{}]}}',
         "detail.items[0].label is missing"),
        ("nested", '{"score": true, "count": 2, "mood": "good"}',
         "score must be a whole number of 32 bits, got a boolean"),
        ("nested", '{"score": 1, "count": 2, "mood": "good", "tags": {"k": 1}}',
         "tags[entry 0] must be text, got a number"),
    ],
)  # fmt: skip
def test_refusals_say_where_and_what_for_every_schema(name: str, text: str, detail: str) -> None:
    interaction = _CASES[name][0]
    with pytest.raises(Refused) as caught:
        interaction.validate(text)
    assert (
        caught.value.refusal.detail
        == f"the response does not fit the {interaction.name} schema: {detail}"
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


# -- answers bound to what was asked ---------------------------------------------------------

DATES_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PickDate",
    "fields": [{"name": "date", "type": "string"}],
}


def one_of_the_dates(request: Any, response: Any) -> str | None:
    if response["date"] not in request["dates"]:
        return f"date: {response['date']!r} is not one of {request['dates']!r}"
    return None


def test_a_registered_interaction_binds_its_answers_with_its_own_checks() -> None:
    registry = default_interactions()
    pick = registry.register(
        "pick_date",
        DATES_SCHEMA,
        check_request=lambda request: None if request.get("dates") else "dates: none offered",
        check_response=one_of_the_dates,
    )
    assert pick.request_problem('{"dates": ["2026-05-01"]}') is None
    assert pick.request_problem('{"dates": []}') == "dates: none offered"
    assert (pick.request_problem("not json") or "").startswith("the request is not JSON")
    offered = '{"dates": ["2026-05-01"]}'
    assert pick.mismatch(offered, pick.validate('{"date": "2026-05-01"}')) is None
    assert pick.mismatch(offered, pick.validate('{"date": "2026-06-01"}')) == (
        "date: '2026-06-01' is not one of ['2026-05-01']"
    )


def test_without_checks_nothing_is_bound_and_the_request_is_not_read() -> None:
    plain = default_interactions().register("pick_date", DATES_SCHEMA)
    assert plain.request_problem("not json") is None
    assert plain.mismatch("not json", {"date": "x"}) is None


def _says(verdict: Any) -> Callable[..., Any]:
    """A check answering ``verdict`` whatever it is given (typed loosely: the point is a check
    that breaks its contract)."""
    return lambda *given: verdict


def test_a_registered_check_that_answers_neither_none_nor_text_is_a_bug_said_loudly() -> None:
    """``True`` could mean "fine" or "refuse": it is neither read as one nor the other."""
    pick = default_interactions().register(
        "pick_date",
        DATES_SCHEMA,
        check_request=_says(True),
        check_response=_says(False),
    )
    with pytest.raises(TypeError, match="check_request must return None or text"):
        pick.request_problem("{}")
    with pytest.raises(TypeError, match="check_response must return None or text"):
        pick.mismatch("{}", {"date": "x"})
    silent = default_interactions().register(
        "pick_date", DATES_SCHEMA, check_response=lambda request, response: ""
    )
    assert (
        silent.mismatch("{}", {"date": "x"})
        == "pick_date's check_response refused it without saying why"
    )


def test_a_check_that_is_not_callable_is_refused_at_registration() -> None:
    with pytest.raises(ConfigurationError, match="check_response must be callable"):
        default_interactions().register("pick_date", DATES_SCHEMA, check_response="dates")  # type: ignore[arg-type]


def test_the_built_in_ask_user_uses_its_published_checks() -> None:
    ask = _BUILT_IN.get(ASK_USER)
    assert ask.check_request is check_ask_user_request
    assert ask.check_response is check_ask_user_response
    assert _BUILT_IN.get(APPROVE_TOOL_CALL).check_response is None  # bound by its token's claims


_OPTION = st.sampled_from(["eu", "us", "ap", ""]) | st.fixed_dictionaries(
    {"label": st.sampled_from(["eu", "us", 3])}, optional={"description": st.just("d")}
)
_QUESTION = st.fixed_dictionaries(
    {"question": st.sampled_from(["Which?", "", 1])},
    optional={
        "options": st.lists(_OPTION, max_size=3) | st.none(),
        "multiSelect": st.booleans() | st.just("yes"),
        "allow_other": st.booleans(),
        "header": st.just("H"),
        "choices": st.just([]),
    },
)
_REQUESTS = (
    st.fixed_dictionaries(
        {"questions": st.lists(_QUESTION, max_size=3)}, optional={"question": st.just("Which?")}
    )
    | _JSON
)
_ANSWERS = st.fixed_dictionaries(
    {
        "answers": st.lists(
            st.fixed_dictionaries(
                {
                    "selections": st.lists(st.sampled_from(["eu", "us", "mars"]), max_size=3),
                    "other": st.none() | st.sampled_from(["", " ", "x"]),
                }
            ),
            max_size=4,
        )
    }
)


@settings(max_examples=250, deadline=None)
@given(request=_REQUESTS, response=_ANSWERS)
def test_the_worker_reads_each_request_text_once_to_the_same_verdict(
    request: Any, response: dict[str, Any]
) -> None:
    """The worker's path (the request's text, read once and remembered) gives exactly what the
    published check gives on the parsed request -- first reading and remembered alike."""
    ask = _BUILT_IN.get(ASK_USER)
    text = json.dumps(request)
    expected = check_ask_user_response(request, response)
    assert ask.mismatch(text, response) == expected
    assert ask.mismatch(text, response) == expected
    problem = check_ask_user_request(request)
    assert ask.request_problem(text) == problem
    if problem is None and expected is None:
        assert len(response["answers"]) == len(request["questions"])


def test_the_question_the_interactions_page_shows_is_one_ask_user_asks() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "pauses.md").read_text()
    (block,) = re.findall(r"^```json\n(.*?)^```", page, re.S | re.M)
    question = json.loads(block)
    assert check_ask_user_request({"questions": [question]}) is None
    assert set(question) == {"question", "header", "options", "multiSelect", "allow_other"}


@pytest.mark.parametrize(
    "request_value",
    [{"tool": "deploy", "arguments": {"env": "prod"}}, {"tool": "deploy", "arguments": {}}],
)
def test_an_approval_request_paused_as_ask_user_is_pointed_to_approve_tool_call(
    request_value: dict[str, Any],
) -> None:
    """Issue 37: an approval paused without ``interaction=`` was refused as an ``ask_user``
    request with no word of the interaction it needed."""
    problem = check_ask_user_request(request_value)
    assert problem is not None
    assert "APPROVE_TOOL_CALL" in problem and APPROVE_TOOL_CALL in problem, problem
    assert "interaction=" in problem, problem


def test_a_refusal_tells_the_answers_keys_by_place_never_quoting_them() -> None:
    """A map's keys and an unknown field's name are the answer's text: a rejection, kept past
    ``turnlog forget``, names where they are and how long, not what they say."""
    schema = {
        "type": "record",
        "name": "Tagged",
        "fields": [
            {
                "name": "tags",
                "type": {
                    "type": "map",
                    "values": {
                        "type": "record",
                        "name": "Tag",
                        "fields": [{"name": "label", "type": "string"}],
                    },
                },
            }
        ],
    }
    tagged = Interaction("tagged", schema)
    for response, detail in (
        (
            {"tags": {"SECRETKEY": {"label": "x", "SECRETFIELD": 1}}},
            "the response has a field the tagged schema does not know, at tags[entry 0]: "
            "field 2 (a name of 11 characters)",
        ),
        (
            {"tags": {"SECRETKEY": {"label": 3}}},
            "the response does not fit the tagged schema: tags[entry 0].label must be text, "
            "got a number",
        ),
    ):
        with pytest.raises(Refused) as caught:
            tagged.validate(json.dumps(response))
        assert caught.value.refusal.detail == detail
        assert "SECRET" not in caught.value.refusal.detail
