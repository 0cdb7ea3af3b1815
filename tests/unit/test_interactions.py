"""The interaction registry: response schemas, refusals by name, observation text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from turnlog.contracts.interactions import (
    ASK_USER,
    Interaction,
    InteractionRegistry,
    default_interactions,
    render_ask_user,
)
from turnlog.contracts.refusals import RefusalReason, Refused
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
