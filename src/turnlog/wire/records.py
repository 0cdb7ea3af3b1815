"""The one mapping between turnlog's values and their Avro records.

Schema field names are the dataclass field names, so the mapping is mostly mechanical; what is
written down here are the places where the two shapes differ (nested records, tuples that travel
as arrays, timestamps that travel as milliseconds). Keeping it in one module is what lets a
schema change and its upcast on read be reviewed together.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar

from turnlog.contracts.checkpoint import TURN_STATE_VERSION, TurnCheckpoint
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    AnyEvent,
    AskUserAnswered,
    ContinuationRequested,
    PauseExpired,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.errors import DecodeError

WireValue = TurnCheckpoint | AnyEvent
"""Everything that travels as a top-level single-object-encoded record."""

#: Schema name (the ``.avsc`` file stem and the record's short name) of every top-level value.
WIRE_TYPES: Mapping[str, type[WireValue]] = {
    cls.__name__: cls
    for cls in (
        TurnCheckpoint,
        PauseRecorded,
        AnswerSubmitted,
        TokenConsumed,
        AnswerRejected,
        PauseExpired,
        TurnResumed,
        ContinuationRequested,
    )
}

_V = TypeVar("_V")


def record_name(value: object) -> str:
    """The schema name a value is written with; ``TypeError`` for anything that is not one."""
    name = type(value).__name__
    if WIRE_TYPES.get(name) is not type(value):
        raise TypeError(
            f"turnlog writes only {sorted(WIRE_TYPES)} to the wire, not {type(value).__qualname__}"
        )
    return name


def to_record(value: WireValue) -> dict[str, Any]:
    """The Avro record of a value: plain dicts, lists, strings, numbers and aware datetimes.

    The messages of a checkpoint or a resumed turn are shared with the value, not copied: the
    value's constructor already made each one the canonical plain dict the schema describes.
    """
    return _record_of(value, type(value).__name__)


def _record_of(value: Any, where: str) -> dict[str, Any]:
    record = {}
    for name, convert in _plan(type(value)):
        item = getattr(value, name)
        record[name] = item if convert is None else convert(item, where, name)
    return record


_Convert = Callable[[Any, str, str], Any]


_Plan = tuple[tuple[str, _Convert | None], ...]
_PLANS: dict[type[Any], _Plan] = {}


def _plan(cls: type[Any]) -> _Plan:
    """Per field of ``cls``, how its value becomes record data (``None``: as it is). Worked out
    once per class from the declared types, so writing a value walks no type checks."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = _PLANS[cls] = tuple((f.name, _converter(hints[f.name])) for f in fields(cls))
    return plan


_SCALARS = (str, int, float, bool, type(None))
_NESTED_VALUES = (TurnCheckpoint, AskUserAnswered)


def _converter(hint: Any) -> _Convert | None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    union = origin in (typing.Union, types.UnionType)
    if hint is datetime:
        return _timestamp_field
    if hint in _SCALARS or (union and all(a in _SCALARS for a in args)):
        return None
    sequence = origin is tuple and args[1:] == (Ellipsis,)
    if sequence and (args[0] in _SCALARS or typing.get_origin(args[0]) is Mapping):
        return _list_field  # strings, or canonical message dicts (see to_record)
    if hint in _NESTED_VALUES or (union and any(a in _NESTED_VALUES for a in args)):
        return _nested_field
    return _plain_field


def _timestamp_field(value: Any, where: str, name: str) -> Any:
    return _wire_timestamp(value, f"{where}.{name}") if isinstance(value, datetime) else value


def _list_field(value: Any, where: str, name: str) -> Any:
    return list(value) if isinstance(value, tuple | list) else value


def _nested_field(value: Any, where: str, name: str) -> Any:
    if isinstance(value, _NESTED_VALUES):
        return _record_of(value, f"{where}.{name}")
    return value


def _plain_field(value: Any, where: str, name: str) -> Any:
    return _plain(value, f"{where}.{name}")


def _plain(value: Any, where: str) -> Any:
    if isinstance(value, datetime):
        return _wire_timestamp(value, where)
    if isinstance(value, TurnCheckpoint | AskUserAnswered):
        return _record_of(value, where)
    if isinstance(value, tuple | list):
        return [_plain(item, where) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item, f"{where}.{key}") for key, item in value.items()}
    return value


def _wire_timestamp(moment: datetime, where: str) -> datetime:
    # Refused rather than rounded: a value that silently changes on the way through the log
    # is one whose decoded copy no longer equals what was acted on.
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{where} must be timezone-aware (UTC), got a naive datetime")
    if moment.microsecond % 1000:
        raise ValueError(
            f"{where} carries microseconds ({moment.isoformat()}) but the wire keeps milliseconds; "
            "make it with turnlog.clock.utc_now() or pass it through turnlog.clock.truncate_ms()"
        )
    return moment


def from_record(name: str, record: Mapping[str, Any]) -> WireValue:
    """The value of a record read with the current schema ``name``.

    Raises :class:`~turnlog.errors.DecodeError` (``unsupported_version``) for a checkpoint whose
    turn-state version this build does not know; any other failure is the caller's to wrap.
    """
    return _build(WIRE_TYPES[name], record)


def _build(cls: type[_V], record: Mapping[str, Any]) -> _V:
    if cls in _FLAT:  # nothing nested, no arrays: every field is the record's value as read
        return cls(**{name: record[name] for name in _FIELD_NAMES[cls]})
    nested = _NESTED.get(cls, {})
    kwargs: dict[str, Any] = {}
    for name in _field_names(cls):
        raw = record[name]
        if name in nested:
            kwargs[name] = None if raw is None else nested[name](raw)
        elif type(raw) is list:
            kwargs[name] = tuple(raw)
        else:
            kwargs[name] = raw
    if cls is TurnCheckpoint and kwargs["version"] != TURN_STATE_VERSION:
        raise DecodeError(
            "unsupported_version",
            f"turn-state version {kwargs['version']!r} is not {TURN_STATE_VERSION}, the one this "
            "build reads; continuing from fields it cannot interpret could answer into the wrong "
            "turn",
        )
    if cls in _CANONICAL_ON_READ:
        return _assemble(cls, kwargs)
    return cls(**kwargs)


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        found = fields(cls)
        names = _FIELD_NAMES[cls] = tuple(f.name for f in found)
        # Flat: no nested record and no array (the only field types _build converts).
        nested = cls in _NESTED or cls in _CANONICAL_ON_READ
        if not nested and not any("tuple" in str(f.type) for f in found):
            _FLAT.add(cls)
    return names


#: Classes whose values are built straight from the record (filled by _field_names).
_FLAT: set[type[Any]] = set()


#: Classes whose ``__post_init__`` only brings messages into canonical form (and insists on an
#: aware ``created_at``). A record read with its schema is already in that form -- every message
#: key present, the role an enum symbol, tool calls as id/name/arguments text, timestamps aware
#: UTC -- so a decoded value is assembled without it: re-normalising a 20-message checkpoint was
#: most of the cost of decoding one.
_CANONICAL_ON_READ: frozenset[type[Any]] = frozenset({TurnCheckpoint, TurnResumed})


def _assemble(cls: type[_V], values: Mapping[str, Any]) -> _V:
    value = object.__new__(cls)
    for name, item in values.items():
        object.__setattr__(value, name, item)  # frozen dataclasses are set this way too
    return value


def _checkpoint(record: Mapping[str, Any]) -> TurnCheckpoint:
    return _build(TurnCheckpoint, record)


def _ask_user(record: Mapping[str, Any]) -> AskUserAnswered:
    return _build(AskUserAnswered, record)


#: Fields holding a nested record, per class; every other array becomes a tuple.
_NESTED: dict[type[Any], dict[str, Callable[[Mapping[str, Any]], Any]]] = {
    PauseRecorded: {"checkpoint": _checkpoint},
    TurnResumed: {"answered": _ask_user},
}
