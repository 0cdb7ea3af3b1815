"""The skim's law: it refuses exactly what the full decoder refuses, and reads what it reads.

:func:`turnlog.wire.skim.skim_pause` walks a pause's messages instead of decoding them, so a
walk that lets through what ``decode`` refuses would let a bad record into the store. Every case
here compares the two on the same bytes: valid pauses, every truncation, flipped, inserted and
deleted bytes, random bodies behind a valid header, and hand-made refusals of each kind.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.unit.test_codec import checkpoints, moments, text
from turnlog.clock import utc_now
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import PauseRecorded, TokenConsumed
from turnlog.contracts.rehydration import asking_round
from turnlog.errors import DecodeError
from turnlog.wire import codec
from turnlog.wire.compiled import _SMALL, _long, compile_schema
from turnlog.wire.resumed_bytes import asking_round_of
from turnlog.wire.skim import SkimmedPause, _from_value, decode_messages, skim_pause

_MESSAGE = compile_schema(codec.schema_for("Message"))
if _MESSAGE is None:
    raise AssertionError("the Message schema is not compiled")

pauses = st.builds(
    PauseRecorded,
    event_id=text,
    occurred_at=moments,
    package_version=text,
    checkpoint=checkpoints,
    token_id=text,
    request_json=text,
    request_hash=text,
    response_schema=text,
    expires_at=moments,
)

# Messages long enough for two-byte lengths, ASCII and not, with and without tool calls.
_long_text = st.text(min_size=0, max_size=150) | st.text(
    alphabet=st.characters(max_codepoint=127), min_size=60, max_size=200
)
_messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant", "tool"]),
            "content": _long_text,
            "tool_calls": st.lists(
                st.fixed_dictionaries({"id": text, "name": text, "arguments": _long_text}),
                max_size=2,
            ),
            "tool_call_id": st.none() | text,
            "name": st.none() | text,
        }
    ),
    max_size=6,
).map(tuple)
long_pauses = st.builds(
    lambda pause, messages: dataclasses.replace(
        pause, checkpoint=dataclasses.replace(pause.checkpoint, messages=messages)
    ),
    pauses,
    _messages,
)
any_pause = pauses | long_pauses


def _outcome(fn: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", fn(data)
    except DecodeError as exc:
        return "refused", (exc.reason, exc.detail)


def _assert_agrees(data: bytes) -> None:
    """skim refuses iff decode refuses, with the same reason and detail; else the same fields."""
    skimmed = _outcome(skim_pause, data)
    decoded = _outcome(lambda b: codec.decode(b, PauseRecorded), data)
    assert skimmed[0] == decoded[0], (skimmed, decoded)
    if decoded[0] == "refused":
        assert skimmed[1] == decoded[1]
    else:
        _assert_same_fields(skimmed[1], decoded[1])


def _assert_same_fields(skim: SkimmedPause, pause: PauseRecorded) -> None:
    for field in dataclasses.fields(PauseRecorded):
        if field.name != "checkpoint":
            assert getattr(skim, field.name) == getattr(pause, field.name), field.name
    for field in dataclasses.fields(TurnCheckpoint):
        if field.name != "messages":
            assert getattr(skim.checkpoint, field.name) == getattr(pause.checkpoint, field.name)
    assert skim.checkpoint.message_count == len(pause.checkpoint.messages)
    assert skim.checkpoint.messages() == pause.checkpoint.messages
    assert skim.decode() == pause
    since_epoch = pause.expires_at - datetime(1970, 1, 1, tzinfo=UTC)
    assert skim.expires_at_ms == since_epoch // timedelta(milliseconds=1)


@settings(max_examples=200, deadline=None)
@given(any_pause)
def test_a_pause_skims_to_the_fields_it_decodes_to(pause: PauseRecorded) -> None:
    data = codec.encode(pause)
    skimmed = skim_pause(data)
    assert skimmed.value == data
    _assert_same_fields(skimmed, codec.decode(data, PauseRecorded))


@settings(max_examples=100, deadline=None)
@given(any_pause)
def test_messages_raw_is_the_array_body_without_its_count_and_terminator(
    pause: PauseRecorded,
) -> None:
    cp = pause.checkpoint
    skimmed = skim_pause(codec.encode(pause)).checkpoint
    written: list[bytes] = []
    for message in cp.messages:
        _MESSAGE.write(dict(message), written.append)
    assert skimmed.messages_raw == b"".join(written)
    assert skimmed.message_count == len(cp.messages)
    if cp.messages:  # written back as one block, it is the array the checkpoint was written with
        assert _SMALL[len(cp.messages)] + skimmed.messages_raw + b"\x00" in codec.encode(cp)
    assert decode_messages(skimmed.messages_raw, skimmed.message_count) == cp.messages


@settings(max_examples=40, deadline=None)
@given(any_pause)
def test_every_truncation_is_refused_as_decode_refuses_it(pause: PauseRecorded) -> None:
    data = codec.encode(pause)
    for end in range(len(data)):
        _assert_agrees(data[:end])


@settings(max_examples=400, deadline=None)
@given(any_pause, st.data())
def test_a_flipped_byte_is_refused_iff_decode_refuses_it(
    pause: PauseRecorded, data: st.DataObject
) -> None:
    encoded = codec.encode(pause)
    index = data.draw(st.integers(0, len(encoded) - 1), label="index")
    tampered = bytearray(encoded)
    tampered[index] ^= data.draw(st.integers(1, 255), label="mask")
    _assert_agrees(bytes(tampered))


@settings(max_examples=300, deadline=None)
@given(any_pause, st.data())
def test_inserted_and_deleted_bytes_are_refused_iff_decode_refuses_them(
    pause: PauseRecorded, data: st.DataObject
) -> None:
    encoded = codec.encode(pause)
    index = data.draw(st.integers(10, len(encoded)), label="index")
    cut = data.draw(st.integers(0, 4), label="cut")
    inserted = data.draw(st.binary(max_size=4), label="inserted")
    _assert_agrees(encoded[:index] + inserted + encoded[index + cut :])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bodies_behind_a_pause_header_are_refused_iff_decode_refuses_them(
    body: bytes,
) -> None:
    _assert_agrees(codec.MAGIC + codec.fingerprint_of("PauseRecorded") + body)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=40))
def test_anything_without_a_pause_header_is_refused_as_decode_refuses_it(data: bytes) -> None:
    _assert_agrees(data)


# --- the refusals one by one, in the messages the skim walks -----------------------------------

_PAUSE = PauseRecorded(
    event_id="e-1",
    occurred_at=utc_now(),
    package_version="0.1.0",
    checkpoint=TurnCheckpoint(
        run_id="r",
        session_id="s",
        thread_id="t",
        checkpoint_id="c",
        scope_hash="h",
        tool_call_id="call-1",
        interrupt_id="i",
        name="ask_user",
        prompt="Which region?",
        messages=(
            {"role": "user", "content": "Deploy it."},
            {
                "role": "assistant",
                "content": "x" * 100,
                "tool_calls": [{"id": "call-1", "name": "ask_user", "arguments": "{}"}],
            },
        ),
        sequence=7,
        tenant_id="acme",
        created_at=utc_now(),
        package_version="0.1.0",
        safe_boundary=True,
    ),
    token_id="tok-1",
    request_json="{}",
    request_hash="hash",
    response_schema="ask_user",
    expires_at=utc_now(),
)


def _with_message_bytes(old: bytes, new: bytes) -> bytes:
    data = codec.encode(_PAUSE)
    if data.count(old) != 1:
        raise AssertionError(f"{old!r} is not unique in the pause")
    return data.replace(old, new)


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        # the user message's role (index 1, zig-zag 2) -> index 9: no such symbol
        (b"\x02\x14Deploy it.", b"\x12\x14Deploy it.", "malformed_body"),
        # its content's length made negative (zig-zag 19 = -10)
        (b"\x02\x14Deploy it.", b"\x02\x13Deploy it.", "malformed_body"),
        # its content longer than the record
        (b"\x02\x14Deploy it.", b"\x02\xfe\x7fDeploy it.", "truncated_body"),
        # invalid UTF-8 inside it
        (b"Deploy it.", b"Deploy \xff\xfe.", "malformed_body"),
        # a truncated multi-byte character at the end of a long string
        (b"x" * 100, b"x" * 99 + b"\xc3", "malformed_body"),
        # the tool_call_id union's branch 3
        (b"Deploy it.\x00\x00\x00", b"Deploy it.\x00\x06\x00", "malformed_body"),
    ],
)
def test_a_bad_message_is_refused_by_the_skim_with_decodes_reason(
    old: bytes, new: bytes, reason: str
) -> None:
    data = _with_message_bytes(old, new)
    with pytest.raises(DecodeError) as skimmed:
        skim_pause(data)
    with pytest.raises(DecodeError) as decoded:
        codec.decode(data, PauseRecorded)
    assert skimmed.value.reason == decoded.value.reason == reason
    assert skimmed.value.detail == decoded.value.detail


def test_non_ascii_messages_are_checked_string_by_string_and_read() -> None:
    pause = dataclasses.replace(
        _PAUSE,
        checkpoint=dataclasses.replace(
            _PAUSE.checkpoint, messages=({"role": "user", "content": "Grüße, " * 20},)
        ),
    )
    skimmed = skim_pause(codec.encode(pause))
    assert skimmed.checkpoint.messages() == pause.checkpoint.messages


def test_an_array_written_in_several_blocks_is_kept_as_one() -> None:
    data = codec.encode(_PAUSE)
    one, two = (
        codec.encode(
            dataclasses.replace(
                _PAUSE, checkpoint=dataclasses.replace(_PAUSE.checkpoint, messages=(m,))
            )
        )
        for m in _PAUSE.checkpoint.messages
    )
    first = skim_pause(one).checkpoint.messages_raw
    second = skim_pause(two).checkpoint.messages_raw
    whole = skim_pause(data).checkpoint.messages_raw
    assert whole == first + second
    # The same messages as two blocks, the second with its byte size (a negative count).
    blocks = b"\x02" + first + b"\x01" + _SMALL[len(second)] + second + b"\x00"
    split = data.replace(b"\x04" + whole + b"\x00", blocks)
    skimmed = skim_pause(split)
    assert skimmed.checkpoint.messages_raw == whole
    assert skimmed.checkpoint.message_count == 2
    assert skimmed.checkpoint.messages_at == -1  # not one run in the record: nothing to keep
    _assert_same_fields(skimmed, codec.decode(split, PauseRecorded))


def test_a_record_of_another_type_is_refused_as_decode_refuses_it() -> None:
    consumed = TokenConsumed(
        event_id="e",
        occurred_at=_PAUSE.occurred_at,
        package_version="0.1.0",
        token_id="tok",
        answer_id="a",
        thread_id="t",
        checkpoint_id="c",
        outcome="resumed",
    )
    with pytest.raises(DecodeError) as caught:
        skim_pause(codec.encode(consumed))
    assert caught.value.reason == "unexpected_type"
    with pytest.raises(DecodeError) as caught:
        skim_pause(codec.MAGIC + b"\x00" * 8 + b"body")
    assert caught.value.reason == "unknown_fingerprint"
    with pytest.raises(DecodeError) as caught:
        skim_pause("not bytes")  # type: ignore[arg-type]
    assert caught.value.reason == "not_single_object"


def test_an_unknown_turn_state_version_is_refused_as_decode_refuses_it() -> None:
    data = codec.encode(_PAUSE)
    # version is the checkpoint's last field, an int just before the token id: 1 -> 9
    marker = b"\x01\x02" + _SMALL[len("tok-1")] + b"tok-1"
    if data.count(marker) != 1:
        raise AssertionError("the version byte was not found")
    _assert_agrees(data.replace(marker, b"\x01\x12" + marker[2:]))
    with pytest.raises(DecodeError) as caught:
        skim_pause(data.replace(marker, b"\x01\x12" + marker[2:]))
    assert caught.value.reason == "unsupported_version"


# --- where each message starts ------------------------------------------------------------------


def _written_starts(messages: tuple[dict[str, Any], ...]) -> tuple[int, ...]:
    """Each message's offset in the items written one after another, as the writer writes them."""
    starts, offset = [], 0
    for message in messages:
        starts.append(offset)
        written: list[bytes] = []
        _MESSAGE.write(dict(message), written.append)
        offset += len(b"".join(written))
    return tuple(starts)


@settings(max_examples=200, deadline=None)
@given(any_pause)
def test_the_skim_notes_where_each_message_starts(pause: PauseRecorded) -> None:
    cp = pause.checkpoint
    skimmed = skim_pause(codec.encode(pause)).checkpoint
    assert skimmed.message_starts == _written_starts(cp.messages)
    bounds = (*skimmed.message_starts, len(skimmed.messages_raw))
    for index, message in enumerate(cp.messages):
        item = skimmed.messages_raw[bounds[index] : bounds[index + 1]]
        assert decode_messages(item, 1) == (message,)
    # The decoded path (a pause the walk does not read) notes the same starts; where the items
    # stand in the record it leaves unknown, as it writes the record anew.
    assert _from_value(pause).checkpoint == skimmed._replace(messages_at=-1)
    # The walk notes where the items stand in the record it read: one block there.
    data = codec.encode(pause)
    if cp.messages:
        at = skimmed.messages_at
        assert data[at : at + len(skimmed.messages_raw)] == skimmed.messages_raw
        assert data[at + len(skimmed.messages_raw)] == 0  # the array's terminator follows
    else:
        assert skimmed.messages_at == -1


def _in_blocks(items: list[bytes], cuts: list[int], sized: list[bool]) -> bytes:
    """``items`` as an Avro array body in several blocks (cut before each index in ``cuts``),
    some stating their byte size (a negative count): what another writer may send."""
    body = b""
    edges = [0, *sorted(set(cuts)), len(items)]
    for number, (start, end) in enumerate(itertools.pairwise(edges)):
        if start == end:
            continue
        block = b"".join(items[start:end])
        if sized[number % len(sized)]:
            body += _long(-(end - start)) + _long(len(block)) + block
        else:
            body += _long(end - start) + block
    return body + b"\x00"


@settings(max_examples=200, deadline=None)
@given(any_pause, st.data())
def test_an_array_in_several_blocks_gives_the_starts_of_the_joined_items(
    pause: PauseRecorded, data: st.DataObject
) -> None:
    messages = pause.checkpoint.messages
    assume(messages)
    items = []
    for message in messages:
        written: list[bytes] = []
        _MESSAGE.write(dict(message), written.append)
        items.append(b"".join(written))
    one_block = _SMALL[len(items)] + b"".join(items) + b"\x00"
    encoded = codec.encode(pause)
    assume(encoded.count(one_block) == 1)
    cuts = data.draw(st.lists(st.integers(1, len(items)), max_size=len(items)), label="cuts")
    sized = data.draw(st.lists(st.booleans(), min_size=1, max_size=4), label="sized")
    split = encoded.replace(one_block, _in_blocks(items, cuts, sized))
    whole = skim_pause(encoded).checkpoint
    skimmed = skim_pause(split)
    _assert_same_fields(skimmed, codec.decode(split, PauseRecorded))
    assert skimmed.checkpoint.messages_raw == whole.messages_raw
    assert skimmed.checkpoint.message_starts == whole.message_starts == _written_starts(messages)
    raw, count = skimmed.checkpoint.messages_raw, skimmed.checkpoint.message_count
    expected = asking_round(messages)
    assert asking_round_of(raw, count, skimmed.checkpoint.message_starts) == expected
    assert asking_round_of(raw, count) == expected


def test_starts_across_a_plain_and_a_sized_block_count_from_the_joined_items() -> None:
    messages = (
        *_PAUSE.checkpoint.messages,
        {"role": "tool", "content": "eu-west", "tool_call_id": "call-1"},
    )
    pause = dataclasses.replace(
        _PAUSE, checkpoint=dataclasses.replace(_PAUSE.checkpoint, messages=messages)
    )
    data = codec.encode(pause)
    whole = skim_pause(data).checkpoint
    assert whole.message_starts == _written_starts(pause.checkpoint.messages)
    assert whole.message_starts[:2] == (0, 15)  # the user's "Deploy it." takes 15 bytes
    user, rest = whole.messages_raw[:15], whole.messages_raw[15:]
    # One item in a plain block, then two in a block that states its size.
    blocks = b"\x02" + user + b"\x03" + _SMALL[len(rest)] + rest + b"\x00"
    split = skim_pause(data.replace(b"\x06" + whole.messages_raw + b"\x00", blocks)).checkpoint
    assert split.messages_raw == whole.messages_raw
    assert split.message_starts == whole.message_starts
    found = asking_round_of(split.messages_raw, 3, split.message_starts)
    assert found == asking_round(skim_pause(data).checkpoint.messages())
    assert found.position == 1
    assert found.observed == frozenset({"call-1"})


def test_a_pause_without_messages_has_no_starts() -> None:
    empty = dataclasses.replace(
        _PAUSE, checkpoint=dataclasses.replace(_PAUSE.checkpoint, messages=())
    )
    skimmed = skim_pause(codec.encode(empty)).checkpoint
    assert (skimmed.messages_raw, skimmed.message_count, skimmed.message_starts) == (b"", 0, ())
    assert asking_round_of(b"", 0, skimmed.message_starts) == asking_round(())
