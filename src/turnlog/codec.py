"""Values to bytes and back: Avro single-object encoding over the schemas in ``schemas/``.

A record on a topic is ``C3 01``, the 8-byte CRC-64-AVRO fingerprint of the writer schema's
Parsing Canonical Form (little-endian, as the Avro specification puts it), then the Avro binary
body. The fingerprint is what lets any Avro library -- not only this one -- find the schema a
record was written with, and what lets this build read records written by an earlier one: the
earlier schema versions kept under ``schemas/history/`` are looked up by fingerprint and resolved
to today's schema. A fingerprint that matches nothing is refused by name, never guessed.

Decoding never lets a library exception escape: bytes on a topic come from outside, and a bad
record must become a named refusal the consumer can log and skip, not a crash.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, overload

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import Event
from turnlog.errors import ConfigurationError, DecodeError
from turnlog.records import WIRE_TYPES, WireValue, from_record, record_name, to_record

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
    write: _Write | None  # compiled from ``expanded``; None: fastavro writes it
    read: _Read | None


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
    source = Path(__file__).resolve().parents[2] / "schemas"
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
    compiled = _compile(expanded) if label == "current" else None
    return _Schema(
        name=name,
        label=label,
        path=path,
        expanded=expanded,
        parsed=parsed,
        fingerprint=bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO")),
        write=compiled[0] if compiled else None,
        read=compiled[1] if compiled else None,
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


# --- the compiled binary codec ----------------------------------------------------------------
#
# fastavro interprets the schema for every value it writes or reads, and on a 20-message
# checkpoint that interpretation, not the bytes, is most of the cost. Each current schema is
# therefore compiled once into two straight-line Python functions per record type, with the
# primitives inlined. They cover exactly the Avro this build's schemas use -- records, enums,
# arrays, strings, longs, ints, booleans, doubles, timestamp-millis and ``["null", T]`` unions --
# and write the bytes fastavro writes (the golden files hold both to that). A schema using
# anything else, and every read through schema resolution (an earlier writer schema), keeps
# going through fastavro.

_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MILLI = timedelta(milliseconds=1)
_DOUBLE = struct.Struct("<d")
_INT64 = 1 << 63
_INT32 = 1 << 31


class _Unsupported(Exception):
    """A schema construct the compiler leaves to fastavro."""


class _Truncated(Exception):
    """The body ended before the value did."""


class _Malformed(Exception):
    """Bytes no writer of this schema could have produced."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: Zig-zag varints of 0..4095: the lengths and counts almost every value has.
_SMALL = tuple(_varint(n << 1) for n in range(4096))


def _long(value: Any) -> bytes:
    if type(value) is not int:
        raise TypeError(f"expected an int, got {type(value).__name__}")
    if 0 <= value < 4096:
        return _SMALL[value]
    if not -_INT64 <= value < _INT64:
        raise ValueError(f"{value} is outside Avro's long range")
    return _varint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _int(value: Any) -> bytes:
    if type(value) is int and not -_INT32 <= value < _INT32:
        raise ValueError(f"{value} is outside Avro's int range")
    return _long(value)


def _millis(value: Any) -> bytes:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    return _long((value - _EPOCH_UTC) // _MILLI)


def _boolean(value: Any) -> bytes:
    if value is True:
        return b"\x01"
    if value is False:
        return b"\x00"
    raise TypeError(f"expected a bool, got {type(value).__name__}")


def _double(value: Any) -> bytes:
    if type(value) is not float and type(value) is not int:
        raise TypeError(f"expected a float, got {type(value).__name__}")
    return _DOUBLE.pack(value)


def _read_unsigned(data: bytes, p: int) -> tuple[int, int]:
    """The unsigned varint at ``p`` (at most ten bytes, below 2**64) and the position after it."""
    b = data[p]
    p += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift > 63:
            raise _Malformed("a varint longer than ten bytes")
        b = data[p]
        p += 1
        n |= (b & 0x7F) << shift
        shift += 7
    if n >> 64:
        raise _Malformed("a varint beyond 64 bits")
    return n, p


def _read_millis(n: int) -> datetime:
    try:
        return _EPOCH_UTC + timedelta(milliseconds=n)
    except OverflowError:
        raise _Malformed(f"timestamp {n} ms is outside the datetime range") from None


def _read_double(data: bytes, p: int) -> float:
    if p + 8 > len(data):
        raise _Truncated
    value: float = _DOUBLE.unpack_from(data, p)[0]
    return value


_Write = Callable[[Any, Callable[[bytes], None]], None]
_Read = Callable[[bytes, int, int], tuple[Any, int]]

_HELPERS = {
    "_long": _long,
    "_int": _int,
    "_millis": _millis,
    "_boolean": _boolean,
    "_double": _double,
    "_read_unsigned": _read_unsigned,
    "_read_millis": _read_millis,
    "_read_double": _read_double,
    "_Truncated": _Truncated,
    "_Malformed": _Malformed,
    "_SMALL": _SMALL,
}


class _Compiler:
    """Generates ``w_<n>(datum, ap)`` and ``r_<n>(data, p, end)`` for each record type."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}  # full record name -> function number
        self.types: dict[str, dict[str, Any]] = {}  # named types seen, by full name
        self.source: list[str] = []
        self.constants: dict[str, Any] = dict(_HELPERS)
        self._temp = 0
        self._inlining: list[str] = []  # the records whose reading is being generated

    def compile(self, schema: dict[str, Any]) -> tuple[_Write, _Read]:
        number = self._record(schema)
        namespace: dict[str, Any] = dict(self.constants)
        # Our own source, generated from our own schema files; the label names it in tracebacks.
        code = compile("\n".join(self.source), f"<turnlog codec {schema['name']}>", "exec")
        exec(code, namespace)
        return namespace[f"w_{number}"], namespace[f"r_{number}"]

    def _tmp(self, stem: str) -> str:
        self._temp += 1
        return f"{stem}{self._temp}"

    def _resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema in self.types:
            return self.types[schema]
        if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed", "error"):
            self.types.setdefault(schema["name"], schema)
        return schema

    def _record(self, schema: dict[str, Any]) -> int:
        name = schema["name"]
        if name in self.names:
            return self.names[name]
        number = self.names[name] = len(self.names)
        self.types[name] = schema
        write = [f"def w_{number}(d, ap):", *self._write_fields(schema, "d", 1)]
        target = self._tmp("record")
        read = [f"def r_{number}(d, p, end):", *self._read_fields(schema, target, 1)]
        read.append(f"    return {target}, p")
        self.source += write + read
        return number

    def _write_fields(self, schema: dict[str, Any], expr: str, depth: int) -> list[str]:
        """A record's fields written in line. Exactly its fields, as fastavro's strict mode."""
        pad = "    " * depth
        fields = schema["fields"]
        record = self._tmp("r")
        lines = [
            f"{pad}{record} = {expr}",
            f"{pad}if len({record}) != {len(fields)}:",
            f"{pad}    raise ValueError('a {schema['name']} record has {len(fields)} fields')",
        ]
        self._inlining.append(schema["name"])
        for field in fields:
            lines += self._write(field["type"], f"{record}[{field['name']!r}]", depth)
        self._inlining.pop()
        return lines

    def _read_fields(self, schema: dict[str, Any], target: str, depth: int) -> list[str]:
        """A record's fields read in line into locals, then the dict built in one go."""
        pad = "    " * depth
        self._inlining.append(schema["name"])
        lines: list[str] = []
        pairs = []
        for field in schema["fields"]:
            value = self._tmp("f")
            pairs.append(f"{field['name']!r}: {value}")
            lines += self._read(field["type"], value, depth)
        self._inlining.pop()
        lines.append(f"{pad}{target} = {{{', '.join(pairs)}}}")
        return lines

    # -- writing ----------------------------------------------------------------------------

    def _write(self, schema: Any, expr: str, depth: int) -> list[str]:
        pad = "    " * depth
        schema = self._resolve(schema)
        kind = schema.get("type") if isinstance(schema, dict) else schema
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        if isinstance(kind, list):
            return self._write_union(kind, expr, depth)
        if logical == "timestamp-millis" and kind == "long":
            return [f"{pad}ap(_millis({expr}))"]
        if kind == "string":
            b = self._tmp("b")
            n = self._tmp("n")
            return [
                f"{pad}{b} = {expr}.encode()",
                f"{pad}{n} = len({b})",
                f"{pad}ap(_SMALL[{n}] if {n} < 4096 else _long({n}))",
                f"{pad}ap({b})",
            ]
        if kind in ("long", "int", "boolean", "double"):
            return [f"{pad}ap(_{kind}({expr}))"]
        if kind == "enum":
            table = self._tmp("E")
            self.constants[table] = {s: _SMALL[i] for i, s in enumerate(schema["symbols"])}
            return [f"{pad}ap({table}[{expr}])"]
        if kind == "array":
            items, item = self._tmp("items"), self._tmp("item")
            return [
                f"{pad}{items} = {expr}",
                f"{pad}if type({items}) is not list and type({items}) is not tuple:",
                f"{pad}    raise TypeError('an array must be a list or a tuple')",
                f"{pad}if {items}:",
                f"{pad}    ap(_long(len({items})))",
                f"{pad}    for {item} in {items}:",
                *self._write(schema["items"], item, depth + 2),
                f"{pad}ap(b'\\x00')",
            ]
        if kind in ("record", "error"):
            if schema["name"] in self._inlining:  # a recursive type: through its function
                return [f"{pad}w_{self._record(schema)}({expr}, ap)"]
            return self._write_fields(schema, expr, depth)
        raise _Unsupported(f"Avro type {kind!r}")

    def _write_union(self, branches: list[Any], expr: str, depth: int) -> list[str]:
        if len(branches) != 2 or branches[0] != "null":
            raise _Unsupported(f"union {branches!r}")
        pad = "    " * depth
        value = self._tmp("u")
        return [
            f"{pad}{value} = {expr}",
            f"{pad}if {value} is None:",
            f"{pad}    ap(b'\\x00')",
            f"{pad}else:",
            f"{pad}    ap(b'\\x02')",
            *self._write(branches[1], value, depth + 1),
        ]

    # -- reading ----------------------------------------------------------------------------

    def _read_varint(self, target: str, depth: int) -> list[str]:
        """A zig-zag long into ``target``; one byte is the common case and is read inline."""
        pad = "    " * depth
        return [
            f"{pad}{target} = d[p]",
            f"{pad}if {target} < 128:",
            f"{pad}    p += 1",
            f"{pad}else:",
            f"{pad}    {target}, p = _read_unsigned(d, p)",
            f"{pad}{target} = ({target} >> 1) ^ -({target} & 1)",
        ]

    def _read_string(self, target: str, depth: int) -> list[str]:
        """Lengths up to 8191 (one or two varint bytes) are read inline."""
        pad = "    " * depth
        n, high = self._tmp("n"), self._tmp("h")
        return [
            f"{pad}{n} = d[p]",
            f"{pad}if {n} < 128:",
            f"{pad}    p += 1",
            f"{pad}elif ({high} := d[p + 1]) < 128:",
            f"{pad}    {n} = ({n} & 127) | ({high} << 7)",
            f"{pad}    p += 2",
            f"{pad}else:",
            f"{pad}    {n}, p = _read_unsigned(d, p)",
            f"{pad}if {n} & 1:",
            f"{pad}    raise _Malformed('a negative length')",
            f"{pad}{n} = p + ({n} >> 1)",
            f"{pad}if {n} > end:",
            f"{pad}    raise _Truncated",
            f"{pad}{target} = d[p:{n}].decode()",
            f"{pad}p = {n}",
        ]

    def _read(self, schema: Any, target: str, depth: int) -> list[str]:
        pad = "    " * depth
        schema = self._resolve(schema)
        kind = schema.get("type") if isinstance(schema, dict) else schema
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        if isinstance(kind, list):
            return self._read_union(kind, target, depth)
        if kind == "string":
            return self._read_string(target, depth)
        if kind == "long" and logical == "timestamp-millis":
            return [*self._read_varint(target, depth), f"{pad}{target} = _read_millis({target})"]
        if kind == "long":
            return self._read_varint(target, depth)
        if kind == "int":
            return [
                *self._read_varint(target, depth),
                f"{pad}if not {-_INT32} <= {target} < {_INT32}:",
                f"{pad}    raise _Malformed('an int outside the 32-bit range')",
            ]
        if kind == "boolean":
            return [
                f"{pad}{target} = d[p]",
                f"{pad}p += 1",
                f"{pad}if {target} > 1:",
                f"{pad}    raise _Malformed('a boolean byte other than 0 or 1')",
                f"{pad}{target} = {target} == 1",
            ]
        if kind == "double":
            return [f"{pad}{target} = _read_double(d, p)", f"{pad}p += 8"]
        if kind == "enum":
            symbols = self._tmp("S")
            self.constants[symbols] = tuple(schema["symbols"])
            return [
                *self._read_varint(target, depth),
                f"{pad}if not 0 <= {target} < {len(schema['symbols'])}:",
                f"{pad}    raise _Malformed('an enum index with no symbol')",
                f"{pad}{target} = {symbols}[{target}]",
            ]
        if kind == "array":
            count, item = self._tmp("count"), self._tmp("x")
            return [
                f"{pad}{target} = []",
                f"{pad}if d[p] == 0:",  # empty: the common case of tool_calls
                f"{pad}    p += 1",
                f"{pad}else:",
                *self._read_array_blocks(schema, target, count, item, depth + 1),
            ]
        if kind in ("record", "error"):
            if schema["name"] in self._inlining:  # a recursive type: through its function
                return [f"{pad}{target}, p = r_{self._record(schema)}(d, p, end)"]
            return self._read_fields(schema, target, depth)
        raise _Unsupported(f"Avro type {kind!r}")

    def _read_array_blocks(
        self, schema: dict[str, Any], target: str, count: str, item: str, depth: int
    ) -> list[str]:
        pad = "    " * depth
        return [
            f"{pad}while True:",
            *self._read_varint(count, depth + 1),
            f"{pad}    if {count} == 0:",
            f"{pad}        break",
            f"{pad}    if {count} < 0:",  # a block that states its size in bytes
            f"{pad}        {count} = -{count}",
            *self._read_varint(self._tmp("size"), depth + 2),
            f"{pad}    if {count} > end - p:",  # every item here takes at least one byte
            f"{pad}        raise _Truncated",
            f"{pad}    for _ in range({count}):",
            *self._read(schema["items"], item, depth + 2),
            f"{pad}        {target}.append({item})",
        ]

    def _read_union(self, branches: list[Any], target: str, depth: int) -> list[str]:
        if len(branches) != 2 or branches[0] != "null":
            raise _Unsupported(f"union {branches!r}")
        pad = "    " * depth
        index = self._tmp("i")
        return [
            f"{pad}{index} = d[p]",
            f"{pad}p += 1",
            f"{pad}if {index} == 0:",
            f"{pad}    {target} = None",
            f"{pad}elif {index} == 2:",
            *self._read(branches[1], target, depth + 1),
            f"{pad}else:",
            f"{pad}    raise _Malformed('a union branch this schema does not have')",
        ]


def _compile(expanded: dict[str, Any]) -> tuple[_Write, _Read] | None:
    """The compiled writer and reader of a self-contained record schema; ``None`` when it uses
    something only fastavro handles."""
    if expanded.get("type") not in ("record", "error"):
        return None  # Role: never a value on its own
    try:
        return _Compiler().compile(expanded)
    except _Unsupported:
        return None


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
        if entry.write is not None:
            parts = [MAGIC, entry.fingerprint]
            entry.write(record, parts.append)
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
    if reader is writer and writer.read is not None:
        record, end = _read_compiled(writer, data)
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


def _read_compiled(writer: _Schema, data: bytes) -> tuple[dict[str, Any], int]:
    read = writer.read
    if read is None:  # the caller checked; kept for the type checker
        raise DecodeError("malformed_body", f"{writer.name} has no compiled reader")
    try:
        return read(data, _HEADER, len(data))
    except (_Truncated, IndexError) as exc:  # every index past the end is a short body
        raise DecodeError("truncated_body", f"{writer.name} body ends early") from exc
    except Exception as exc:
        raise DecodeError(
            "malformed_body", f"{writer.name} body is not valid Avro: {type(exc).__name__}: {exc}"
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
