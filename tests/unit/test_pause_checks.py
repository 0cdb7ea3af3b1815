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


async def test_a_pause_too_large_for_one_record_is_refused(dep: Deployment) -> None:
    recorder = PauseRecorder(dep.settings.with_(max_record_bytes=2000), dep.issuer)
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(
            sample_checkpoint("t-big"), request_json=json.dumps({"q": "x" * 3000})
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
