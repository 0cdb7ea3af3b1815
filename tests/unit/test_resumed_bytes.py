"""The byte-level TurnResumed encoder writes exactly what the codec writes, and reads the asking
round from encoded messages exactly as rehydration reads it from decoded ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.contracts.events import AskUserAnswered, TurnResumed
from turnlog.contracts.messages import normalize_message
from turnlog.contracts.refusals import Refused
from turnlog.contracts.rehydration import asking_round, continuation
from turnlog.wire.codec import encode, schema_for
from turnlog.wire.compiled import compile_schema
from turnlog.wire.resumed_bytes import ResumedFields, asking_round_of, encode_turn_resumed

MOMENT = datetime(2026, 3, 1, 12, 30, 5, 123000, tzinfo=UTC)

# Short and long (a length over 63 bytes takes two varint bytes), ASCII and not.
text = st.one_of(
    st.text(max_size=8),
    st.text(alphabet="ab", min_size=60, max_size=70),
    st.text(min_size=0, max_size=300),
    st.sampled_from(["", "é", "日本語", "x" * 9000, "call-1", "ask"]),
)

call_ids = st.sampled_from(["call-1", "call-2", "c3", "", "ask"])
calls = st.lists(
    st.fixed_dictionaries({"id": call_ids, "name": text, "arguments": text}), max_size=4
)
messages = st.lists(
    st.builds(
        lambda role, content, tool_calls, tool_call_id, name: normalize_message(
            {
                "role": role,
                "content": content,
                "tool_calls": tool_calls if role == "assistant" else [],
                "tool_call_id": tool_call_id,
                "name": name,
            }
        ),
        st.sampled_from(["system", "user", "assistant", "tool"]),
        text,
        calls,
        st.one_of(st.none(), call_ids),
        st.one_of(st.none(), text),
    ),
    max_size=12,
)
answered = st.one_of(
    st.none(),
    st.builds(
        AskUserAnswered,
        selected_labels=st.lists(text, max_size=3).map(tuple),
        has_other=st.booleans(),
        time_to_answer_seconds=st.floats(allow_nan=False, allow_infinity=False),
    ),
)


def _raw(items: list[dict[str, Any]]) -> bytes:
    compiled = compile_schema(schema_for("Message"))
    assert compiled is not None
    parts: list[bytes] = []
    for item in items:
        compiled.write(item, parts.append)
    return b"".join(parts)


def _fields(**overrides: Any) -> ResumedFields:
    values: dict[str, Any] = {
        "event_id": "e" * 32,
        "occurred_at": MOMENT,
        "package_version": "1.2.3",
        "token_id": "tok",
        "answer_id": "ans",
        "run_id": "run",
        "session_id": "session",
        "thread_id": "thread",
        "checkpoint_id": "cp-1",
        "interrupt_id": "int",
        "tool_call_id": "call-1",
        "name": "ask_user",
        "prompt": "Continue.",
        "response_json": '{"answers":[]}',
    }
    values.update(overrides)
    return ResumedFields(**values)


@settings(max_examples=300, deadline=None)
@given(messages, messages, answered, text, text)
def test_written_around_encoded_messages_equals_the_codec(
    stored: list[dict[str, Any]],
    appended: list[dict[str, Any]],
    summary: AskUserAnswered | None,
    prompt: str,
    response_json: str,
) -> None:
    fields = _fields(prompt=prompt, response_json=response_json)
    expected = encode(
        TurnResumed(**fields._asdict(), history=(*stored, *appended), answered=summary)
    )
    assert encode_turn_resumed(fields, _raw(stored), len(stored), appended, summary) == expected


@settings(max_examples=300, deadline=None)
@given(messages)
def test_the_asking_round_read_from_bytes_is_the_decoded_one(stored: list[dict[str, Any]]) -> None:
    assert asking_round_of(_raw(stored), len(stored)) == asking_round(stored)


@settings(max_examples=200, deadline=None)
@given(messages, call_ids, st.one_of(st.none(), st.just(""), text))
def test_the_continuation_refuses_and_appends_as_rehydrate(
    stored: list[dict[str, Any]], answered_call: str, leave_open: str | None
) -> None:
    """Refusals come from the same function either way, so equal rounds give equal outcomes."""
    found = asking_round_of(_raw(stored), len(stored))
    try:
        added = continuation("cp-1", found, answered_call, "the answer", leave_open=leave_open)
    except Refused as refused:
        with pytest.raises(Refused) as again:
            continuation(
                "cp-1", asking_round(stored), answered_call, "the answer", leave_open=leave_open
            )
        assert again.value.refusal == refused.refusal
        return
    assert added == continuation(
        "cp-1", asking_round(stored), answered_call, "the answer", leave_open=leave_open
    )


@pytest.mark.parametrize(
    "cut",
    [lambda raw: raw[:-1], lambda raw: raw + b"\x00", lambda raw: b"\x09" + raw[1:]],
    ids=["truncated", "trailing", "bad role"],
)
def test_bytes_that_are_not_the_messages_are_refused(cut: Any) -> None:
    stored = [
        normalize_message({"role": "user", "content": "hi"}),
        normalize_message(
            {"role": "assistant", "tool_calls": [{"id": "call-1", "name": "ask_user"}]}
        ),
    ]
    with pytest.raises((ValueError, IndexError)):
        asking_round_of(cut(_raw(stored)), len(stored))


def test_a_timestamp_the_wire_cannot_carry_is_refused() -> None:
    with pytest.raises(ValueError, match="microseconds"):
        encode_turn_resumed(_fields(occurred_at=MOMENT.replace(microsecond=1)), b"", 0, [], None)
    with pytest.raises(ValueError, match="naive"):
        encode_turn_resumed(_fields(occurred_at=MOMENT.replace(tzinfo=None)), b"", 0, [], None)
