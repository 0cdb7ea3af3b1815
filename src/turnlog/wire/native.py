"""The compiled reader in C, where this build has it, and the program it runs.

Why: reading Avro bodies is most of a replay's Python and a large part of a resume's (a
20-message pause holds about 85 strings). ``_native.c`` walks the same bytes in C and builds
exactly the values the generated reader of :mod:`turnlog.wire.compiled` builds.

How it is used: :class:`~turnlog.wire.compiled.CompiledSchema` asks :func:`read` first, and reads
with its generated Python whenever the answer is ``None``: always for bad bytes (the C walk
never words a refusal; the Python reader raises it with its reason and detail), and for
everything when the module is not there. So the extension changes how fast a body is read,
never what is read or refused; ``tests/unit/test_native.py`` holds the two readers to the same
values and positions on valid, random and mutated bytes.

When it is not used:

- the build had no C compiler (the wheel's build hook then leaves the module out, and the
  package stays pure Python);
- ``TURNLOG_PURE_PYTHON=1`` is set (for comparing the two, and for the pure-Python test run);
- the module was built from another version of ``_native.c`` than the one beside it -- an
  editable checkout whose C source changed since ``make install``. It is then ignored, with a
  warning, rather than trusted to match the Python reader of today's source.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["AVAILABLE", "UNAVAILABLE_BECAUSE", "compile_program", "program_of", "read"]

OP_STRING, OP_LONG, OP_INT, OP_BOOLEAN, OP_ENUM, OP_UNION = 0, 1, 2, 3, 4, 5
OP_ARRAY, OP_RECORD, OP_MILLIS, OP_DOUBLE, OP_RAW, OP_BYTES = 6, 7, 8, 9, 10, 11

_SOURCE = Path(__file__).with_name("_native.c")


def _load(source: Path = _SOURCE) -> tuple[Any, str]:
    """The C module and ``""``, or ``None`` and why it is not used."""
    if os.environ.get("TURNLOG_PURE_PYTHON", "") not in ("", "0"):
        return None, "TURNLOG_PURE_PYTHON is set"
    try:
        from turnlog.wire import _native  # type: ignore[attr-defined]
    except ImportError:
        return None, "the C extension was not built (no compiler when this package was built)"
    # A source checkout: the build must be of this very file.
    built_from = _native.SOURCE_SHA256
    if source.is_file() and hashlib.sha256(source.read_bytes()).hexdigest() != built_from:
        warnings.warn(
            "turnlog.wire._native was built from another _native.c than the one in this "
            "checkout; reading with pure Python until it is rebuilt (make install)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None, "the C extension is stale (built from another _native.c)"
    return _native, ""


_MODULE, UNAVAILABLE_BECAUSE = _load()
#: Whether bodies are read in C (else :data:`UNAVAILABLE_BECAUSE` says why not).
AVAILABLE = _MODULE is not None


def _without_module(program: Any, data: bytes, start: int) -> tuple[Any, int] | None:
    return None


#: ``read(program, data, start)``: ``(value, end)`` as the generated reader returns them, or
#: ``None`` where the bytes do not read (or are not ``bytes``) -- read them with the generated
#: reader, which words why. The C function itself, called straight from the hot path.
read: Callable[[Any, bytes, int], tuple[Any, int] | None] = (
    _MODULE.read if _MODULE is not None else _without_module
)


class _Unsupported(Exception):
    pass


def program_of(expanded: dict[str, Any], raw: frozenset[str] = frozenset()) -> tuple[Any, ...]:
    """The program tree of a self-contained record schema, the arrays named in ``raw``
    (``"dev.turnlog.Record.field"``) read as ``(items, count, starts, at)``. Raises
    ``ValueError`` for a schema the C reader does not cover (the same set the compiler covers,
    less recursive types)."""
    types: dict[str, Any] = {}
    open_records: list[str] = []

    def resolve(schema: Any) -> Any:
        if isinstance(schema, str) and schema in types:
            return types[schema]
        if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed", "error"):
            types.setdefault(schema["name"], schema)
        return schema

    def node(schema: Any) -> tuple[Any, ...]:
        schema = resolve(schema)
        kind = schema.get("type") if isinstance(schema, dict) else schema
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        if isinstance(kind, list):
            if len(kind) != 2 or kind[0] != "null":
                raise _Unsupported(f"union {kind!r}")
            return (OP_UNION, node(kind[1]))
        if kind == "long" and logical == "timestamp-millis":
            return (OP_MILLIS,)
        simple = {
            "string": OP_STRING,
            "bytes": OP_BYTES,
            "long": OP_LONG,
            "int": OP_INT,
            "boolean": OP_BOOLEAN,
            "double": OP_DOUBLE,
        }
        if kind in simple:
            return (simple[kind],)
        if kind == "enum":
            return (OP_ENUM, tuple(schema["symbols"]))
        if kind == "array":
            return (OP_ARRAY, node(schema["items"]))
        if kind in ("record", "error"):
            name = schema["name"]
            if name in open_records:
                raise _Unsupported(f"the recursive type {name}")
            types[name] = schema
            open_records.append(name)
            names, fields = [], []
            for field in schema["fields"]:
                names.append(field["name"])
                if f"{name}.{field['name']}" in raw:
                    items = resolve(field["type"])
                    if not isinstance(items, dict) or items.get("type") != "array":
                        raise _Unsupported(f"raw reading of {items!r}")
                    fields.append((OP_RAW, node(items["items"])))
                else:
                    fields.append(node(field["type"]))
            open_records.pop()
            return (OP_RECORD, tuple(names), tuple(fields))
        raise _Unsupported(f"Avro type {kind!r}")

    try:
        return node(expanded)
    except _Unsupported as exc:
        raise ValueError(f"the C reader does not cover {exc}") from None


def compile_program(expanded: dict[str, Any], raw: frozenset[str] = frozenset()) -> Any | None:
    """The C program reading ``expanded``, or ``None`` when there is no C reader or the schema
    has something it does not cover (the generated reader then reads it alone)."""
    if _MODULE is None:
        return None
    try:
        return _MODULE.compile(program_of(expanded, raw))
    except ValueError:
        return None
