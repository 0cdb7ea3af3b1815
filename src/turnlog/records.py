"""The one mapping between turnlog's values and their Avro records.

Schema field names are the dataclass field names, so the mapping is mostly mechanical; what is
written down here are the places where the two shapes differ (nested records, tuples that travel
as arrays, timestamps that travel as milliseconds). Keeping it in one module is what lets a
schema change and its upcast on read be reviewed together.
"""

from __future__ import annotations

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
    """The Avro record of a value: plain dicts, lists, strings, numbers and aware datetimes."""
    return _record_of(value, type(value).__name__)


def _record_of(value: Any, where: str) -> dict[str, Any]:
    return {f.name: _plain(getattr(value, f.name), f"{where}.{f.name}") for f in fields(value)}


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
    nested = _NESTED.get(cls, {})
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        raw = record[f.name]
        if f.name in nested:
            kwargs[f.name] = None if raw is None else nested[f.name](raw)
        elif isinstance(raw, list):
            kwargs[f.name] = tuple(raw)
        else:
            kwargs[f.name] = raw
    if cls is TurnCheckpoint and kwargs["version"] != TURN_STATE_VERSION:
        raise DecodeError(
            "unsupported_version",
            f"turn-state version {kwargs['version']!r} is not {TURN_STATE_VERSION}, the one this "
            "build reads; continuing from fields it cannot interpret could answer into the wrong "
            "turn",
        )
    return cls(**kwargs)


def _checkpoint(record: Mapping[str, Any]) -> TurnCheckpoint:
    return _build(TurnCheckpoint, record)


def _ask_user(record: Mapping[str, Any]) -> AskUserAnswered:
    return _build(AskUserAnswered, record)


#: Fields holding a nested record, per class; every other array becomes a tuple.
_NESTED: dict[type[Any], dict[str, Callable[[Mapping[str, Any]], Any]]] = {
    PauseRecorded: {"checkpoint": _checkpoint},
    TurnResumed: {"answered": _ask_user},
}
