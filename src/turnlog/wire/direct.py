"""Avro values written by hand, and the worker's ``TokenConsumed`` written with them.

The resume path writes two records per answer. Building each as a value and handing it to the
codec costs more than the writing itself, so the primitives here write the bytes directly --
zig-zag varints, strings, millisecond timestamps -- and :func:`encode_token_consumed` and
:func:`turnlog.wire.resumed_bytes.encode_turn_resumed` lay the records out with them. Both are
held byte for byte to :func:`turnlog.wire.codec.encode` by ``tests/unit/test_resumed_bytes.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from turnlog.wire.codec import WRITE_HEADERS, schema_for
from turnlog.wire.compiled import _SMALL
from turnlog.wire.compiled import _long as long_bytes  # the codec's own varint writer

__all__ = ["encode_token_consumed", "long_bytes", "millis_bytes", "strings_into"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLI = timedelta(milliseconds=1)
#: A consumption with no claim: two empty strings, the long 0 and an empty string.
_NO_CLAIM = b"\x00\x00\x00\x00"


def strings_into(parts: list[bytes], texts: Iterable[str]) -> None:
    """Each text as Avro writes a string -- its UTF-8 length as a varint, then its bytes --
    appended to ``parts`` (two parts each: no concatenation, one call for a run of strings).
    ``TypeError`` for anything but an exact ``str``."""
    append = parts.append
    small = _SMALL
    for text in texts:
        if type(text) is not str:
            raise TypeError(f"expected text, got {type(text).__name__}")
        data = text.encode("utf-8")
        size = len(data)
        append(small[size] if size < 4096 else long_bytes(size))
        append(data)


#: The last moment written and its bytes (datetimes are immutable, so the same object always
#: writes the same bytes).
_LAST_MILLIS: tuple[datetime | None, bytes] = (None, b"")


def millis_bytes(moment: datetime) -> bytes:
    global _LAST_MILLIS
    last = _LAST_MILLIS
    if last[0] is moment:  # the worker stamps a whole batch with one moment
        return last[1]
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("occurred_at must be timezone-aware (UTC), got a naive datetime")
    if moment.microsecond % 1000:
        raise ValueError(f"occurred_at carries microseconds ({moment.isoformat()})")
    written = long_bytes((moment - _EPOCH) // _MILLI)
    _LAST_MILLIS = (moment, written)  # one tuple: read and replaced whole
    return written


@functools.cache
def _consumed_checked() -> bool:
    """Whether ``TokenConsumed``'s fields are still the twelve strings, one timestamp and one
    long this module writes by hand (raises when not), checked once."""
    fields = [(f["name"], f["type"]) for f in schema_for("TokenConsumed")["fields"]]
    expected = ["event_id", "occurred_at", "package_version", "token_id", "answer_id"]
    expected += ["thread_id", "checkpoint_id", "outcome", "response_json"]
    expected += ["claim_id", "claimant", "claimed_at_ms", "claim_state"]
    if [name for name, _ in fields] != expected or any(
        kind != ("long" if name == "claimed_at_ms" else "string")
        for name, kind in fields
        if name != "occurred_at"
    ):
        raise RuntimeError(f"TokenConsumed's fields changed ({fields}); update wire/direct.py")
    return True


def encode_token_consumed(
    meta: Mapping[str, Any],
    token_id: str,
    answer_id: str,
    thread_id: str,
    checkpoint_id: str,
    outcome: str,
    response_json: str = "",
    claim: tuple[str, str, int, str] | None = None,
) -> bytes:
    """The ``TokenConsumed`` record of these fields (``meta``: its ``event_id``,
    ``occurred_at`` and ``package_version``), byte for byte what
    :func:`~turnlog.wire.codec.encode` writes for the same event, without building it first.
    ``claim`` is ``(claim_id, claimant, claimed_at_ms, claim_state)``, ``None`` for none.
    ``ValueError`` for a value the schema cannot carry."""
    # The header the codec writes now: single-object, or the registry's framing.
    parts = [WRITE_HEADERS["TokenConsumed"] if _consumed_checked() else b""]
    try:
        strings_into(parts, (meta["event_id"],))
        parts.append(millis_bytes(meta["occurred_at"]))
        strings_into(
            parts,
            (
                meta["package_version"],
                token_id,
                answer_id,
                thread_id,
                checkpoint_id,
                outcome,
                response_json,
            ),
        )
        if claim is None:
            parts.append(_NO_CLAIM)
        else:
            strings_into(parts, (claim[0], claim[1]))
            parts.append(long_bytes(claim[2]))
            strings_into(parts, (claim[3],))
        return b"".join(parts)
    except (TypeError, UnicodeEncodeError, OverflowError) as exc:
        raise ValueError(f"TokenConsumed cannot be written with its schema: {exc}") from exc
