"""A ``TurnResumed`` written around a pause's encoded messages: the resume path's encoder.

Why: the history of a resumed turn is the checkpoint's messages with a few tool messages after
them (seed 003). Decoding those messages from the stored pause into dicts, building a
``TurnResumed`` (which normalises each one again) and encoding them back gives the very bytes
that were stored. Here the stored items are copied as they are: an Avro array is a count, its
items and a closing zero, so the checkpoint's ``n`` items followed by the ``k`` appended ones,
behind the count ``n + k``, are the array the normal codec writes for the whole history.
:func:`encode_turn_resumed` is held byte for byte to :func:`turnlog.wire.codec.encode` by
``tests/unit/test_resumed_bytes.py``.

What it needs of the messages is only where the asking round is (:func:`asking_round_of`), which
it reads from the encoded items without building them, from the last one back when the skim
says where each starts. The items come from
:func:`turnlog.wire.skim.skim_pause`, which has already checked them as the full decoder would;
a walk that still meets something it cannot read raises ``ValueError`` and the caller takes the
decoding path. An approval that edits the arguments rewrites an earlier message, so it cannot be
written this way: the caller decodes that one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from turnlog.contracts.events import AskUserAnswered
from turnlog.contracts.rehydration import AskingRound
from turnlog.wire.codec import WRITE_HEADERS, schema_for
from turnlog.wire.compiled import compile_schema
from turnlog.wire.direct import long_bytes as _long
from turnlog.wire.direct import millis_bytes as _millis
from turnlog.wire.direct import strings_into

__all__ = ["ResumedFields", "asking_round_of", "encode_turn_resumed"]

_ASSISTANT = 2  # the index of "assistant" in the Role enum (held by _writers())
_TOOL = 3  # and of "tool"
_NOTHING: frozenset[str] = frozenset()


class ResumedFields(NamedTuple):
    """The scalar fields of a ``TurnResumed``, in its schema's order, up to ``history``."""

    event_id: str
    occurred_at: datetime
    package_version: str
    token_id: str
    answer_id: str
    run_id: str
    session_id: str
    thread_id: str
    checkpoint_id: str
    interrupt_id: str
    tool_call_id: str
    name: str
    prompt: str
    response_json: str


class _Writers(NamedTuple):
    message: Callable[[Mapping[str, Any], Callable[[bytes], Any]], None]
    answered: Callable[[Mapping[str, Any], Callable[[bytes], Any]], None]


@functools.cache
def _writers() -> _Writers:
    """The compiled writers, after checking that the schemas are still the ones this module
    lays out by hand: a field added to ``TurnResumed`` must fail here, not write a wrong record."""
    fields = [f["name"] for f in schema_for("TurnResumed")["fields"]]
    if fields != [*ResumedFields._fields, "history", "answered", "answers", "sealed"]:
        raise RuntimeError(f"TurnResumed's fields changed ({fields}); update resumed_bytes")
    message = schema_for("Message")
    names = [f["name"] for f in message["fields"]]
    roles = message["fields"][0]["type"].get("symbols", [])
    if names != ["role", "content", "tool_calls", "tool_call_id", "name"] or roles[2:4] != [
        "assistant",
        "tool",
    ]:
        raise RuntimeError("Message's layout changed; update resumed_bytes")
    compiled_message = compile_schema(message)
    compiled_answered = compile_schema(schema_for("AskUserAnswered"))
    if compiled_message is None or compiled_answered is None:
        raise RuntimeError("the Message and AskUserAnswered schemas are not compiled")
    return _Writers(compiled_message.write, compiled_answered.write)


def encode_turn_resumed(
    fields: ResumedFields,
    messages_raw: bytes,
    message_count: int,
    appended: Sequence[Mapping[str, Any]],
    answered: AskUserAnswered | None,
) -> bytes:
    """The ``TurnResumed`` record whose history is the ``message_count`` encoded items
    of ``messages_raw`` followed by ``appended`` (canonical message dicts), byte for byte what
    :func:`~turnlog.wire.codec.encode` writes for the same turn. ``ValueError`` for a value
    the schema cannot carry."""
    writers = _writers()
    # The header the codec writes now: single-object, or the registry's framing.
    parts = [WRITE_HEADERS["TurnResumed"]]
    try:
        strings_into(parts, (fields.event_id,))
        parts.append(_millis(fields.occurred_at))
        strings_into(parts, fields[2:])
        total = message_count + len(appended)
        if total:
            parts.append(_long(total))
            parts.append(messages_raw)
            for message in appended:
                writers.message(message, parts.append)
            parts.append(b"\x00")
        else:
            parts.append(b"\x00")
        if answered is None:
            parts.append(b"\x00")
        else:
            parts.append(b"\x02")
            record = {
                "selected_labels": list(answered.selected_labels),
                "has_other": answered.has_other,
                "time_to_answer_seconds": answered.time_to_answer_seconds,
            }
            writers.answered(record, parts.append)
        # answers: the calls of a group, written only by the decoding path (a group's last
        # answer is resumed decoded): here, always the empty array.
        parts.append(b"\x00")
        # sealed: never here -- sealing wraps the whole record afterwards (wire/sealing.py).
        parts.append(b"\x00")
    except (TypeError, UnicodeEncodeError, OverflowError) as exc:
        raise ValueError(f"TurnResumed cannot be written with its schema: {exc}") from exc
    return b"".join(parts)


# --- reading the asking round from encoded messages ------------------------------------------


def _read_long(data: bytes, p: int) -> tuple[int, int]:
    b = data[p]
    p += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p
    n = b & 0x7F
    shift = 7
    while True:
        b = data[p]
        p += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than ten bytes")
    return (n >> 1) ^ -(n & 1), p


def _skip_string(data: bytes, p: int) -> int:
    b = data[p]
    if b < 0x80 and not b & 1:
        return p + 1 + (b >> 1)
    size, p = _read_long(data, p)
    if size < 0 or p + size > len(data):
        raise ValueError("a string runs past the messages")
    return p + size


def _read_string(data: bytes, p: int) -> tuple[str, int]:
    b = data[p]
    if b < 0x80 and not b & 1:
        p += 1
        end = p + (b >> 1)
        return data[p:end].decode("utf-8"), end
    size, p = _read_long(data, p)
    end = p + size
    if size < 0 or end > len(data):
        raise ValueError("a string runs past the messages")
    return data[p:end].decode("utf-8"), end


def _calls(data: bytes, p: int) -> tuple[list[tuple[str, str]], int]:
    """The (id, name) of each ``ToolCall`` of a non-empty ``tool_calls`` array at ``p``."""
    found: list[tuple[str, str]] = []
    while True:  # blocks of items; a zero count closes the array
        count, p = _read_long(data, p)
        if count == 0:
            return found, p
        if count < 0:
            count = -count
            _, p = _read_long(data, p)  # the block's size in bytes
        for _ in range(count):  # one-byte lengths (under 64 bytes) read in line
            b = data[p]
            if b < 0x80 and not b & 1:
                start = p + 1
                p = start + (b >> 1)
                call_id = data[start:p].decode("utf-8")
            else:
                call_id, p = _read_string(data, p)
            b = data[p]
            if b < 0x80 and not b & 1:
                start = p + 1
                p = start + (b >> 1)
                name = data[start:p].decode("utf-8")
            else:
                name, p = _read_string(data, p)
            b = data[p]  # arguments: stepped over
            if b < 0x80 and not b & 1:
                p += 1 + (b >> 1)
            else:
                p = _skip_string(data, p)
            found.append((call_id, name))


def _message(data: bytes, p: int) -> tuple[int, list[tuple[str, str]] | None, bytes, int]:
    """The ``Message`` item at ``p``: its role byte (the enum index, zig-zagged), its tool
    calls (``None`` for an empty array), its ``tool_call_id`` as UTF-8 (``b""`` for null) and the
    position after it. Everything else is stepped over.

    The common shapes are read in line: a one-byte role, an empty tool-call array, a null union
    and a string whose length takes one byte; anything else goes through the helpers above.
    """
    role = data[p]
    if role > 2 * _TOOL or role & 1:
        raise ValueError(f"role byte {role}")
    b = data[p + 1]  # content: stepped over
    if b < 0x80 and not b & 1:
        p += 2 + (b >> 1)
    else:
        p = _skip_string(data, p + 1)
    found: list[tuple[str, str]] | None = None
    if data[p] == 0:  # no tool calls
        p += 1
    else:
        found, p = _calls(data, p)
    b = data[p]  # tool_call_id: null (0) or a string (2)
    tool_call_id = b""
    if b == 2:
        b = data[p + 1]
        if b < 0x80 and not b & 1:
            start = p + 2
            p = start + (b >> 1)
            tool_call_id = data[start:p]
        else:
            text, p = _read_string(data, p + 1)
            tool_call_id = text.encode("utf-8")
    elif b:
        raise ValueError(f"union byte {b}")
    else:
        p += 1
    b = data[p]  # name: null or a string, stepped over
    if b == 2:
        p = _skip_string(data, p + 1)
    elif b:
        raise ValueError(f"union byte {b}")
    else:
        p += 1
    return role, found, tool_call_id, p


def asking_round_of(
    messages_raw: bytes, message_count: int, message_starts: Sequence[int] = ()
) -> AskingRound:
    """The :class:`~turnlog.contracts.rehydration.AskingRound` of ``message_count`` encoded
    ``Message`` items, equal to ``asking_round`` of the same messages decoded. Reads the role,
    the tool calls' ids and names and the tool messages' call ids; steps over everything else.
    ``ValueError`` (or ``IndexError``) for bytes that are not that many items.

    With ``message_starts`` (where each item starts, as
    :attr:`~turnlog.wire.skim.SkimmedCheckpoint.message_starts` records them) it reads from the
    last item back to the asking round and no further: the round is usually at or near the end,
    so a resume reads one or a few items, not every one. Without them every item is walked from
    the first.
    """
    _writers()  # the layout check
    if message_starts:
        return _from_the_end(messages_raw, message_count, message_starts)
    data = messages_raw
    end = len(data)
    p = 0
    position = -1
    calls: list[tuple[str, str]] = []
    answered_after: list[bytes] = []
    for index in range(message_count):
        role, found, tool_call_id, p = _message(data, p)
        if p > end:
            raise ValueError("a message runs past the end")
        if found and role == 2 * _ASSISTANT:
            position, calls, answered_after = index, found, []
        elif tool_call_id and role == 2 * _TOOL and position >= 0:
            answered_after.append(tool_call_id)
    if p != end:
        raise ValueError(f"{end - p} bytes follow the {message_count} messages")
    observed = frozenset(raw.decode("utf-8") for raw in answered_after)
    return AskingRound(position, tuple(calls), observed)


def _from_the_end(data: bytes, message_count: int, starts: Sequence[int]) -> AskingRound:
    """:func:`asking_round_of` read backwards from the last item: the first assistant item
    with tool calls met is the asking round, and the tool items met before it are the ones after
    it. A system or user item is passed by its role byte alone.

    The starts come from the walk that checked these bytes (the skim), so the items before the
    round are not looked at; each item read here must still end where the next one starts (or
    the bytes end), else ``ValueError``, as for any bytes the full walk cannot read.
    """
    if len(starts) != message_count:
        raise ValueError(f"{len(starts)} starts for {message_count} messages")
    end = len(data)
    answered_after: list[bytes] = []
    for index in range(message_count - 1, -1, -1):
        p = starts[index]
        if not 0 <= p < end:
            raise ValueError(f"message {index} starts at {p}, outside 0..{end - 1}")
        role = data[p]
        if role < 2 * _ASSISTANT:  # system or user: nothing in it counts here
            if role & 1:
                raise ValueError(f"role byte {role}")
            end = p
            continue
        role, found, tool_call_id, after = _message(data, p)
        if after != end:
            raise ValueError(f"message {index} ends at {after}, the next starts at {end}")
        if found and role == 2 * _ASSISTANT:
            if not answered_after:  # the usual pause: nothing answered after the round yet
                return AskingRound(index, tuple(found), _NOTHING)
            observed = frozenset([raw.decode("utf-8") for raw in answered_after])
            return AskingRound(index, tuple(found), observed)
        if tool_call_id and role == 2 * _TOOL:
            answered_after.append(tool_call_id)
        end = p
    return AskingRound(-1, (), _NOTHING)
