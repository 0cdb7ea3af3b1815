"""The C reader's law: it reads what the generated Python reader reads, and nothing else.

:mod:`turnlog.wire.native` is there for speed only. For every current schema (and the skim's
reader, which keeps the messages as bytes), on valid bodies, mutated ones and random bytes, the
C reader must return the generated reader's value -- equal, and of the same types all the way
down -- and position, or ``None`` exactly where the generated reader refuses (it then words the
refusal). A build that should have the C reader and lacks it fails here, by name.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_codec_compiled import RECORD_SCHEMAS, _records, _write_compiled
from tests.unit.test_skim import any_pause
from turnlog.wire import codec, native
from turnlog.wire.compiled import CompiledSchema, compile_schema, compile_skim
from turnlog.wire.skim import _skim

PURE = os.environ.get("TURNLOG_PURE_PYTHON", "") not in ("", "0")


def test_the_c_reader_is_built_and_used() -> None:
    if PURE:
        assert not native.AVAILABLE
        assert native.UNAVAILABLE_BECAUSE == "TURNLOG_PURE_PYTHON is set"
        return
    # make install builds it (hatch_build.py); without it every read is pure Python again.
    assert native.AVAILABLE, native.UNAVAILABLE_BECAUSE
    for name in RECORD_SCHEMAS:
        assert _compiled(name)._native is not None, name
    assert _skim().reader is not None and _skim().reader._native is not None


needs_c = pytest.mark.skipif(PURE, reason="TURNLOG_PURE_PYTHON: there is no C reader to compare")


@functools.cache
def _compiled(name: str) -> CompiledSchema:
    compiled = compile_schema(codec.schema_for(name))
    assert compiled is not None
    return compiled


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same type at every level (``True == 1 == 1.0`` will not do)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float):  # NaN included: the same bits
        return struct.pack("<d", a) == struct.pack("<d", b)
    if hasattr(a, "tzinfo"):
        return bool(a == b and a.tzinfo is b.tzinfo)
    return bool(a == b)


def _assert_agrees(compiled: CompiledSchema, data: bytes, start: int = 0) -> None:
    try:
        expected: tuple[Any, int] | None = compiled._read(data, start, len(data))
    except Exception:
        expected = None
    found = native.read(compiled._native, data, start)
    if expected is None:
        assert found is None, "the C reader read bytes the Python reader refuses"
    else:
        assert found is not None, "the C reader refused bytes the Python reader reads"
        assert _same(found[0], expected[0])
        assert found[1] == expected[1]


def _body(data: st.DataObject, name: str) -> bytes:
    return _write_compiled(name, data.draw(_records(codec.schema_for(name), {})))


@needs_c
@pytest.mark.parametrize("name", RECORD_SCHEMAS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_record_reads_the_same_in_c(name: str, data: st.DataObject) -> None:
    body = _write_compiled(name, data.draw(_records(codec.schema_for(name), {})))
    _assert_agrees(_compiled(name), body)
    _assert_agrees(_compiled(name), b"\x00" + body, 1)
    _assert_agrees(_compiled(name), body + b"\x00\x02")  # the position past the record


@needs_c
@pytest.mark.parametrize("name", RECORD_SCHEMAS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_mutated_record_reads_or_refuses_the_same_in_c(name: str, data: st.DataObject) -> None:
    body = bytearray(_write_compiled(name, data.draw(_records(codec.schema_for(name), {}))))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body)))
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if kind == "flip" and at < len(body):
            body[at] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del body[at : at + data.draw(st.integers(1, 4))]
        else:
            del body[at:]
    _assert_agrees(_compiled(name), bytes(body))


#: Bytes that sit on the edges of what a reader takes: union branches 0 / 1 / 2, the enum
#: indexes around each enum's size (Role has four symbols: 3 and 4 zig-zag to 6 and 8),
#: booleans, negative and one-byte-maximum lengths, varint continuation bytes.
_EDGES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF)


@needs_c
@pytest.mark.parametrize("name", RECORD_SCHEMAS)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_every_byte_set_to_every_edge_value_reads_or_refuses_the_same_in_c(
    name: str, data: st.DataObject
) -> None:
    body = _body(data, name)
    for at in range(len(body)):
        for byte in _EDGES:
            _assert_agrees(_compiled(name), body[:at] + bytes([byte]) + body[at + 1 :])


@needs_c
@pytest.mark.parametrize("name", RECORD_SCHEMAS)
@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=64))
def test_random_bytes_read_or_refuse_the_same_in_c(name: str, body: bytes) -> None:
    _assert_agrees(_compiled(name), body)


@needs_c
@settings(max_examples=150, deadline=None)
@given(any_pause, st.data())
def test_the_skim_reads_a_pause_and_its_mutations_the_same_in_c(
    pause: Any, data: st.DataObject
) -> None:
    reader = _skim().reader
    assert reader is not None
    value = codec.encode(pause)
    start = len(_skim().header)
    _assert_agrees(reader, value, start)
    mutated = bytearray(value)
    at = data.draw(st.integers(start, len(mutated) - 1))
    mutated[at] = data.draw(st.integers(0, 255))
    _assert_agrees(reader, bytes(mutated), start)
    _assert_agrees(reader, value[: data.draw(st.integers(start, len(value) - 1))], start)


#: Every kind of value the C reader has, each where a mutation can reach it on its own, and an
#: array of messages read raw (the skim's walk, where strings are checked but not built).
_EVERY_KIND = {
    "type": "record",
    "name": "dev.turnlog.test.EveryKind",
    "fields": [
        {"name": "l", "type": "long"},
        {"name": "i", "type": "int"},
        {"name": "b", "type": "boolean"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["a", "b", "c"]}},
        {"name": "u", "type": ["null", "string"]},
        {"name": "d", "type": "double"},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "a", "type": {"type": "array", "items": "long"}},
        {"name": "raw", "type": {"type": "array", "items": codec.schema_for("Message")}},
        {"name": "s", "type": "string"},
    ],
}


@functools.cache
def _every_kind() -> tuple[CompiledSchema, CompiledSchema]:
    plain = compile_schema(_EVERY_KIND)
    raw = compile_skim(_EVERY_KIND, frozenset({"dev.turnlog.test.EveryKind.raw"}))
    assert plain is not None and raw is not None
    assert plain._native is not None and raw._native is not None
    empty = {"l": 0, "i": 0, "b": True, "e": "a", "u": None, "d": 0.0, "a": [], "raw": [], "s": ""}
    parts: list[bytes] = []
    plain.write({**empty, "t": datetime(1970, 1, 1, tzinfo=UTC)}, parts.append)
    assert raw.read(b"".join(parts), 0)[0]["raw"] == (b"", 0, (), -1)  # read raw indeed
    return plain, raw


_LONGS = [
    b"\xff" * 9 + b"\x01",  # 2**64 - 1: the largest
    b"\xff" * 9 + b"\x02",  # 2**64: one bit too many
    b"\xff" * 9 + b"\x03",
    b"\xff" * 9 + b"\x81\x00",  # eleven bytes
    b"\x80" * 9 + b"\x00",  # zero, in ten bytes
    b"\x80\x00",  # zero, in two
    b"\x01",  # -1: a negative length or count
    b"\x03",
    b"\x7f",  # -64
    b"\xfe\xff\xff\xff\x0f",  # 2**31 - 1 and beyond, for the int
    b"\x80\x80\x80\x80\x10",
    b"\xff\xff\xff\xff\x0f",
    b"\x81\x80\x80\x80\x10",
]


@needs_c
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_kind_with_every_edge_in_every_place_reads_the_same_in_c(
    data: st.DataObject,
) -> None:
    plain, raw = _every_kind()
    parts: list[bytes] = []
    plain.write(data.draw(_records(_EVERY_KIND, {})), parts.append)
    body = b"".join(parts)
    # Zeros behind: a reader that takes a wrong turn (one byte too many or too few) usually
    # still finds something readable in them, so the wrong turn shows as a read, not a refusal.
    tail = b"\x00" * 12
    for at in range(len(body)):
        mutations = [body[:at]]  # cut short
        mutations += [body[:at] + bytes([byte]) + body[at + 1 :] for byte in _EDGES]
        for varint in _LONGS:
            mutations += [body[:at] + varint + body[at:], body[:at] + varint + body[at + 1 :]]
        for mutated in mutations:
            for reader in (plain, raw):
                _assert_agrees(reader, mutated)
                _assert_agrees(reader, mutated + tail)


#: Bodies of one small record with a long, a timestamp and strings in it.
_token_consumed = st.deferred(
    lambda: _records(codec.schema_for("TokenConsumed"), {}).map(
        functools.partial(_write_compiled, "TokenConsumed")
    )
)


@needs_c
@settings(max_examples=10, deadline=None)
@given(_token_consumed)
def test_varints_at_the_edges_of_64_bits_read_the_same_in_c(body: bytes) -> None:
    for varint in _LONGS:
        for at in range(len(body)):
            _assert_agrees(_compiled("TokenConsumed"), body[:at] + varint + body[at:])


@needs_c
@settings(max_examples=10, deadline=None)
@given(_token_consumed)
def test_what_is_not_bytes_or_out_of_range_is_left_to_python(body: bytes) -> None:
    compiled = _compiled("TokenConsumed")
    assert native.read(compiled._native, bytearray(body), 0) is None
    assert native.read(compiled._native, memoryview(body), 0) is None
    assert native.read(compiled._native, body, -1) is None
    assert native.read(compiled._native, body, len(body) + 1) is None
    assert compiled.read(bytearray(body), 0) == compiled.read(body, 0)


def test_a_program_for_what_the_c_reader_does_not_cover_is_refused() -> None:
    recursive = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(ValueError, match="recursive"):
        native.program_of(recursive)
    union = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["string", "long"]}]}
    with pytest.raises(ValueError, match="union"):
        native.program_of(union)
    assert native.compile_program(union) is None


@needs_c
def test_a_build_of_another_source_is_not_used(tmp_path: Path) -> None:
    source = tmp_path / "_native.c"
    source.write_bytes(b"/* not the source this build was made from */\n")
    with pytest.warns(RuntimeWarning, match="another _native.c"):
        module, why = native._load(source)
    assert module is None and "stale" in why
    source.write_bytes(Path(native.__file__).with_name("_native.c").read_bytes())
    module, why = native._load(source)
    assert module is not None and why == ""
    assert hashlib.sha256(source.read_bytes()).hexdigest() == module.SOURCE_SHA256
