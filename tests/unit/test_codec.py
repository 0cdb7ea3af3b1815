"""The codec's laws: round trips, determinism, and refusal of every tampered record by name."""

from __future__ import annotations

import io
import json
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import avro.io
import avro.schema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.clock import truncate_ms, utc_now
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    AskUserAnswered,
    Event,
    PauseExpired,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.messages import ROLES
from turnlog.errors import DecodeError
from turnlog.wire import codec
from turnlog.wire.records import to_record

REASONS = {
    "not_single_object",
    "unknown_fingerprint",
    "unexpected_type",
    "truncated_body",
    "malformed_body",
    "trailing_bytes",
    "unsupported_version",
    "invalid_value",
    # a first byte flipped to 0: the registry wire's magic byte, naming an id nobody resolves
    "unknown_schema_id",
}

# --- strategies ------------------------------------------------------------------------------

text = st.text(max_size=24)  # the default alphabet spans all of Unicode except surrogates
opt_text = st.none() | text
moments = st.datetimes(timezones=st.just(UTC)).map(truncate_ms)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)

tool_calls = st.fixed_dictionaries({"id": text, "name": text, "arguments": text})
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(sorted(ROLES)),
            "content": text,
            "tool_calls": st.lists(tool_calls, max_size=3),
            "tool_call_id": opt_text,
            "name": opt_text,
        }
    ),
    max_size=4,
).map(tuple)

checkpoints = st.builds(
    TurnCheckpoint,
    run_id=text,
    session_id=text,
    thread_id=text,
    checkpoint_id=text,
    scope_hash=text,
    tool_call_id=text,
    interrupt_id=text,
    name=text,
    prompt=text,
    messages=messages,
    sequence=int64,
    tenant_id=text,
    created_at=moments,
    package_version=text,
    safe_boundary=st.booleans(),
)

_base: dict[str, Any] = {"event_id": text, "occurred_at": moments, "package_version": text}

events = st.one_of(
    st.builds(
        PauseRecorded,
        **_base,
        checkpoint=checkpoints,
        token_id=text,
        request_json=text,
        request_hash=text,
        response_schema=text,
        expires_at=moments,
    ),
    st.builds(
        AnswerSubmitted,
        **_base,
        answer_id=text,
        token=text,
        thread_id=text,
        scope_hash=opt_text,
        session_id=opt_text,
        run_id=opt_text,
        call_id=opt_text,
        response_json=text,
        submitted_at=moments,
    ),
    st.builds(
        TokenConsumed,
        **_base,
        token_id=text,
        answer_id=text,
        thread_id=text,
        checkpoint_id=text,
        outcome=st.sampled_from(["resumed", "expired"]),
    ),
    st.builds(
        AnswerRejected,
        **_base,
        answer_id=text,
        token_id=opt_text,
        thread_id=opt_text,
        reason=text,
        step=int32,
        detail=text,
    ),
    st.builds(
        PauseExpired,
        **_base,
        token_id=text,
        thread_id=text,
        checkpoint_id=text,
        run_id=text,
        session_id=text,
        tool_call_id=text,
        expires_at=moments,
    ),
    st.builds(
        TurnResumed,
        **_base,
        token_id=text,
        answer_id=text,
        run_id=text,
        session_id=text,
        thread_id=text,
        checkpoint_id=text,
        interrupt_id=text,
        tool_call_id=text,
        name=text,
        prompt=text,
        response_json=text,
        history=messages,
        answered=st.none()
        | st.builds(
            AskUserAnswered,
            selected_labels=st.lists(text, max_size=3).map(tuple),
            has_other=st.booleans(),
            time_to_answer_seconds=st.floats(allow_nan=False),
        ),
    ),
)

values = checkpoints | events

# --- laws ------------------------------------------------------------------------------------


@given(values)
def test_every_value_round_trips_unchanged(value: Any) -> None:
    data = codec.encode(value)
    assert codec.decode(data) == value
    assert codec.decode(data, type(value)) == value


@given(values)
def test_encoding_is_deterministic(value: Any) -> None:
    assert codec.encode(value) == codec.encode(value)
    # A value rebuilt from its own decoded copy writes the very same bytes.
    assert codec.encode(codec.decode(codec.encode(value))) == codec.encode(value)


@given(values)
def test_header_is_magic_then_the_writer_schema_fingerprint(value: Any) -> None:
    data = codec.encode(value)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == codec.fingerprint_of(type(value).__name__)


@settings(max_examples=300)
@given(values, st.data())
def test_a_flipped_byte_is_refused_by_name_or_reads_as_a_valid_value(
    value: Any, data: st.DataObject
) -> None:
    encoded = codec.encode(value)
    index = data.draw(st.integers(0, len(encoded) - 1), label="index")
    mask = data.draw(st.integers(1, 255), label="mask")
    tampered = bytearray(encoded)
    tampered[index] ^= mask
    try:
        decoded = codec.decode(bytes(tampered))
    except DecodeError as exc:
        assert exc.reason in REASONS
        if index < 10:
            assert exc.reason in {"not_single_object", "unknown_fingerprint", "unknown_schema_id"}
    else:
        assert isinstance(decoded, TurnCheckpoint | Event)
        again = codec.encode(decoded)
        assert codec.encode(codec.decode(again)) == again


@given(values)
def test_every_truncation_is_refused(value: Any) -> None:
    encoded = codec.encode(value)
    for end in range(len(encoded)):
        with pytest.raises(DecodeError) as caught:
            codec.decode(encoded[:end])
        expected = "not_single_object" if end < 10 else "truncated_body"
        assert caught.value.reason == expected, end


@given(values, st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_refused(value: Any, tail: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        codec.decode(codec.encode(value) + tail)
    assert caught.value.reason == "trailing_bytes"


@given(values)
def test_the_apache_avro_library_reads_what_turnlog_writes(value: Any) -> None:
    name = type(value).__name__
    schema = avro.schema.parse(json.dumps(codec.schema_for(name)))
    body = codec.encode(value)[10:]
    read = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(body)))
    assert read == to_record(value)


def test_turnlog_reads_what_the_apache_avro_library_writes() -> None:
    moment = datetime(2025, 3, 4, 5, 6, 7, 891000, tzinfo=UTC)
    value = AnswerRejected(
        event_id="e-1",
        occurred_at=moment,
        package_version="0.1.0",
        answer_id="a-1",
        token_id=None,
        thread_id="t-ü",
        reason="scope_mismatch",
        step=3,
        detail="the answer names another scope",
    )
    schema = avro.schema.parse(json.dumps(codec.schema_for("AnswerRejected")))
    body = io.BytesIO()
    avro.io.DatumWriter(schema).write(to_record(value), avro.io.BinaryEncoder(body))
    framed = b"\xc3\x01" + codec.fingerprint_of("AnswerRejected") + body.getvalue()
    assert codec.decode(framed) == value


# --- refusals by name ------------------------------------------------------------------------


def _sample() -> TokenConsumed:
    return TokenConsumed(
        event_id="e",
        occurred_at=datetime(2025, 1, 1, tzinfo=UTC),
        package_version="0.1.0",
        token_id="tok",
        answer_id="ans",
        thread_id="th",
        checkpoint_id="cp",
        outcome="resumed",
    )


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


@pytest.mark.parametrize("data", [b"", b"\xc3", b"\xc3\x01abc", b'{"json": 1}', b"\x01" * 40])
def test_bytes_that_are_not_single_object_encoded_are_refused(data: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        codec.decode(data)
    assert caught.value.reason == "not_single_object"


def test_a_tombstone_is_refused_not_crashed_on() -> None:
    with pytest.raises(DecodeError) as caught:
        codec.decode(None)  # type: ignore[call-overload]
    assert caught.value.reason == "not_single_object"


def test_an_unknown_fingerprint_is_refused_by_name() -> None:
    data = codec.encode(_sample())
    forged = data[:2] + bytes(8) + data[10:]
    with pytest.raises(DecodeError) as caught:
        codec.decode(forged)
    assert caught.value.reason == "unknown_fingerprint"
    assert "0000000000000000" in caught.value.detail


def test_the_expected_type_is_enforced() -> None:
    data = codec.encode(_sample())
    assert codec.decode(data, Event) == _sample()
    with pytest.raises(DecodeError) as caught:
        codec.decode(data, AnswerRejected)
    assert caught.value.reason == "unexpected_type"


def test_a_part_of_a_value_is_not_a_value() -> None:
    # A bare ToolCall is valid Avro with a known fingerprint, but no turnlog value on its own.
    data = b"\xc3\x01" + codec.fingerprint_of("ToolCall") + b"\x02a\x02b\x04{}"
    with pytest.raises(DecodeError) as caught:
        codec.decode(data)
    assert caught.value.reason == "unexpected_type"


def test_an_out_of_range_role_is_malformed() -> None:
    # One message whose role enum index is 9 (zig-zag 0x12): no such symbol.
    checkpoint = TurnCheckpoint(messages=({"role": "user", "content": ""},))
    data = bytearray(codec.encode(checkpoint))
    start = 10 + 9  # nine empty strings, then the message array's block count
    assert data[start : start + 2] == b"\x02\x02"  # one item; role index 1 ("user")
    data[start + 1] = 0x12
    with pytest.raises(DecodeError) as caught:
        codec.decode(bytes(data))
    assert caught.value.reason == "malformed_body"


def test_a_checkpoint_of_an_unknown_turn_state_version_is_refused() -> None:
    checkpoint = TurnCheckpoint(thread_id="t", version=2)
    with pytest.raises(DecodeError) as caught:
        codec.decode(codec.encode(checkpoint))
    assert caught.value.reason == "unsupported_version"


def test_no_library_exception_escapes_random_bodies() -> None:
    # Valid headers for every schema, followed by deterministic pseudo-random bodies.
    rng = random.Random(1234)
    for name in ("TurnCheckpoint", "PauseRecorded", "AnswerSubmitted", "TurnResumed"):
        header = b"\xc3\x01" + codec.fingerprint_of(name)
        for _ in range(300):
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60)))
            try:
                codec.decode(header + body)
            except DecodeError as exc:
                assert exc.reason in REASONS


# --- encode refusals -------------------------------------------------------------------------


def test_sub_millisecond_timestamps_are_refused_on_encode() -> None:
    moment = datetime(2025, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    event = _sample()
    with pytest.raises(ValueError, match=r"TokenConsumed\.occurred_at.*milliseconds"):
        codec.encode(TokenConsumed(**{**_fields(event), "occurred_at": moment}))
    with pytest.raises(ValueError, match=r"created_at.*milliseconds"):
        codec.encode(TurnCheckpoint(created_at=moment))


def test_naive_timestamps_are_refused_on_encode() -> None:
    event = PauseExpired(
        event_id="e",
        occurred_at=datetime(2025, 1, 1),
        package_version="v",
        token_id="t",
        thread_id="th",
        checkpoint_id="c",
        run_id="r",
        session_id="s",
        tool_call_id="call",
        expires_at=datetime(2025, 1, 1, tzinfo=UTC),
    )
    with pytest.raises(ValueError, match="timezone-aware"):
        codec.encode(event)


def test_values_outside_the_schema_are_refused_on_encode() -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        codec.encode(TurnCheckpoint(sequence=2**63))
    with pytest.raises(ValueError, match="cannot be written"):
        codec.encode(TurnCheckpoint(prompt="\ud800"))  # a lone surrogate is not UTF-8
    with pytest.raises(TypeError, match="writes only"):
        codec.encode({"role": "user"})  # type: ignore[arg-type]


def test_other_zones_round_trip_as_the_same_instant() -> None:
    zone = timezone(timedelta(hours=5, minutes=30))
    moment = datetime(2025, 6, 1, 12, 0, 0, 5000, tzinfo=zone)
    decoded = codec.decode(codec.encode(TurnCheckpoint(created_at=moment)), TurnCheckpoint)
    assert decoded.created_at == moment
    assert decoded.created_at.utcoffset() == timedelta(0)


# --- the clock -------------------------------------------------------------------------------


def test_utc_now_is_aware_utc_whole_milliseconds() -> None:
    now = utc_now()
    assert now.utcoffset() == timedelta(0)
    assert now.microsecond % 1000 == 0
    assert abs(datetime.now(UTC) - now) < timedelta(seconds=5)


def test_truncate_ms_cuts_and_refuses_naive() -> None:
    moment = datetime(2025, 1, 1, 1, 2, 3, 456789, tzinfo=timezone(timedelta(hours=-2)))
    assert truncate_ms(moment) == datetime(2025, 1, 1, 3, 2, 3, 456000, tzinfo=UTC)
    assert truncate_ms(moment).tzinfo is UTC
    with pytest.raises(ValueError, match="naive"):
        truncate_ms(datetime(2025, 1, 1))
