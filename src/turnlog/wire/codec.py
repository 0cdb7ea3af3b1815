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

The registry wire is the other framing (:func:`use_registry`, set up at start by
:mod:`turnlog.kafka.registry` when ``TURNLOG_WIRE=registry``): ``00``, the 4-byte big-endian
schema id a Confluent-compatible schema registry gave the writer schema, then the same Avro body.
:func:`decode` reads both framings whichever one this process writes, so a topic can switch over
with its earlier records in place; an id is resolved through the registry once and kept, never
asked again per record. Both framings are kept in this one module because they share its
schema table -- the fingerprints, the compiled readers, the history -- and the one decode
that chooses between them on the first byte.

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
    "REGISTRY_MAGIC",
    "WRITE_HEADERS",
    "decode",
    "encode",
    "fingerprint_of",
    "schema_for",
    "schema_names",
    "schema_path",
    "schemas_dir",
    "use_registry",
    "use_single_object",
    "versions_of",
]

#: The two marker bytes that open every single-object-encoded Avro value.
MAGIC = b"\xc3\x01"
#: The namespace of every turnlog schema.
NAMESPACE = "dev.turnlog"

#: The byte that opens a value in the schema registry's framing, before its 4-byte schema id.
REGISTRY_MAGIC = b"\x00"

_HEADER = len(MAGIC) + 8
_ID_HEADER = len(REGISTRY_MAGIC) + 4
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


#: What :func:`encode` (and the worker's direct writers) put before each current schema's
#: body, by short name: ``C3 01`` and the fingerprint, or with the registry wire ``00`` and the
#: schema id. Filled when the schemas load; changed in place by :func:`use_registry`.
WRITE_HEADERS: dict[str, bytes] = {}
#: Writer schemas of the registry framing, by schema id, as resolved so far.
_BY_ID: dict[int, _Schema] = {}
#: Ids the registry has no turnlog schema for, and why: refused again without asking.
_REFUSED_IDS: dict[int, str] = {}
#: The registry's text of a schema by id (``None``: no such id), or ``None`` when no registry
#: is configured in this process.
_LOOKUP: list[Any] = [None]


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


def versions_of(name: str) -> tuple[dict[str, Any], ...]:
    """Every version of schema ``name``, expanded, oldest first and today's last: the history
    a schema registry is given, in the order its compatibility checks follow."""
    current = _entry(name)
    earlier = [
        entry
        for entry in _registry().by_fingerprint.values()
        if entry.name == name and entry is not current and entry.label[1:].isdigit()
    ]
    earlier.sort(key=lambda entry: int(entry.label[1:]))
    return tuple(copy.deepcopy(entry.expanded) for entry in [*earlier, current])


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
    for name, entry in current.items():
        WRITE_HEADERS.setdefault(name, MAGIC + entry.fingerprint)
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
    """``value`` as single-object-encoded Avro bytes (or in the registry framing, once
    :func:`use_registry` gave this process schema ids). The same value always gives the same
    bytes.

    ``TypeError`` for something that is not a turnlog wire value; ``ValueError`` for a value its
    schema cannot carry (a timestamp finer than a millisecond, a number out of range, text that
    is not valid Unicode).
    """
    name = record_name(value)
    entry = _entry(name)
    record = to_record(value)
    try:
        if entry.compiled is not None:
            parts = [WRITE_HEADERS[name]]
            entry.compiled.write(record, parts.append)
            return b"".join(parts)
        buffer = io.BytesIO()
        buffer.write(WRITE_HEADERS[name])
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

    Registry-framed records (``00`` and a schema id) are read too: the writer schema is the one
    the registry holds under that id (``unknown_schema_id`` when it has none, or none of a
    turnlog type, or no registry is configured here; :class:`SchemaRegistryRefused` when the
    registry cannot be asked).

    ``expected`` (a class such as ``PauseRecorded``, or ``Event`` for any event) refuses a record
    of another type before its body is read. Reasons: ``not_single_object``,
    ``unknown_fingerprint``, ``unknown_schema_id``, ``unexpected_type``, ``truncated_body``,
    ``malformed_body``, ``trailing_bytes``, ``unsupported_version``, ``invalid_value``.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError("not_single_object", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    registry = _registry()
    if len(data) >= _HEADER and data[: len(MAGIC)] == MAGIC:
        start = _HEADER
        writer = registry.by_fingerprint.get(data[len(MAGIC) : _HEADER])
        if writer is None:
            raise DecodeError(
                "unknown_fingerprint",
                f"no current or earlier turnlog schema has fingerprint {data[2:_HEADER].hex()}",
            )
    elif len(data) >= _ID_HEADER and data[:1] == REGISTRY_MAGIC:
        start = _ID_HEADER
        writer = _writer_by_id(int.from_bytes(data[1:_ID_HEADER], "big"))
    else:
        raise DecodeError(
            "not_single_object",
            f"{len(data)} bytes not starting with C3 01 and an 8-byte schema fingerprint",
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
        record, end = writer.compiled.read(data, start)
    else:
        record, end = _read_resolving(writer, reader, data, start)
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


def _read_resolving(
    writer: _Schema, reader: _Schema, data: bytes, start: int = _HEADER
) -> tuple[dict[str, Any], int]:
    """Through fastavro: an earlier writer schema resolved to today's, or a schema the
    compiler leaves alone."""
    stream = io.BytesIO(data)
    stream.seek(start)
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


# --- the registry framing -------------------------------------------------------------------


def use_registry(
    lookup: Any,
    write_ids: Mapping[str, int] | None = None,
    known: Mapping[int, str] | None = None,
) -> None:
    """Read (and with ``write_ids``, write) the schema registry's framing from now on.

    ``lookup(id)`` returns the registry's text of schema ``id`` or ``None`` when it has no
    such id, and raises :class:`~turnlog.errors.SchemaRegistryRefused` when the registry
    cannot be asked; it is called once per id, the answer kept. ``write_ids`` gives the id of
    each current schema this process writes (``encode`` then frames them with it); ``known``
    primes ids whose schema text is already at hand (what registering returned).
    """
    current = _registry().current
    _LOOKUP[0] = lookup
    _REFUSED_IDS.clear()
    for schema_id, text in (known or {}).items():
        _learn(schema_id, text)
    for name, schema_id in (write_ids or {}).items():
        if name not in current:
            raise KeyError(f"no turnlog schema named {name!r}")
        _BY_ID[schema_id] = current[name]
        WRITE_HEADERS[name] = REGISTRY_MAGIC + schema_id.to_bytes(4, "big")


def registry_set() -> bool:
    """Whether registry-framed records can be read now (:func:`use_registry` was called)."""
    return _LOOKUP[0] is not None


def use_single_object() -> None:
    """Write single-object records again and forget the registry (ids and lookup)."""
    for name, entry in _registry().current.items():
        WRITE_HEADERS[name] = MAGIC + entry.fingerprint
    _BY_ID.clear()
    _REFUSED_IDS.clear()
    _LOOKUP[0] = None


def registry_start(data: bytes, name: str) -> int:
    """Where the body starts when ``data`` is registry-framed with an id of the current schema
    ``name`` (5), else 0 -- for readers that walk a current body themselves (the skim)."""
    if len(data) < _ID_HEADER or data[:1] != REGISTRY_MAGIC:
        return 0
    try:
        writer = _writer_by_id(int.from_bytes(data[1:_ID_HEADER], "big"))
    except DecodeError:
        return 0
    return _ID_HEADER if writer is _registry().current.get(name) else 0


def _writer_by_id(schema_id: int) -> _Schema:
    writer = _BY_ID.get(schema_id)
    if writer is not None:
        return writer
    why = _REFUSED_IDS.get(schema_id)
    if why is None:
        lookup = _LOOKUP[0]
        if lookup is None:
            why = f"a record framed with schema id {schema_id}, and no schema registry is set"
        else:
            text = lookup(schema_id)
            if text is None:
                why = f"the schema registry has no schema with id {schema_id}"
            else:
                learned = _learn(schema_id, text)
                if learned is not None:
                    return learned
                why = f"schema id {schema_id} is not a turnlog value's schema"
        if lookup is not None:
            _REFUSED_IDS[schema_id] = why
    raise DecodeError("unknown_schema_id", why)


def _learn(schema_id: int, text: str) -> _Schema | None:
    """The writer schema of ``schema_id`` from the registry's text: one of this build's
    schemas when the canonical form matches, else (a turnlog type written with a schema this
    build has not seen) read through fastavro and resolved to today's; ``None`` for anything
    that is not a turnlog value's schema."""
    registry = _registry()
    try:
        schema = json.loads(text)
        found = registry.by_fingerprint.get(
            bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
        )
        if found is None and isinstance(schema, dict):
            full = _full_name(str(schema.get("name", "")), schema.get("namespace"))
            short = full.removeprefix(f"{NAMESPACE}.")
            if full.startswith(f"{NAMESPACE}.") and short in registry.current:
                found = _load(short, f"id{schema_id}", Path(f"id-{schema_id}.avsc"), schema, {})
    except Exception:  # noqa: BLE001 -- text from outside: anything unreadable is no schema
        return None
    if found is not None:
        _BY_ID[schema_id] = found
    return found
