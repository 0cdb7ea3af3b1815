"""The .avsc files as a contract: their shape, their fingerprints, and reading old versions."""

from __future__ import annotations

import io
import json
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import avro.schema
import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form

from turnlog.contracts.events import AskUserAnswered, Event, TurnResumed
from turnlog.errors import ConfigurationError, DecodeError
from turnlog.wire import codec
from turnlog.wire.records import WIRE_TYPES

NAMED = {"record", "error", "enum", "fixed"}
HISTORY = sorted((codec.schemas_dir() / "history").glob("*.avsc"))

# --- an independent CRC-64-AVRO, straight from the specification -----------------------------

_EMPTY = 0xC15D213AA4D7A795


def _table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY if fp & 1 else 0)
        table.append(fp)
    return table


_TABLE = _table()


def crc64_avro(text: str) -> bytes:
    fp = _EMPTY
    for byte in text.encode("utf-8"):
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp.to_bytes(8, "little")  # the single-object header is little-endian


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _walk(schema: Any) -> list[dict[str, Any]]:
    """Every dict in a schema, the schema itself included."""
    if isinstance(schema, list):
        return [d for item in schema for d in _walk(item)]
    if not isinstance(schema, dict):
        return []
    found = [schema]
    for key in ("type", "items", "values"):
        found += _walk(schema.get(key))
    for f in schema.get("fields", ()):
        found += _walk(f["type"])
    return found


# --- shape -----------------------------------------------------------------------------------


def test_each_file_defines_exactly_one_named_type_in_the_namespace() -> None:
    paths = sorted(codec.schemas_dir().glob("*.avsc"))
    assert {p.stem for p in paths} == set(codec.schema_names())
    nested = {"AskUserAnswered", "Message", "ToolCall", "Role", "PausedCall", "CallAnswer"}
    assert set(WIRE_TYPES) | nested == {p.stem for p in paths}
    for path in paths:
        schema = _load(path)
        assert schema["name"] == path.stem
        assert schema["namespace"] == codec.NAMESPACE
        nested = [d for d in _walk(schema)[1:] if d.get("type") in NAMED]
        assert nested == [], f"{path.name} defines a second named type inline"


@pytest.mark.parametrize("cls", [*WIRE_TYPES.values(), AskUserAnswered], ids=lambda c: c.__name__)
def test_schema_fields_are_the_dataclass_fields(cls: type[Any]) -> None:
    schema = codec.schema_for(cls.__name__)
    by_name = {f["name"]: f for f in schema["fields"]}
    assert list(by_name) == [f.name for f in fields(cls)]
    for f in fields(cls):
        wire = by_name[f.name]["type"]
        optional = str(f.type).endswith("| None")
        assert (isinstance(wire, list) and "null" in wire) == optional, f.name
        if optional:
            assert wire[0] == "null" and by_name[f.name]["default"] is None, f.name
        is_time = isinstance(wire, dict) and wire.get("logicalType") == "timestamp-millis"
        assert is_time == (str(f.type) == "datetime"), f.name


@pytest.mark.parametrize("cls", [c for c in WIRE_TYPES.values() if issubclass(c, Event)])
def test_every_event_opens_with_id_moment_and_writer_version(cls: type[Any]) -> None:
    opening = codec.schema_for(cls.__name__)["fields"][:3]
    assert opening == [
        {"name": "event_id", "type": "string"},
        {"name": "occurred_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "package_version", "type": "string"},
    ]


def test_schema_lookups_name_their_file_and_hand_out_copies() -> None:
    assert codec.schema_path("PauseRecorded") == codec.schemas_dir() / "PauseRecorded.avsc"
    assert codec.schema_path("PauseRecorded").is_file()
    schema = codec.schema_for("ToolCall")
    schema["fields"].clear()
    assert codec.schema_for("ToolCall")["fields"] != []
    with pytest.raises(KeyError, match="Nope"):
        codec.fingerprint_of("Nope")


def test_the_expanded_schema_is_self_contained_avro() -> None:
    for name in codec.schema_names():
        parsed = avro.schema.parse(json.dumps(codec.schema_for(name)))
        assert isinstance(parsed, avro.schema.NamedSchema)
        assert parsed.fullname == f"{codec.NAMESPACE}.{name}"


# --- fingerprints ----------------------------------------------------------------------------


def test_fingerprints_are_crc64_avro_of_the_canonical_form_little_endian() -> None:
    for name in codec.schema_names():
        canonical = to_parsing_canonical_form(codec.schema_for(name))
        assert codec.fingerprint_of(name) == crc64_avro(canonical), name


def test_fingerprints_match_a_hand_written_java_canonical_form() -> None:
    # Java's SchemaNormalization writes a logical-type long as plain "long".
    tool_call = (
        '{"name":"dev.turnlog.ToolCall","type":"record","fields":[{"name":"id","type":"string"},'
        '{"name":"name","type":"string"},{"name":"arguments","type":"string"}]}'
    )
    token_consumed = (
        '{"name":"dev.turnlog.TokenConsumed","type":"record","fields":['
        '{"name":"event_id","type":"string"},{"name":"occurred_at","type":"long"},'
        '{"name":"package_version","type":"string"},{"name":"token_id","type":"string"},'
        '{"name":"answer_id","type":"string"},{"name":"thread_id","type":"string"},'
        '{"name":"checkpoint_id","type":"string"},{"name":"outcome","type":"string"},'
        '{"name":"response_json","type":"string"},{"name":"claim_id","type":"string"},'
        '{"name":"claimant","type":"string"},{"name":"claimed_at_ms","type":"long"},'
        '{"name":"claim_state","type":"string"}]}'
    )
    assert codec.fingerprint_of("ToolCall") == crc64_avro(tool_call)
    assert codec.fingerprint_of("TokenConsumed") == crc64_avro(token_consumed)


@pytest.mark.parametrize("name", ["ToolCall", "Role", "Message", "AskUserAnswered"])
def test_fingerprints_match_the_apache_library_where_it_follows_the_spec(name: str) -> None:
    # The Python avro package keeps {"type":"long"} for logical types in its canonical form,
    # unlike Java and the specification, so only schemas without logical types compare here.
    parsed = avro.schema.parse(json.dumps(codec.schema_for(name)))
    assert parsed.fingerprint() == codec.fingerprint_of(name)


def test_a_type_used_twice_is_defined_once_then_named() -> None:
    definitions = {
        "x.Suit": {"type": "enum", "name": "Suit", "namespace": "x", "symbols": ["A", "B"]},
    }
    pair = {
        "type": "record",
        "name": "Pair",
        "namespace": "x",
        "fields": [{"name": "a", "type": "Suit"}, {"name": "b", "type": "x.Suit"}],
    }
    expanded = codec._expand(pair, definitions, set(), "")
    assert expanded["fields"][1]["type"] == "x.Suit"
    parsed = avro.schema.parse(json.dumps(expanded))
    assert crc64_avro(to_parsing_canonical_form(expanded)) == parsed.fingerprint()
    with pytest.raises(ConfigurationError, match="unknown type"):
        codec._expand({**pair, "fields": [{"name": "a", "type": "Club"}]}, {}, set(), "")


# --- evolution -------------------------------------------------------------------------------


def test_history_holds_self_contained_earlier_versions_of_current_schemas() -> None:
    assert HISTORY, "at least one earlier version must be kept, or evolution is untested"
    current = {codec.fingerprint_of(name) for name in codec.schema_names()}
    for path in HISTORY:
        schema = _load(path)
        name = path.stem.partition(".")[0]
        assert name in codec.schema_names()
        assert schema["name"] == f"{codec.NAMESPACE}.{name}"
        avro.schema.parse(json.dumps(schema))  # parses alone: no reference to today's files
        assert crc64_avro(to_parsing_canonical_form(schema)) not in current


def _v1_record() -> dict[str, Any]:
    return {
        "event_id": "e-1",
        "occurred_at": datetime(2024, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "package_version": "0.0.9",
        "token_id": "tok",
        "answer_id": "ans",
        "run_id": "run",
        "session_id": "ses",
        "thread_id": "thr",
        "checkpoint_id": "cp",
        "interrupt_id": "int",
        "tool_call_id": "call-1",
        "name": "approve",
        "prompt": "Ship it?",
        "response_json": '{"approved":true}',
        "history": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call-1", "name": "approve", "arguments": "{}"}],
                "tool_call_id": None,
                "name": None,
            }
        ],
    }


def test_a_record_written_with_an_earlier_schema_reads_with_todays() -> None:
    v1 = _load(codec.schemas_dir() / "history" / "TurnResumed.v1.avsc")
    assert "answered" not in [f["name"] for f in v1["fields"]]
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(v1), _v1_record())
    data = b"\xc3\x01" + crc64_avro(to_parsing_canonical_form(v1)) + body.getvalue()

    decoded = codec.decode(data, TurnResumed)
    assert decoded == TurnResumed(**{**_v1_record(), "answered": None})
    # Re-encoding writes today's schema, which a v1 reader would need resolution to read.
    assert codec.encode(decoded)[2:10] == codec.fingerprint_of("TurnResumed")


def test_a_record_of_an_unknown_schema_version_is_refused_by_name() -> None:
    v3 = codec.schema_for("TurnResumed")
    v3["fields"].append({"name": "mood", "type": "string", "default": ""})
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(v3), {**_v1_record(), "mood": "ok"})
    data = b"\xc3\x01" + crc64_avro(to_parsing_canonical_form(v3)) + body.getvalue()
    with pytest.raises(DecodeError) as caught:
        codec.decode(data)
    assert caught.value.reason == "unknown_fingerprint"
