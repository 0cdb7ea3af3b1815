"""Values to bytes and back: Avro single-object encoding over the schemas in ``schemas/``.

A record on a topic is ``C3 01``, the 8-byte CRC-64-AVRO fingerprint of the writer schema's
Parsing Canonical Form (little-endian, as the Avro specification puts it), then the Avro binary
body. The fingerprint is what lets any Avro library -- not only this one -- find the schema a
record was written with, and what lets this build read records written by an earlier one: the
earlier schema versions kept under ``schemas/history/`` are looked up by fingerprint and resolved
to today's schema. A fingerprint that matches nothing is refused by name, never guessed.

Each current schema is written and read by code compiled from it once
(:mod:`turnlog.wire.compiled`; figures in ``bench/README.md``),
held to produce exactly fastavro's bytes; earlier schema versions, which need writer-to-reader
resolution, go through fastavro.

Decoding never lets a library exception escape: bytes on a topic come from outside, and a bad
record must become a named refusal the consumer can log and skip, not a crash.
"""

from __future__ import annotations

import copy
import functools
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, overload

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import Event
from turnlog.errors import ConfigurationError, DecodeError
from turnlog.wire.compiled import CompiledSchema, compile_schema
from turnlog.wire.records import WIRE_TYPES, WireValue, from_record, record_name, to_record

__all__ = [
    "MAGIC",
    "NAMESPACE",
    "decode",
    "encode",
    "fingerprint_of",
    "schema_for",
    "schema_names",
    "schema_path",
    "schemas_dir",
]

#: The two marker bytes that open every single-object-encoded Avro value.
MAGIC = b"\xc3\x01"
#: The namespace of every turnlog schema.
NAMESPACE = "dev.turnlog"

_HEADER = len(MAGIC) + 8
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})

_T = TypeVar("_T", bound=TurnCheckpoint | Event)


@dataclass(frozen=True, slots=True)
class _Schema:
    name: str  # short name, the .avsc file stem
    label: str  # "current", or the history version ("v1", ...)
    path: Path
    expanded: dict[str, Any]  # self-contained: every named type defined at its first use
    parsed: Any  # fastavro's parsed form of ``expanded``
    fingerprint: bytes
    compiled: CompiledSchema | None  # current schemas only; None: fastavro writes and reads it


@dataclass(frozen=True, slots=True)
class _Registry:
    current: Mapping[str, _Schema]
    by_fingerprint: Mapping[bytes, _Schema]


# --- locating the schemas -------------------------------------------------------------------


def schemas_dir() -> Path:
    """The directory holding the ``.avsc`` files this build reads and writes with.

    A wheel carries them as ``turnlog/_schemas``; a source or editable checkout reads the
    repository's ``schemas/`` directly, so there is only ever one copy to edit.
    """
    packaged = resources.files("turnlog") / "_schemas"
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[3] / "schemas"
    if source.is_dir():
        return source
    raise ConfigurationError(
        "turnlog's Avro schemas were not found: neither turnlog/_schemas in the installed "
        f"package nor {source} in a source checkout"
    )


def schema_path(name: str) -> Path:
    """The ``.avsc`` file of the current schema ``name`` (e.g. ``"PauseRecorded"``)."""
    return _entry(name).path


def schema_names() -> tuple[str, ...]:
    """Every current schema, by short name, sorted."""
    return tuple(sorted(_registry().current))


def schema_for(name: str) -> dict[str, Any]:
    """The current schema ``name``, fully expanded, as JSON-able data.

    Expanded means self-contained: a named type is defined where first used and referred to by
    full name after that, which is the form every Avro library parses on its own and the form
    whose canonical text the fingerprint is taken of. A copy; changing it changes nothing here.
    """
    return copy.deepcopy(_entry(name).expanded)


def fingerprint_of(name: str) -> bytes:
    """The 8 fingerprint bytes that follow ``C3 01`` in records written with schema ``name``."""
    return _entry(name).fingerprint


def _entry(name: str) -> _Schema:
    try:
        return _registry().current[name]
    except KeyError:
        raise KeyError(f"no turnlog schema named {name!r}; known: {schema_names()}") from None


# --- loading and fingerprinting -------------------------------------------------------------


@functools.cache
def _registry() -> _Registry:
    root = schemas_dir()
    raw: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in sorted(root.glob("*.avsc")):
        schema = _read_json(path)
        full = f"{NAMESPACE}.{path.stem}"
        if _full_name(schema.get("name", ""), schema.get("namespace")) != full:
            raise ConfigurationError(f"{path.name} must define exactly the type {full}")
        raw[full] = (path, schema)
    definitions = {full: schema for full, (_, schema) in raw.items()}

    current = {
        path.stem: _load(path.stem, "current", path, schema, definitions)
        for path, schema in raw.values()
    }
    entries = list(current.values())
    for path in sorted((root / "history").glob("*.avsc")):
        name, _, label = path.stem.partition(".")
        schema = _read_json(path)
        if name not in current or _full_name(schema.get("name", ""), schema.get("namespace")) != (
            f"{NAMESPACE}.{name}"
        ):
            raise ConfigurationError(f"history/{path.name} is not an earlier version of a schema")
        # History files are self-contained snapshots: resolving their references against
        # today's types would let an unrelated change alter an old fingerprint.
        entries.append(_load(name, label or "earlier", path, schema, {}))

    by_fingerprint: dict[bytes, _Schema] = {}
    for entry in entries:
        clash = by_fingerprint.get(entry.fingerprint)
        if clash is not None:
            raise ConfigurationError(
                f"{entry.path.name} and {clash.path.name} have the same fingerprint; a reader "
                "could not tell their records apart"
            )
        by_fingerprint[entry.fingerprint] = entry
    return _Registry(current=current, by_fingerprint=by_fingerprint)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read schema {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path} must hold one named Avro type")
    return data


def _load(
    name: str, label: str, path: Path, schema: dict[str, Any], definitions: Mapping[str, Any]
) -> _Schema:
    expanded = _expand(schema, definitions, set(), "")
    try:
        parsed = fastavro.parse_schema(copy.deepcopy(expanded), {})
        canonical = to_parsing_canonical_form(expanded)
    except Exception as exc:
        raise ConfigurationError(f"{path.name} is not a valid Avro schema: {exc}") from exc
    compiled = compile_schema(expanded) if label == "current" else None
    return _Schema(
        name=name,
        label=label,
        path=path,
        expanded=expanded,
        parsed=parsed,
        fingerprint=bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO")),
        compiled=compiled,
    )


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _expand(schema: Any, definitions: Mapping[str, Any], seen: set[str], namespace: str) -> Any:
    """``schema`` with every reference to another file's type replaced by its definition.

    The first use defines the type and later ones name it, as the Parsing Canonical Form does;
    defining it twice would be an invalid schema, and its canonical text -- hence the
    fingerprint -- would no longer match what a Java or C# reader computes.
    """
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        full = _full_name(schema, namespace)
        if full in seen:
            return full
        if full not in definitions:
            raise ConfigurationError(f"schema refers to unknown type {full!r}")
        return _expand(definitions[full], definitions, seen, full.rpartition(".")[0])
    if isinstance(schema, list):
        return [_expand(branch, definitions, seen, namespace) for branch in schema]
    if not isinstance(schema, dict):
        raise ConfigurationError(f"not an Avro schema: {schema!r}")
    kind = schema.get("type")
    out = {key: value for key, value in schema.items() if key != "namespace"}
    if kind in _NAMED:
        full = _full_name(str(schema.get("name", "")), schema.get("namespace", namespace))
        if full in seen:
            raise ConfigurationError(f"type {full!r} is defined twice")
        seen.add(full)
        out["name"] = full
        inner = full.rpartition(".")[0]
        if kind in ("record", "error"):
            out["fields"] = [
                {**f, "type": _expand(f["type"], definitions, seen, inner)}
                for f in schema["fields"]
            ]
    elif kind == "array":
        out["items"] = _expand(schema["items"], definitions, seen, namespace)
    elif kind == "map":
        out["values"] = _expand(schema["values"], definitions, seen, namespace)
    else:
        out["type"] = _expand(kind, definitions, seen, namespace)
    return out


# --- the codec ------------------------------------------------------------------------------


def encode(value: WireValue) -> bytes:
    """``value`` as single-object-encoded Avro bytes. The same value always gives the same bytes.

    ``TypeError`` for something that is not a turnlog wire value; ``ValueError`` for a value its
    schema cannot carry (a timestamp finer than a millisecond, a number out of range, text that
    is not valid Unicode).
    """
    name = record_name(value)
    entry = _entry(name)
    record = to_record(value)
    try:
        if entry.compiled is not None:
            parts = [MAGIC, entry.fingerprint]
            entry.compiled.write(record, parts.append)
            return b"".join(parts)
        buffer = io.BytesIO()
        buffer.write(MAGIC)
        buffer.write(entry.fingerprint)
        fastavro.schemaless_writer(buffer, entry.parsed, record, strict=True)
        return buffer.getvalue()
    except Exception as exc:
        raise ValueError(f"{name} cannot be written with its schema: {exc}") from exc


@overload
def decode(data: bytes, expected: None = None) -> WireValue: ...


@overload
def decode(data: bytes, expected: type[_T]) -> _T: ...


def decode(data: bytes, expected: type[Any] | None = None) -> Any:
    """The value a single-object-encoded record holds, or :class:`DecodeError` naming why not.

    ``expected`` (a class such as ``PauseRecorded``, or ``Event`` for any event) refuses a record
    of another type before its body is read. Reasons: ``not_single_object``,
    ``unknown_fingerprint``, ``unexpected_type``, ``truncated_body``, ``malformed_body``,
    ``trailing_bytes``, ``unsupported_version``, ``invalid_value``.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError("not_single_object", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < _HEADER or data[: len(MAGIC)] != MAGIC:
        raise DecodeError(
            "not_single_object",
            f"{len(data)} bytes not starting with C3 01 and an 8-byte schema fingerprint",
        )
    registry = _registry()
    writer = registry.by_fingerprint.get(data[len(MAGIC) : _HEADER])
    if writer is None:
        raise DecodeError(
            "unknown_fingerprint",
            f"no current or earlier turnlog schema has fingerprint {data[2:_HEADER].hex()}",
        )
    cls = WIRE_TYPES.get(writer.name)
    if cls is None:
        raise DecodeError(
            "unexpected_type", f"a {writer.name} is part of a turnlog value, not a value itself"
        )
    if expected is not None and not issubclass(cls, expected):
        raise DecodeError(
            "unexpected_type", f"expected {expected.__name__}, the record is a {writer.name}"
        )
    reader = registry.current[writer.name]
    if reader is writer and writer.compiled is not None:
        record, end = writer.compiled.read(data, _HEADER)
    else:
        record, end = _read_resolving(writer, reader, data)
    if end != len(data):
        raise DecodeError(
            "trailing_bytes", f"{len(data) - end} bytes follow the end of the {writer.name} body"
        )
    try:
        return from_record(writer.name, record)
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(
            "invalid_value", f"{writer.name} record breaks its value's rules: {exc}"
        ) from exc


def _read_resolving(writer: _Schema, reader: _Schema, data: bytes) -> tuple[dict[str, Any], int]:
    """Through fastavro: an earlier writer schema resolved to today's, or a schema the
    compiler leaves alone."""
    stream = io.BytesIO(data)
    stream.seek(_HEADER)
    try:
        record = fastavro.schemaless_reader(
            stream, writer.parsed, None if reader is writer else reader.parsed
        )
    except Exception as exc:
        # fastavro signals a short read as EOFError or as an IndexError from an empty varint;
        # either way, an exception with the whole input consumed means the body ended early.
        if isinstance(exc, EOFError) or stream.tell() >= len(data):
            raise DecodeError("truncated_body", f"{writer.name} body ends early") from exc
        raise DecodeError(
            "malformed_body", f"{writer.name} body is not valid Avro: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(record, dict):
        raise DecodeError("malformed_body", f"{writer.name} body did not read as a record")
    return record, stream.tell()
