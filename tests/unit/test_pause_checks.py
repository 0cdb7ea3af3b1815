"""A pause is checked whole before anything is written, so none is ever left without a token.

The recorder here points at a port where nothing listens and the checks must refuse before it
would ever connect: a refusal that took a broker round trip would show up as a timeout instead.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.deployment import REQUEST, Deployment, make_deployment, sample_checkpoint
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.interactions import default_interactions
from turnlog.errors import PauseInvalid
from turnlog.producers.pauses import PauseRecorder, read_checkpoint


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    return make_deployment("127.0.0.1:1", "unit.", "unit-app", tmp_path, partitions=3)


@pytest.fixture
def recorder(dep: Deployment) -> PauseRecorder:
    return PauseRecorder(dep.settings.with_(broker_timeout_seconds=60), dep.issuer)


@pytest.mark.parametrize("seconds", [-5, 0, 0.5])
async def test_a_window_under_one_second_is_refused(
    recorder: PauseRecorder, seconds: float
) -> None:
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(
            sample_checkpoint("t-ttl"), request_json=REQUEST, ttl=timedelta(seconds=seconds)
        )
    assert refused.value.field == "ttl"


async def test_a_pause_whose_messages_reserve_no_asking_round_is_refused(
    recorder: PauseRecorder,
) -> None:
    """An answer to it would be refused ``asking_round_missing`` forever: no token for it."""
    cp = sample_checkpoint("t-no-round")
    no_round = dataclasses.replace(cp, messages=cp.messages[:2])
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(no_round, request_json=REQUEST)
    assert refused.value.field == "messages" and "asking_round_missing" in str(refused.value)


async def test_an_unknown_interaction_is_refused_by_name(recorder: PauseRecorder) -> None:
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(
            sample_checkpoint("t-i"), request_json=REQUEST, interaction="approve_deploy"
        )
    assert refused.value.field == "interaction" and "'approve_deploy'" in str(refused.value)
    # the checkpoint's own name is the default interaction, and is checked the same way
    cp = sample_checkpoint("t-i")
    unknown = TurnCheckpoint(**{**_fields(cp), "name": "nobody_knows"})
    with pytest.raises(PauseInvalid, match="nobody_knows"):
        await recorder.record(unknown, request_json=REQUEST)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"thread_id": 7}, "thread_id"),
        ({"run_id": None}, "run_id"),
        ({"sequence": "1"}, "sequence"),
        ({"sequence": True}, "sequence"),
        ({"sequence": 2**64}, "sequence"),
        ({"thread_id": ""}, "thread_id"),
        ({"thread_id": "a\x00b"}, "thread_id"),
        ({"checkpoint_id": ""}, "checkpoint_id"),
        ({"tool_call_id": "", "interrupt_id": ""}, "tool_call_id"),
        ({"prompt": "\ud800"}, "checkpoint"),
    ],
)
async def test_a_checkpoint_field_of_the_wrong_type_is_refused_by_name(
    recorder: PauseRecorder, change: dict[str, Any], field: str
) -> None:
    cp = sample_checkpoint("t-f")
    bad = TurnCheckpoint(**{**_fields(cp), **change})
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(bad, request_json=REQUEST)
    assert refused.value.field == field


@pytest.mark.parametrize("request_json", ["not json", "[" * 50_000, 42])
async def test_a_request_that_is_not_json_is_refused(
    recorder: PauseRecorder, request_json: Any
) -> None:
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(sample_checkpoint("t-r"), request_json=request_json)
    assert refused.value.field == "request_json"


def _asking(**question: Any) -> dict[str, Any]:
    """A one-question ``ask_user`` request: ``{"question": "Which?"}`` with ``question`` over it."""
    return {"questions": [{"question": "Which?", **question}]}


@pytest.mark.parametrize(
    ("request_value", "detail"),
    [
        ({"question": "Which region?"}, 'the request has no "questions"'),
        ({}, 'the request has no "questions"'),
        ({"q": 1}, 'the request has no "questions"'),
        ("Which region?", "the request must be an object, got text"),
        ({"questions": []}, "questions must be a non-empty list, got an empty list"),
        ({"questions": "Which?"}, "questions must be a non-empty list, got text"),
        ({**_asking(), "extra": 1}, "extra is not a field of an ask_user request"),
        ({"questions": ["Which?"]}, "questions[0] must be an object, got text"),
        ({"questions": [{"options": ["eu"]}]}, "questions[0].question must be non-empty text"),
        (_asking(question=" "), "questions[0].question must be non-empty text, got text"),
        (_asking(choices=["eu"]), "questions[0].choices is not a question field"),
        (_asking(options="eu, us"), "questions[0].options must be a list, got text"),
        (_asking(options=["eu", 3]), "questions[0].options[1] must be non-empty text"),
        (_asking(options=[""]), "questions[0].options[0] must be non-empty text"),
        (_asking(options=[{"name": "eu"}]), "questions[0].options[0].name is not an option"),
        (_asking(options=[{"description": "x"}]), "questions[0].options[0] must be non-empty"),
        (
            _asking(options=["eu", {"label": "eu"}]),
            "questions[0].options[1]: 'eu' is offered twice",
        ),
        (_asking(multiSelect="no"), "questions[0].multiSelect must be true or false, got text"),
        (
            _asking(options=["eu"], multiSelect=True, multi_select=False),
            "questions[0]: multiSelect and multi_select disagree",
        ),
        (_asking(allow_other=0), "questions[0].allow_other must be true or false"),
        (_asking(allow_other=False), "questions[0] offers no options and takes no free text"),
        (_asking(header=5), "questions[0].header must be text"),
    ],
)
async def test_a_request_ask_user_cannot_read_is_refused_by_name(
    recorder: PauseRecorder, request_value: Any, detail: str
) -> None:
    """Issue 28: ``pause(request={"question": ...})`` was accepted, and every answer to it was
    then checked against nothing. Refused before anything is written, naming what is wrong."""
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(sample_checkpoint("t-ask"), request_json=json.dumps(request_value))
    assert refused.value.field == "request_json"
    assert refused.value.detail.startswith(f"ask_user cannot ask it: {detail}"), refused.value


@pytest.mark.parametrize(
    "request_value",
    [
        {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]},
        {"questions": [{"question": "Why?"}, {"question": "Which?", "options": [], "header": "H"}]},
        {
            "questions": [
                {
                    "question": "Deploy where?",
                    "header": "Region",
                    "options": [{"label": "eu-west-1", "description": "Ireland"}, {"label": "us"}],
                    "multiSelect": False,
                    "multi_select": False,
                    "allow_other": False,
                    "allowOther": False,
                }
            ]
        },
    ],
)
def test_a_request_ask_user_can_read_is_prepared(
    recorder: PauseRecorder, request_value: Any
) -> None:
    pause, _, _ = recorder.prepare(
        sample_checkpoint("t-ask-ok"), request_json=json.dumps(request_value)
    )
    assert json.loads(pause.request_json) == request_value


def test_a_registered_interactions_request_check_refuses_the_pause(dep: Deployment) -> None:
    interactions = default_interactions()
    interactions.register(
        "pick_date",
        {"type": "record", "name": "PickDate", "fields": [{"name": "date", "type": "string"}]},
        check_request=lambda request: None if request.get("dates") else "dates: none offered",
    )
    recorder = PauseRecorder(dep.settings, dep.issuer, interactions=interactions)
    with pytest.raises(PauseInvalid) as refused:
        recorder.prepare(
            sample_checkpoint("t-date"), request_json='{"dates": []}', interaction="pick_date"
        )
    assert (refused.value.field, refused.value.detail) == (
        "request_json",
        "pick_date cannot ask it: dates: none offered",
    )
    pause, _, _ = recorder.prepare(
        sample_checkpoint("t-date"),
        request_json='{"dates": ["2026-05-01"]}',
        interaction="pick_date",
    )
    assert pause.response_schema == "pick_date"


def test_approve_tool_call_requests_are_checked_as_before(recorder: PauseRecorder) -> None:
    """The approval's own binding (tool and arguments, the reserved call) is unchanged: a
    request naming no exact call is refused by the trial token."""
    with pytest.raises(PauseInvalid) as refused:
        recorder.prepare(
            sample_checkpoint("t-appr"), request_json=REQUEST, interaction="approve_tool_call"
        )
    assert refused.value.field == "checkpoint" and "approval request" in refused.value.detail


async def test_a_pause_too_large_for_one_record_is_refused(dep: Deployment) -> None:
    recorder = PauseRecorder(dep.settings.with_(max_record_bytes=2000), dep.issuer)
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(
            sample_checkpoint("t-big"),
            request_json=json.dumps({"questions": [{"question": "x" * 3000}]}),
        )
    assert refused.value.field == "checkpoint" and "2000" in refused.value.detail


def test_a_valid_pause_is_prepared_without_io(recorder: PauseRecorder) -> None:
    pause, key, value = recorder.prepare(
        sample_checkpoint("t-ok"), request_json=REQUEST, ttl=timedelta(seconds=60)
    )
    assert key.startswith(b"t-ok\x00") and value[:2] == b"\xc3\x01"
    assert pause.expires_at - pause.occurred_at == timedelta(seconds=60)


# -- the checkpoint file the CLI reads ------------------------------------------------------------


def _body(**change: Any) -> str:
    body = sample_checkpoint("t-file").body()
    body.update(change)
    return json.dumps(body)


def test_a_valid_checkpoint_file_reads_back_equal() -> None:
    cp = sample_checkpoint("t-file")
    assert read_checkpoint(cp.encode()) == cp


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("{not json", "checkpoint"),
        ("[" * 50_000, "checkpoint"),
        ("[]", "checkpoint"),
        ('"text"', "checkpoint"),
        (_body(thread_id=5), "thread_id"),
        (_body(sequence="one"), "sequence"),
        (_body(sequence=1.5), "sequence"),
        (_body(safe_boundary="yes"), "safe_boundary"),
        (_body(created_at="yesterday"), "created_at"),
        (_body(created_at=5), "created_at"),
        (_body(created_at="2026-01-01T00:00:00"), "created_at"),
        (_body(messages="hello"), "messages"),
        (_body(messages=["hello"]), "messages[0]"),
        (_body(messages=[{"role": "wizard", "content": ""}]), "messages[0]"),
        (_body(version=2), "version"),
        (_body(thread="t-typo"), "thread"),
        (_body(thread_id=""), "thread_id"),
    ],
)
def test_a_bad_checkpoint_file_names_the_field(raw: str, field: str) -> None:
    with pytest.raises(PauseInvalid) as refused:
        read_checkpoint(raw)
    assert refused.value.field == field
    assert "\n" not in str(refused.value)


def _fields(cp: TurnCheckpoint) -> dict[str, Any]:
    return {name: getattr(cp, name) for name in TurnCheckpoint.__dataclass_fields__}
