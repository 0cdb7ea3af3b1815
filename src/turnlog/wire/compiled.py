"""The current schemas compiled to straight-line Python: the fast path of :mod:`turnlog.wire.codec`.

Why it exists: fastavro interprets the schema for every value it writes or reads, and on a
20-message checkpoint that interpretation, not the bytes, is most of the cost. Compiling each
current schema once into two straight-line functions per record type, with the primitives
inlined, made the codec round trip several times faster (``python -m bench -s codec``; the
figures are in ``bench/README.md``).

What holds it to fastavro: the compiled writer must produce exactly the bytes
``fastavro.schemaless_writer`` produces for the same record, and the compiled reader must return
the record ``fastavro.schemaless_reader`` returns for those bytes. The golden files
(``tests/unit/test_codec_golden.py``) and the property tests (``tests/unit/test_codec_compiled.py``)
check both. The compiler covers exactly the Avro this build's schemas use -- records, enums,
arrays, strings, longs, ints, booleans, doubles, timestamp-millis and ``["null", T]`` unions;
:func:`compile_schema` returns ``None`` for a schema using anything else, and that schema, like
every read through schema resolution (an earlier writer schema), keeps going through fastavro.

It is one module, over the usual length, because the writer, reader and skipping generators
mirror each other type by type: apart, a change to one side would be easy to miss on the other.
The skipping reader (:func:`compile_skim`) serves :mod:`turnlog.wire.skim`: arrays kept as their
bytes, walked with the same checks as the reader.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from turnlog.errors import DecodeError
from turnlog.wire.native import compile_program
from turnlog.wire.native import read as _native_read

__all__ = ["CompiledSchema", "Read", "Write", "compile_schema", "compile_skim"]

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
#: A one-byte string length's value, or -1 for a byte that is not one (odd: negative; or the
#: first of several).
_HALF = tuple(-1 if n & 1 or n > 127 else n >> 1 for n in range(256))
#: A one-byte string length read as a step over the string: the byte plus the length, or for a
#: negative length (an odd zig-zag value) a step far past any end, so the next read refuses it;
#: 0 for the first byte of a longer length.
_STEP = tuple(0 if n > 127 else 1 << 62 if n & 1 else (n >> 1) + 1 for n in range(256))


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
    """The unsigned varint at ``p`` (at most ten bytes, below 2**64) and the position after it.

    Unrolled to six bytes, which covers every timestamp in milliseconds until the year 2109;
    longer ones continue in :func:`_read_unsigned_rest`.
    """
    b = data[p]
    if b < 128:
        return b, p + 1
    n = b & 127
    b = data[p + 1]
    if b < 128:
        return n | b << 7, p + 2
    n |= (b & 127) << 7
    b = data[p + 2]
    if b < 128:
        return n | b << 14, p + 3
    n |= (b & 127) << 14
    b = data[p + 3]
    if b < 128:
        return n | b << 21, p + 4
    n |= (b & 127) << 21
    b = data[p + 4]
    if b < 128:
        return n | b << 28, p + 5
    n |= (b & 127) << 28
    b = data[p + 5]
    if b < 128:
        return n | b << 35, p + 6
    return _read_unsigned_rest(data, p + 6, n | (b & 127) << 35, 42)


def _read_unsigned_rest(data: bytes, p: int, n: int, shift: int) -> tuple[int, int]:
    """The bytes of a varint from the seventh on (``shift``: the bits already read)."""
    while True:
        if shift > 63:
            raise _Malformed("a varint longer than ten bytes")
        b = data[p]
        p += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 128:
            break
    if n >> 64:
        raise _Malformed("a varint beyond 64 bits")
    return n, p


def _read_millis(n: int) -> datetime:
    try:
        return _EPOCH_UTC + timedelta(0, 0, 0, n)  # milliseconds, positionally: faster
    except OverflowError:
        raise _Malformed(f"timestamp {n} ms is outside the datetime range") from None


def _read_double(data: bytes, p: int) -> float:
    if p + 8 > len(data):
        raise _Truncated
    value: float = _DOUBLE.unpack_from(data, p)[0]
    return value


#: ``write(record, append)``: the record's body, in pieces, to ``append``.
Write = Callable[[Any, Callable[[bytes], None]], None]
#: ``read(data, start, end)``: the record at ``start`` and the position after it; raises
#: ``_Truncated``, ``_Malformed`` or whatever a bad body trips over (see :class:`CompiledSchema`).
Read = Callable[[bytes, int, int], tuple[Any, int]]

_HELPERS = {
    "_long": _long,
    "_int": _int,
    "_millis": _millis,
    "_boolean": _boolean,
    "_double": _double,
    "_read_unsigned": _read_unsigned,
    "_read_millis": _read_millis,
    "_EPOCH_UTC": _EPOCH_UTC,
    "_timedelta": timedelta,
    "_read_double": _read_double,
    "_Truncated": _Truncated,
    "_Malformed": _Malformed,
    "_SMALL": _SMALL,
    "_HALF": _HALF,
}


class _Compiler:
    """Generates ``w_<n>(datum, ap)`` and ``r_<n>(data, p, end)`` for each record type."""

    def __init__(self, raw: frozenset[str] = frozenset()) -> None:
        self.names: dict[str, int] = {}  # full record name -> function number
        self.types: dict[str, dict[str, Any]] = {}  # named types seen, by full name
        self.source: list[str] = []
        self.constants: dict[str, Any] = dict(_HELPERS)
        self._temp = 0
        self._inlining: list[str] = []  # the records whose reading is being generated
        self._raw = raw  # "Record.field" arrays read as (item bytes, count), see _read_raw_array
        self._high: str | None = None  # while skipping: the local counting varints' high bytes

    def compile(self, schema: dict[str, Any]) -> tuple[Write, Read]:
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
            if f"{schema['name']}.{field['name']}" in self._raw:
                lines += self._read_raw_array(self._resolve(field["type"]), value, depth)
            else:
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
        if kind == "bytes":
            b = self._tmp("b")
            return [
                f"{pad}{b} = {expr}",
                f"{pad}if type({b}) is not bytes:",
                f"{pad}    raise TypeError('a bytes field must be bytes')",
                f"{pad}ap(_long(len({b})))",
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
            *self._read_long_varint(target, depth + 1),
            f"{pad}{target} = ({target} >> 1) ^ -({target} & 1)",
        ]

    def _read_long_varint(self, target: str, depth: int) -> list[str]:
        """A varint of two bytes or more; while skipping, its high bytes (all but the last) are
        counted."""
        pad = "    " * depth
        if self._high is None:
            return [f"{pad}{target}, p = _read_unsigned(d, p)"]
        start = self._tmp("q")
        return [
            f"{pad}{start} = p",
            f"{pad}{target}, p = _read_unsigned(d, p)",
            f"{pad}{self._high} += p - {start} - 1",
        ]

    def _read_string(self, target: str, depth: int, *, raw: bool = False) -> list[str]:
        """A one-byte length (under 64 bytes) is one table lookup; up to 8191 (two varint bytes)
        is read inline. ``raw``: Avro ``bytes``, the same layout left undecoded."""
        pad = "    " * depth
        n, high = self._tmp("n"), self._tmp("h")
        return [
            f"{pad}{n} = _HALF[d[p]]",
            f"{pad}if {n} >= 0:",
            f"{pad}    p += 1",
            f"{pad}else:",
            f"{pad}    {n} = d[p]",
            f"{pad}    if {n} > 127 and ({high} := d[p + 1]) < 128:",
            f"{pad}        {n} = ({n} & 127) | ({high} << 7)",
            f"{pad}        p += 2",
            f"{pad}    else:",
            f"{pad}        {n}, p = _read_unsigned(d, p)",
            f"{pad}    if {n} & 1:",
            f"{pad}        raise _Malformed('a negative length')",
            f"{pad}    {n} >>= 1",
            f"{pad}{n} += p",
            f"{pad}if {n} > end:",
            f"{pad}    raise _Truncated",
            f"{pad}{target} = d[p:{n}]" + ("" if raw else ".decode()"),
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
        if kind == "bytes":
            return self._read_string(target, depth, raw=True)
        if kind == "long" and logical == "timestamp-millis":
            return [
                *self._read_varint(target, depth),
                f"{pad}try:",
                f"{pad}    {target} = _EPOCH_UTC + _timedelta(0, 0, 0, {target})",
                f"{pad}except OverflowError:",  # outside datetime's range: its named refusal
                f"{pad}    {target} = _read_millis({target})",
            ]
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

    # -- reading an array raw: its items' bytes, validated without building them ---------------

    def _read_raw_array(self, schema: Any, target: str, depth: int) -> list[str]:
        """``(items, count, starts, at)``: the items' bytes exactly as written, without block
        counts and terminator, how many there are, where each item starts in those bytes
        (offsets into the joined blocks), and where the items start in ``d`` when they are one
        run there (one block), else -1; refused exactly where :meth:`_read` would refuse.

        The starts let a reader go straight to any item, the last ones first, without walking
        the items before it again. They cost one append per item, taken where the walk already
        stands: ``shift`` is the length of the blocks before this one minus where this one
        starts, so ``p + shift`` is the item's offset in the joined bytes.

        The walk checks every length, enum index, union branch and bound as the reader does, but
        not each string's UTF-8 on its own: it counts the high bytes (>= 0x80) of the varints it
        reads instead. When the whole array holds no other high byte, every string in it is
        ASCII, hence valid; otherwise the array is read again with the full reader (``a_<n>``),
        which checks each string and raises what the reader raises.
        """
        if not isinstance(schema, dict) or schema.get("type") != "array" or self._high:
            raise _Unsupported(f"raw reading of {schema!r}")
        pad = "    " * depth
        strict = self._tmp("a_")
        items = self._tmp("items")
        self.source += [
            f"def {strict}(d, p, end):",
            *self._read(schema, items, 1),
            "    return p",
        ]
        self.constants.setdefault("_HIGH_BYTES", bytes(range(128, 256)))
        self.constants.setdefault("_STEP", _STEP)
        high, start, first, parts, total, starts, mark, shift = (
            self._tmp(stem)
            for stem in ("hi", "s", "b", "parts", "total", "starts", "mark", "shift")
        )
        count, span = self._tmp("count"), self._tmp("span")
        self._high = high
        try:
            item = self._skip(schema["items"], depth + 3)
            block = [
                f"{pad}    while True:",
                *self._read_varint(count, depth + 2),
                f"{pad}        if {count} == 0:",
                f"{pad}            break",
                f"{pad}        if {count} < 0:",
                f"{pad}            {count} = -{count}",
                *self._read_varint(self._tmp("size"), depth + 3),
                f"{pad}        if {count} > end - p:",
                f"{pad}            raise _Truncated",
                f"{pad}        {total} += {count}",
                f"{pad}        {first} = p",
                f"{pad}        {shift} -= p",
                f"{pad}        for _ in range({count}):",
                f"{pad}            {mark}(p + {shift})",
                *item,
                f"{pad}        {parts}.append(d[{first}:p])",
                f"{pad}        {shift} += p",
            ]
        finally:
            self._high = None
        return [
            f"{pad}if d[p] == 0:",
            f"{pad}    p += 1",
            f"{pad}    {target} = (b'', 0, (), -1)",
            f"{pad}else:",
            f"{pad}    {high} = 0",
            f"{pad}    {total} = 0",
            f"{pad}    {start} = p",
            f"{pad}    {parts} = []",
            f"{pad}    {starts} = []",
            f"{pad}    {mark} = {starts}.append",
            f"{pad}    {shift} = 0",
            *block,
            f"{pad}    {span} = d[{start}:p]",
            f"{pad}    if len({span}) - len({span}.translate(None, _HIGH_BYTES)) != {high}:",
            f"{pad}        {strict}(d, {start}, end)",
            f"{pad}    if len({parts}) == 1:",
            f"{pad}        {target} = ({parts}[0], {total}, tuple({starts}), {first})",
            f"{pad}    else:",
            f"{pad}        {target} = (b''.join({parts}), {total}, tuple({starts}), -1)",
        ]

    def _skip(self, schema: Any, depth: int) -> list[str]:
        """Walks one value as :meth:`_read` does, building nothing (strings: see
        :meth:`_read_raw_array`)."""
        pad = "    " * depth
        schema = self._resolve(schema)
        kind = schema.get("type") if isinstance(schema, dict) else schema
        if isinstance(kind, list):
            if len(kind) != 2 or kind[0] != "null":
                raise _Unsupported(f"union {kind!r}")
            index = self._tmp("i")
            return [
                f"{pad}{index} = d[p]",
                f"{pad}p += 1",
                f"{pad}if {index} == 2:",
                *self._skip(kind[1], depth + 1),
                f"{pad}elif {index} != 0:",
                f"{pad}    raise _Malformed('a union branch this schema does not have')",
            ]
        if kind in ("string", "bytes"):
            # One byte (a string under 64 bytes) is one table step; a bad length steps past the
            # end, which the next read of ``d[p]`` refuses. No bound is checked here: every
            # skipped string is followed by a read, and an overshoot makes it an IndexError.
            n, high = self._tmp("n"), self._tmp("h")
            return [
                f"{pad}{n} = _STEP[d[p]]",
                f"{pad}if {n}:",
                f"{pad}    p += {n}",
                f"{pad}elif ({high} := d[p + 1]) < 128:",  # 64 bytes to 8 KiB: two bytes
                f"{pad}    {self._high} += 1",
                f"{pad}    p += _STEP[d[p] & 127] + ({high} << 6) + 1",
                f"{pad}else:",
                *self._read_long_varint(n, depth + 1),
                f"{pad}    if {n} & 1:",
                f"{pad}        raise _Malformed('a negative length')",
                f"{pad}    p += {n} >> 1",
            ]
        if kind == "enum":
            index, valid = self._tmp("e"), self._tmp("V")
            size = len(schema["symbols"])
            self.constants[valid] = frozenset(i << 1 for i in range(size) if i < 64)
            return [
                f"{pad}{index} = d[p]",
                f"{pad}if {index} in {valid}:",
                f"{pad}    p += 1",
                f"{pad}else:",
                *self._read_long_varint(index, depth + 1),
                f"{pad}    {index} = ({index} >> 1) ^ -({index} & 1)",
                f"{pad}    if not 0 <= {index} < {size}:",
                f"{pad}        raise _Malformed('an enum index with no symbol')",
            ]
        if kind == "array":
            count = self._tmp("count")
            return [
                f"{pad}if d[p] == 0:",
                f"{pad}    p += 1",
                f"{pad}else:",
                f"{pad}    if d[p] == 2:",  # a block of one item, the usual case: in line
                f"{pad}        p += 1",
                *self._skip(schema["items"], depth + 2),
                f"{pad}    while True:",
                *self._read_varint(count, depth + 2),
                f"{pad}        if {count} == 0:",
                f"{pad}            break",
                f"{pad}        if {count} < 0:",
                f"{pad}            {count} = -{count}",
                *self._read_varint(self._tmp("size"), depth + 3),
                f"{pad}        if {count} > end - p:",
                f"{pad}            raise _Truncated",
                f"{pad}        for _ in range({count}):",
                *self._skip(schema["items"], depth + 3),
            ]
        if kind in ("record", "error"):
            if schema["name"] in self._inlining:
                raise _Unsupported(f"raw reading of the recursive type {schema['name']}")
            self._inlining.append(schema["name"])
            lines = [line for f in schema["fields"] for line in self._skip(f["type"], depth)]
            self._inlining.pop()
            return lines or [f"{pad}pass"]
        if kind in ("long", "int", "boolean"):  # their bytes are varints or 0/1: counted right
            return self._read(schema, self._tmp("unused"), depth)
        raise _Unsupported(f"raw reading of Avro type {kind!r}")  # a double's bytes are opaque

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


class CompiledSchema:
    """The compiled writer and reader of one current record schema."""

    __slots__ = ("_native", "_read", "name", "write")

    def __init__(self, name: str, write: Write, read: Read, native: Any = None) -> None:
        self.name = name  # short name, for the refusals
        #: ``write(record, append)``: exactly fastavro's bytes for ``record``, in pieces.
        self.write = write
        self._read = read
        self._native = native  # the same reader in C (turnlog.wire.native), or None

    def read(self, data: bytes, start: int) -> tuple[dict[str, Any], int]:
        """The record whose body starts at ``data[start]``, and the position after it.

        Bytes from outside never raise anything but :class:`DecodeError`: ``truncated_body`` when
        the data ends before the record does, ``malformed_body`` for bytes no writer of this
        schema could have produced.

        The C reader goes first where there is one; whatever it does not read (bad bytes
        included) is read again here, so a refusal is always this reader's.
        """
        if self._native is not None:
            found = _native_read(self._native, data, start)
            if found is not None:
                return found
        try:
            return self._read(data, start, len(data))
        except (_Truncated, IndexError) as exc:  # every index past the end is a short body
            raise DecodeError("truncated_body", f"{self.name} body ends early") from exc
        except Exception as exc:
            raise DecodeError(
                "malformed_body",
                f"{self.name} body is not valid Avro: {type(exc).__name__}: {exc}",
            ) from exc


def compile_skim(expanded: dict[str, Any], raw: frozenset[str]) -> CompiledSchema | None:
    """A reader of ``expanded`` that reads the arrays named in ``raw``
    (``"dev.turnlog.Record.field"``) as ``(items, count, starts, at)`` -- the items' bytes as
    written, without block counts, ready to be written again as one block; how many; the
    offset in those bytes where each item starts; and where they start in the record when
    written as one block (else -1) -- and every other field as
    :func:`compile_schema`'s reader does. It refuses exactly the bytes that reader refuses.
    ``None`` when the schema uses something the walk cannot check without building it."""
    if expanded.get("type") not in ("record", "error"):
        return None
    try:
        write, read = _Compiler(raw).compile(expanded)
    except _Unsupported:
        return None
    native = compile_program(expanded, raw)
    return CompiledSchema(str(expanded["name"]).rpartition(".")[2], write, read, native)


def compile_schema(expanded: dict[str, Any]) -> CompiledSchema | None:
    """The compiled writer and reader of a self-contained (expanded) record schema; ``None`` when
    it is not a record or uses something only fastavro handles."""
    if expanded.get("type") not in ("record", "error"):
        return None  # Role: never a value on its own
    try:
        write, read = _Compiler().compile(expanded)
    except _Unsupported:
        return None
    native = compile_program(expanded)
    return CompiledSchema(str(expanded["name"]).rpartition(".")[2], write, read, native)
