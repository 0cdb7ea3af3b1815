"""The byte-level TurnResumed encoder writes exactly what the codec writes, and reads the asking
round from encoded messages exactly as rehydration reads it from decoded ones."""

from __future__ import annotations

import importlib
import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_skim import any_pause
from turnlog.contracts.events import AskUserAnswered, PauseRecorded, TokenConsumed, TurnResumed
from turnlog.contracts.messages import normalize_message
from turnlog.contracts.refusals import Refused
from turnlog.contracts.rehydration import asking_round, continuation
from turnlog.wire.codec import encode, schema_for
from turnlog.wire.compiled import compile_schema
from turnlog.wire.direct import encode_token_consumed
from turnlog.wire.resumed_bytes import ResumedFields, asking_round_of, encode_turn_resumed
from turnlog.wire.skim import skim_pause

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


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(text, min_size=6, max_size=6),
    outcome=st.sampled_from(["resumed", "expired"]),
    millis=st.integers(min_value=0, max_value=2**42),
)
def test_a_token_consumed_written_directly_equals_the_codec(
    ids: list[str], outcome: str, millis: int
) -> None:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    event_id, version, token_id, answer_id, thread_id, checkpoint_id = ids
    meta = {"event_id": event_id, "occurred_at": moment, "package_version": version}
    try:
        expected: bytes | None = encode(
            TokenConsumed(
                **meta,
                token_id=token_id,
                answer_id=answer_id,
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                outcome=outcome,
            )
        )
    except ValueError:
        expected = None  # a lone surrogate: the codec refuses it, and so must the direct path
    if expected is None:
        with pytest.raises(ValueError):
            encode_token_consumed(meta, token_id, answer_id, thread_id, checkpoint_id, outcome)
    else:
        assert (
            encode_token_consumed(meta, token_id, answer_id, thread_id, checkpoint_id, outcome)
            == expected
        )


def test_a_token_consumed_with_a_timestamp_the_wire_cannot_carry_is_refused() -> None:
    for moment in (MOMENT.replace(microsecond=1), MOMENT.replace(tzinfo=None)):
        meta = {"event_id": "e", "occurred_at": moment, "package_version": "v"}
        with pytest.raises(ValueError):
            encode_token_consumed(meta, "t", "a", "th", "cp", "resumed")


# --- the asking round read from the end, with the starts the skim records ---------------------


def _starts(items: list[dict[str, Any]]) -> tuple[int, ...]:
    """Where each item begins in ``_raw(items)``, counted by writing them one by one."""
    found, offset = [], 0
    for item in items:
        found.append(offset)
        offset += len(_raw([item]))
    return tuple(found)


def _from_source(name: str) -> ModuleType:
    """A fresh copy of module ``name`` run from its ``.py`` file, compiled build or not: compiled
    code indexes ``bytes`` directly, without calling a subclass's ``__getitem__``, so what a read
    touches is watched on the source itself (the same code the build compiles)."""
    source = Path(importlib.import_module(name).__file__ or "").with_name(
        name.rpartition(".")[2] + ".py"
    )
    spec = importlib.util.spec_from_file_location(f"{name}_from_source", source)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return copy


class _Watched(bytes):
    """Bytes that note the lowest position read, to show what the read from the end touches."""

    lowest: int

    def __getitem__(self, key: Any) -> Any:
        at = key.start if isinstance(key, slice) else key
        self.lowest = min(getattr(self, "lowest", len(self)), at if at is not None else 0)
        return super().__getitem__(key)


_SOURCE = _from_source("turnlog.wire.resumed_bytes")


@settings(max_examples=400, deadline=None)
@given(messages)
def test_the_asking_round_read_from_the_end_is_the_decoded_one(
    stored: list[dict[str, Any]],
) -> None:
    raw, starts = _raw(stored), _starts(stored)
    expected = asking_round(stored)
    assert asking_round_of(raw, len(stored), starts) == expected
    assert asking_round_of(raw, len(stored)) == expected
    # Only the round and what follows it are read; without a round, every item's role byte.
    watched = _Watched(raw)
    assert _SOURCE.asking_round_of(watched, len(stored), starts) == expected
    if stored:
        assert watched.lowest == starts[max(expected.position, 0)]


@settings(max_examples=300, deadline=None)
@given(any_pause)
def test_the_asking_round_from_the_skims_starts_is_the_decoded_one(pause: PauseRecorded) -> None:
    """Messages as the skim tests make them: any role with tool calls, ASCII and not, long."""
    checkpoint = skim_pause(encode(pause)).checkpoint
    expected = asking_round(pause.checkpoint.messages)
    raw, count = checkpoint.messages_raw, checkpoint.message_count
    assert asking_round_of(raw, count, checkpoint.message_starts) == expected
    assert asking_round_of(raw, count) == expected


def test_starts_that_do_not_fit_the_messages_are_refused() -> None:
    """The checks a read from the end can make on what it reads. (Items before the round are
    not read, so a start that points anywhere else can pass: the starts must be the skim's.)"""
    stored = [
        normalize_message({"role": "user", "content": "hi"}),
        normalize_message(
            {"role": "assistant", "tool_calls": [{"id": "call-1", "name": "ask_user"}]}
        ),
        normalize_message({"role": "tool", "content": "done", "tool_call_id": "call-1"}),
    ]
    raw, (first, second, third) = _raw(stored), _starts(stored)
    assert asking_round_of(raw, 3, (first, second, third)) == asking_round(stored)
    for starts, count, data in [
        ((first, second), 3, raw),  # fewer starts than messages
        ((first, second, len(raw)), 3, raw),  # a start past the end
        ((first, second, -1), 3, raw),  # a negative one
        ((first, second, third - 1), 3, raw),  # the round does not end where the next starts
        ((first, second, third), 3, raw + b"\x00"),  # bytes after the last message
        ((first, second, third), 3, raw[:-1]),  # the last message cut short
        ((first, second, third), 3, raw[:third] + b"\x09" + raw[third + 1 :]),  # a bad role
    ]:
        with pytest.raises((ValueError, IndexError)):
            asking_round_of(data, count, starts)
