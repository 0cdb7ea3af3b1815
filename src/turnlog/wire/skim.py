"""A ``PauseRecorded`` read for its index fields, with the checkpoint's messages left as bytes.

Why: a replay, and a resume that carries the paused history into its resumed turn, need every
scalar of a pause -- ids, sequence, deadline -- but not its messages as Python dicts and strings.
Building those is most of the cost of decoding a pause (a 20-message checkpoint holds about 85
strings), and a resume that decodes them only to encode them again pays twice.

What it still guarantees: :func:`skim_pause` refuses exactly the bytes
:func:`turnlog.wire.codec.decode` refuses, with the same :class:`~turnlog.errors.DecodeError`
(reason and detail): the walk over the messages checks every length, bound, enum index and union
branch, and the UTF-8 of every string (:func:`turnlog.wire.compiled.compile_skim` says how it
does so without decoding each one). On a refusal the full decoder is asked for its own error, so
the two can never name different reasons. ``tests/unit/test_skim.py`` holds it to that with
random and mutated bytes.

``messages_raw`` is the encoded ``Message`` items exactly as the writer wrote them, without the
array's block counts and terminator: written after a count and followed by a zero byte (or with
more items appended first), it is a valid ``array<Message>`` body of any current schema.
``message_starts`` says where each item begins in it, noted by the same walk (an append per
item), so the resume path can read the last messages without walking the first ones again.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, NoReturn

from turnlog.contracts.checkpoint import TURN_STATE_VERSION
from turnlog.contracts.events import PauseRecorded
from turnlog.errors import DecodeError
from turnlog.wire.codec import MAGIC, decode, encode, fingerprint_of, registry_start, schema_for
from turnlog.wire.compiled import CompiledSchema, compile_schema, compile_skim
from turnlog.wire.direct import long_bytes
from turnlog.wire.records import to_record

__all__ = [
    "SkimmedCheckpoint",
    "SkimmedPause",
    "StoredPause",
    "decode_messages",
    "messages_hint",
    "read_stored",
    "skim_pause",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLI = timedelta(milliseconds=1)
_RAW_FIELD = "dev.turnlog.TurnCheckpoint.messages"


# NamedTuples, not frozen dataclasses: a replay builds one per record, and a tuple is built in one
# call where a frozen dataclass sets each of its 17 fields through object.__setattr__.
class SkimmedCheckpoint(NamedTuple):
    """The scalars of a ``TurnCheckpoint`` (same names and values as the decoded one), and its
    messages as bytes."""

    run_id: str
    session_id: str
    thread_id: str
    checkpoint_id: str
    scope_hash: str
    tool_call_id: str
    interrupt_id: str
    name: str
    prompt: str
    #: The encoded ``Message`` items, exactly as written, without block counts or terminator.
    messages_raw: bytes
    #: How many items ``messages_raw`` holds.
    message_count: int
    sequence: int
    tenant_id: str
    created_at: datetime
    package_version: str
    safe_boundary: bool
    version: int
    #: Where each item of ``messages_raw`` starts in it, in order (``message_count`` offsets),
    #: recorded by the walk that checked them, so a reader can start at the last ones
    #: (:func:`turnlog.wire.resumed_bytes.asking_round_of`). Empty when not known: a reader
    #: then walks the items from the first.
    message_starts: tuple[int, ...] = ()
    #: Where ``messages_raw`` starts in the skimmed record's bytes when the writer wrote the
    #: items as one block (every current writer does), else -1: with ``message_starts`` what
    #: a store keeps to read the pause again without the walk (:func:`read_stored`).
    messages_at: int = -1

    def messages(self) -> tuple[dict[str, Any], ...]:
        """The messages decoded, equal to the decoded checkpoint's ``messages``."""
        return decode_messages(self.messages_raw, self.message_count)


class SkimmedPause(NamedTuple):
    """A ``PauseRecorded``'s fields (same names and values as the decoded one), its checkpoint
    skimmed, and the record it was read from."""

    event_id: str
    occurred_at: datetime
    package_version: str
    checkpoint: SkimmedCheckpoint
    token_id: str
    request_json: str
    request_hash: str
    response_schema: str
    expires_at: datetime
    #: ``expires_at`` in milliseconds since the epoch, as it travels.
    expires_at_ms: int
    #: The single-object record skimmed: the bytes given, or for a pause written with an earlier
    #: schema version, the same pause written with today's.
    value: bytes
    #: The calls of a pause of several (``PauseRecorded.group``); empty for one call.
    group: tuple[Mapping[str, Any], ...] = ()

    def decode(self) -> PauseRecorded:
        """The full value, for the rare reader that needs the messages as a ``PauseRecorded``."""
        return decode(self.value, PauseRecorded)


class _Skim(NamedTuple):
    header: bytes  # C3 01 + the current PauseRecorded fingerprint
    reader: CompiledSchema | None  # None: the schema has something the walk cannot check
    message: CompiledSchema


_SKIM: _Skim | None = None  # built on first use: compiling reads the schema files


def _skim() -> _Skim:
    global _SKIM
    if _SKIM is None:
        message = compile_schema(schema_for("Message"))
        if message is None:  # the compiler covers every current schema; a test holds it to that
            raise RuntimeError("the Message schema is not compiled")
        _SKIM = _Skim(
            header=MAGIC + fingerprint_of("PauseRecorded"),
            reader=compile_skim(schema_for("PauseRecorded"), frozenset({_RAW_FIELD})),
            message=message,
        )
    return _SKIM


def skim_pause(value: object) -> SkimmedPause:
    """The pause in ``value``, its messages kept as bytes, or the :class:`DecodeError`
    :func:`~turnlog.wire.codec.decode` raises for it (``not_single_object``,
    ``unknown_fingerprint``, ``unexpected_type``, ``truncated_body``, ``malformed_body``,
    ``trailing_bytes``, ``unsupported_version``).

    A pause written with the current schema is walked, not decoded; anything else (another
    fingerprint, or a schema the walk cannot check) goes through the full decoder.
    """
    if not isinstance(value, bytes):
        if not isinstance(value, bytearray | memoryview):
            raise DecodeError("not_single_object", f"expected bytes, got {type(value).__name__}")
        value = bytes(value)
    skim = _SKIM or _skim()
    header = skim.header
    start = len(header)
    reader = skim.reader
    if reader is None:
        return _from_value(decode(value, PauseRecorded))
    if value[:start] != header:
        # The registry's framing with the current schema's id is walked too (from byte 5).
        start = registry_start(value, "PauseRecorded")
        if not start:
            return _from_value(decode(value, PauseRecorded))
    try:
        record, end = reader.read(value, start)
    except DecodeError as refused:
        _refuse(value, refused)
    checkpoint = record["checkpoint"]
    if end != len(value) or checkpoint["version"] != TURN_STATE_VERSION:
        _refuse(value, None)
    return _skimmed(record, value, checkpoint["messages"])


def _skimmed(
    record: Mapping[str, Any], value: bytes, messages: tuple[bytes, int, tuple[int, ...], int]
) -> SkimmedPause:
    """The skim of a record the compiled reader read, with its messages as ``(raw, count,
    starts, at)``."""
    checkpoint = record["checkpoint"]
    raw, count, starts, at = messages
    expires_at = record["expires_at"]
    return SkimmedPause(
        record["event_id"],
        record["occurred_at"],
        record["package_version"],
        SkimmedCheckpoint(
            checkpoint["run_id"],
            checkpoint["session_id"],
            checkpoint["thread_id"],
            checkpoint["checkpoint_id"],
            checkpoint["scope_hash"],
            checkpoint["tool_call_id"],
            checkpoint["interrupt_id"],
            checkpoint["name"],
            checkpoint["prompt"],
            raw,
            count,
            checkpoint["sequence"],
            checkpoint["tenant_id"],
            checkpoint["created_at"],
            checkpoint["package_version"],
            checkpoint["safe_boundary"],
            checkpoint["version"],
            starts,
            at,
        ),
        record["token_id"],
        record["request_json"],
        record["request_hash"],
        record["response_schema"],
        expires_at,
        (expires_at - _EPOCH) // _MILLI,
        value,
        tuple(record["group"]),
    )


# --- a pause read again from a store that skimmed it when it came in ---------------------------
#
# A store applies each pause after skimming it at the door (every check made), and may keep what
# the walk found beside it: where the messages stand in the record and where each one starts
# (:func:`messages_hint`). Reading that pause again for a resume then needs only its scalars:
# :func:`read_stored` reads them in the schema's order and steps over the messages, instead of
# walking them again -- about a fifth of a resume's own work. The hint is the store's own note,
# never input from outside; even so it is checked against the bytes it describes (the array's
# count where the walk found it, the terminator after the items, a CRC-32 of the items and their
# starts, the record's exact end), and anything that does not fit is skimmed in full, which
# refuses exactly as a decode does.


class StoredPause(NamedTuple):
    """A pause record as a store keeps it: its bytes, and the hint its skim left (or None)."""

    value: bytes
    hint: tuple[int, ...] | None


def messages_hint(checkpoint: SkimmedCheckpoint) -> tuple[int, ...] | None:
    """What a store keeps to read this pause again without walking its messages:
    ``(at, length, count, check, *starts)``, ``check`` a CRC-32 of the items and their starts;
    ``None`` when the items are not one run in the record."""
    if checkpoint.messages_at < 0 or len(checkpoint.message_starts) != checkpoint.message_count:
        return None
    raw, starts = checkpoint.messages_raw, checkpoint.message_starts
    return (
        checkpoint.messages_at,
        len(raw),
        checkpoint.message_count,
        _check(raw, starts),
        *starts,
    )


def _check(raw: bytes, starts: Sequence[int]) -> int:
    return zlib.crc32(array("q", starts).tobytes(), zlib.crc32(raw))


def read_stored(stored: StoredPause | bytes) -> SkimmedPause:
    """:func:`skim_pause` of a stored pause, read with its hint when the hint fits the bytes."""
    if isinstance(stored, StoredPause):
        value, hint = stored
        if hint is not None:
            try:
                found = _read_hinted(value, hint)
            except (DecodeError, IndexError, ValueError, TypeError):
                found = None  # skimmed in full below: that names the refusal, if there is one
            if found is not None:
                return found
        return skim_pause(value)
    return skim_pause(stored)


def _read_hinted(value: bytes, hint: Sequence[int]) -> SkimmedPause | None:
    """The skim of ``value`` read with its hint: the record with its messages cut out (an empty
    array in their place) goes through the compiled reader, which checks every scalar as the
    skim does, and the items are taken as the hint says. ``None`` when the hint does not fit."""
    skim = _SKIM or _skim()
    header = skim.header
    start = len(header)
    reader = skim.reader
    if reader is None or len(hint) < 4:
        return None
    if value[:start] != header:
        start = registry_start(value, "PauseRecorded")
        if not start:
            return None
    at, length, count, check = hint[0], hint[1], hint[2], hint[3]
    starts = tuple(hint[4:])
    if count <= 0 or len(starts) != count or starts[0] != 0 or length <= starts[-1]:
        return None
    counted = long_bytes(count)  # a positive block count, as the writer wrote it
    cut = at - len(counted)
    end = at + length
    if cut <= start or value[cut:at] != counted or value[end : end + 1] != b"\x00":
        return None
    if _check(value[at:end], starts) != check:
        return None  # not the items (or the starts) the hint was made for
    record, stop = reader.read(value[:cut] + value[end:], start)
    checkpoint = record["checkpoint"]
    if stop != len(value) - length - len(counted) or checkpoint["messages"][1] != 0:
        return None
    if checkpoint["version"] != TURN_STATE_VERSION:
        return None
    return _skimmed(record, value, (value[at:end], count, starts, at))


def decode_messages(raw: bytes, count: int) -> tuple[dict[str, Any], ...]:
    """``count`` encoded ``Message`` items (a ``messages_raw``) as message dicts; a
    :class:`DecodeError` for bytes that do not hold exactly that many."""
    reader = _skim().message
    found = []
    p = 0
    for _ in range(count):
        message, p = reader.read(raw, p)
        found.append(message)
    if p != len(raw):
        raise DecodeError("trailing_bytes", f"{len(raw) - p} bytes follow the {count} messages")
    return tuple(found)


def _refuse(value: bytes, refused: DecodeError | None) -> NoReturn:
    """Raise the full decoder's refusal of ``value``: the same reason and detail a decode
    gives, whatever the walk tripped over first."""
    decode(value, PauseRecorded)
    # The walk refused what the decoder reads: a bug here, never a reason to let a record in.
    raise refused or DecodeError("malformed_body", "PauseRecorded body refused by the skim")


def _from_value(pause: PauseRecorded) -> SkimmedPause:
    """A skim of a fully decoded pause: its messages written again with today's schema."""
    parts: list[bytes] = []
    starts: list[int] = []
    offset = 0
    write = _skim().message.write
    for message in pause.checkpoint.messages:
        starts.append(offset)
        first = len(parts)
        write(dict(message), parts.append)
        offset += sum(map(len, parts[first:]))
    cp = pause.checkpoint
    record: Mapping[str, Any] = to_record(cp)
    return SkimmedPause(
        pause.event_id,
        pause.occurred_at,
        pause.package_version,
        SkimmedCheckpoint(
            **{k: v for k, v in record.items() if k != "messages"},
            messages_raw=b"".join(parts),
            message_count=len(cp.messages),
            message_starts=tuple(starts),
        ),
        pause.token_id,
        pause.request_json,
        pause.request_hash,
        pause.response_schema,
        pause.expires_at,
        (pause.expires_at - _EPOCH) // _MILLI,
        encode(pause),
        pause.group,
    )
