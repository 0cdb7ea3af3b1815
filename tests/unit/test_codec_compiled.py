"""The compiled codec's law: fastavro's bytes on write, fastavro's record on read.

:mod:`turnlog.wire.compiled` exists only for speed, so the only behaviour it may have is
fastavro's: for every current schema, the bytes ``schemaless_writer`` writes and the record
``schemaless_reader`` reads back. A truncated body is refused by name, never a raw exception.
"""

from __future__ import annotations

import functools
import io
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_codec import int32, int64, moments, text, values
from turnlog.errors import DecodeError
from turnlog.wire import codec
from turnlog.wire.compiled import CompiledSchema, compile_schema
from turnlog.wire.records import WIRE_TYPES, record_name, to_record

#: Every schema the compiler takes: the records, values and parts alike (``Role`` is an enum).
RECORD_SCHEMAS = sorted(n for n in codec.schema_names() if codec.schema_for(n)["type"] == "record")


@functools.cache
def _compiled(name: str) -> CompiledSchema:
    compiled = compile_schema(codec.schema_for(name))
    if compiled is None:
        raise AssertionError(f"{name} fell back to fastavro: the codec lost its fast path")
    return compiled


@functools.cache
def _parsed(name: str) -> Any:
    return fastavro.parse_schema(codec.schema_for(name), {})


def _write_compiled(name: str, record: Any) -> bytes:
    parts: list[bytes] = []
    _compiled(name).write(record, parts.append)
    return b"".join(parts)


def _write_fastavro(name: str, record: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, _parsed(name), record, strict=True)
    return buffer.getvalue()


def _assert_same_as_fastavro(name: str, record: Any) -> bytes:
    body = _write_compiled(name, record)
    assert body == _write_fastavro(name, record)
    read, end = _compiled(name).read(body, 0)
    assert end == len(body)
    assert read == fastavro.schemaless_reader(io.BytesIO(body), _parsed(name), None)
    return body


@pytest.mark.parametrize("name", sorted(WIRE_TYPES))
def test_every_wire_value_schema_is_compiled(name: str) -> None:
    assert _compiled(name).name == name


def test_a_schema_that_is_not_a_record_is_left_to_fastavro() -> None:
    assert compile_schema(codec.schema_for("Role")) is None


@settings(max_examples=200)
@given(values)
def test_values_write_and_read_as_fastavro_does(value: Any) -> None:
    _assert_same_as_fastavro(record_name(value), to_record(value))


# Straight from the schema, each record type on its own and with any field values the schema
# allows -- not only those a turnlog value's rules let through.
def _records(schema: Any, named: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, list):
        return st.one_of([_records(branch, named) for branch in schema])
    kind = schema["type"] if isinstance(schema, dict) else schema
    if isinstance(schema, dict) and schema.get("logicalType") == "timestamp-millis":
        return moments
    if kind == "record":
        fields = {f["name"]: _records(f["type"], named) for f in schema["fields"]}
        strategy: st.SearchStrategy[Any] = st.fixed_dictionaries(fields)
    elif kind == "enum":
        strategy = st.sampled_from(schema["symbols"])
    elif kind == "array":
        return st.lists(_records(schema["items"], named), max_size=3)
    else:
        return {
            "null": st.none(),
            "string": text,
            "bytes": st.binary(max_size=300),
            "long": int64,
            "int": int32,
            "boolean": st.booleans(),
            "double": st.floats(allow_nan=False),
        }[kind]
    named[schema["name"]] = strategy
    return strategy


@pytest.mark.parametrize("name", RECORD_SCHEMAS)
@settings(max_examples=40)
@given(data=st.data())
def test_any_record_of_a_schema_writes_and_reads_as_fastavro_does(
    name: str, data: st.DataObject
) -> None:
    record = data.draw(_records(codec.schema_for(name), {}))
    _assert_same_as_fastavro(name, record)


@settings(max_examples=60)
@given(values)
def test_a_truncated_body_is_refused_by_name(value: Any) -> None:
    name = record_name(value)
    body = _write_compiled(name, to_record(value))
    for end in range(len(body)):
        with pytest.raises(DecodeError) as caught:
            _compiled(name).read(body[:end], 0)
        assert caught.value.reason in {"truncated_body", "malformed_body"}, end
