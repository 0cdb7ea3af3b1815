"""The checkpoint: capturing the asking round, and its canonical JSON body."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.contracts.checkpoint import (
    ReservedCall,
    TurnCheckpoint,
    captured_messages,
)
from turnlog.contracts.messages import reserved_call_ids
from turnlog.wire import codec

TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "You plan releases."},
    {"role": "user", "content": "Ship 2.0 to prod, after checks."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c0", "name": "run_checks", "arguments": "{}"}],
    },
    {"role": "tool", "content": "all green", "tool_call_id": "c0"},
]


def _paused_round() -> tuple[dict[str, Any], ...]:
    return captured_messages(
        TRANSCRIPT,
        "I need approval, and I'll tag and notify in the same round.",
        [
            ReservedCall("c1", "approve", {"release": "2.0", "env": "prod"}),
            {"id": "c2", "name": "tag", "arguments": '{"tag":"v2.0"}'},
            ReservedCall("c3", "notify"),
        ],
    )


def test_the_asking_round_is_captured_after_the_closed_rounds() -> None:
    messages = _paused_round()
    assert len(messages) == len(TRANSCRIPT) + 1
    assert [m["role"] for m in messages[:-1]] == [m["role"] for m in TRANSCRIPT]
    asking = messages[-1]
    assert asking["role"] == "assistant"
    assert asking["content"] == "I need approval, and I'll tag and notify in the same round."
    assert asking["tool_calls"] == [
        {"id": "c1", "name": "approve", "arguments": '{"env":"prod","release":"2.0"}'},
        {"id": "c2", "name": "tag", "arguments": '{"tag":"v2.0"}'},
        {"id": "c3", "name": "notify", "arguments": "{}"},
    ]
    # The ids a resumed transcript must answer are the reserved ones, in the order reserved,
    # not the closed round's c0.
    assert reserved_call_ids(list(messages)) == ["c1", "c2", "c3"]


def test_closed_rounds_are_normalised_to_the_full_vocabulary() -> None:
    messages = captured_messages(TRANSCRIPT)
    assert len(messages) == len(TRANSCRIPT)
    for message in messages:
        assert set(message) == {"role", "content", "tool_calls", "tool_call_id", "name"}
    assert messages[3]["tool_call_id"] == "c0"
    assert messages[0]["tool_calls"] == [] and messages[0]["name"] is None


def test_without_reserved_calls_no_asking_round_is_invented() -> None:
    assert captured_messages(TRANSCRIPT, "some text") == captured_messages(TRANSCRIPT)


def test_a_message_with_an_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="role"):
        captured_messages([{"role": "robot", "content": "beep"}])


def test_a_paused_round_survives_the_wire_and_canonical_json() -> None:
    checkpoint = TurnCheckpoint(
        thread_id="th",
        checkpoint_id="cp",
        tool_call_id="c1",
        messages=_paused_round(),
        created_at=datetime(2025, 2, 3, 4, 5, 6, 7000, tzinfo=UTC),
    )
    assert codec.decode(codec.encode(checkpoint)) == checkpoint
    assert TurnCheckpoint.decode(checkpoint.encode()) == checkpoint
    assert reserved_call_ids(list(TurnCheckpoint.decode(checkpoint.encode()).messages)) == [
        "c1",
        "c2",
        "c3",
    ]


# --- canonical JSON --------------------------------------------------------------------------

text = st.text(max_size=20)


@given(
    st.builds(
        TurnCheckpoint,
        run_id=text,
        thread_id=text,
        prompt=text,
        sequence=st.integers(),
        created_at=st.datetimes(timezones=st.just(UTC)),
        safe_boundary=st.booleans(),
        messages=st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant"]), "content": text},
                optional={"name": text, "tool_call_id": text},
            ),
            max_size=3,
        ).map(tuple),
    )
)
def test_canonical_json_round_trips_and_is_deterministic(checkpoint: TurnCheckpoint) -> None:
    body = checkpoint.encode()
    assert body == checkpoint.encode()
    assert TurnCheckpoint.decode(body) == checkpoint
    assert TurnCheckpoint.decode(body).encode() == body
    assert body == json.dumps(
        json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def test_equal_checkpoints_give_equal_bodies_whatever_the_caller_left_out() -> None:
    sparse = TurnCheckpoint(messages=({"content": "hi", "role": "user"},))
    full = TurnCheckpoint(
        messages=(
            {"role": "user", "content": "hi", "tool_calls": [], "tool_call_id": None, "name": None},
        )
    )
    assert sparse.encode() == full.encode()


@pytest.mark.parametrize("version", [0, 2, None, "1"])
def test_a_body_of_another_version_is_refused(version: object) -> None:
    body = json.loads(TurnCheckpoint(thread_id="t").encode())
    body["version"] = version
    with pytest.raises(ValueError, match="version"):
        TurnCheckpoint.decode(json.dumps(body))


def test_a_body_without_a_version_is_refused() -> None:
    body = json.loads(TurnCheckpoint(thread_id="t").encode())
    del body["version"]
    with pytest.raises(ValueError, match="version"):
        TurnCheckpoint.decode(json.dumps(body))


@pytest.mark.parametrize(
    "raw", ["not json", "[1, 2]", b"\xff\xfe", '{"version": 1, "messages": 3}']
)
def test_a_body_that_is_not_a_turn_state_is_refused(raw: str | bytes) -> None:
    with pytest.raises(ValueError):
        TurnCheckpoint.decode(raw)


def test_a_naive_created_at_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        TurnCheckpoint(created_at=datetime(2025, 1, 1))
