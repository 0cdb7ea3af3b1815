"""Wall-clock time at the precision the wire keeps.

Every timestamp turnlog writes is Avro ``timestamp-millis``, so a datetime carrying microseconds
would come back different from the value that was written, and an event read from the log would
not equal the event that produced it. Values meant for the wire are therefore made with
:func:`utc_now` (or passed through :func:`truncate_ms`); the codec refuses anything finer.

This module is the only place turnlog reads the clock. Code that needs "now" takes it as an
argument, and an edge (a producer, a worker) calls :func:`utc_now` to supply it.
"""

from __future__ import annotations

from datetime import UTC, datetime


def truncate_ms(moment: datetime) -> datetime:
    """``moment`` as aware UTC, cut to whole milliseconds -- exactly what the wire can carry.

    A naive datetime is refused: guessing its zone is how a deadline silently moves by hours.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("a wire timestamp must be timezone-aware; got a naive datetime")
    moment = moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def utc_now() -> datetime:
    """The current time, aware UTC, truncated to milliseconds so it survives a round trip."""
    return truncate_ms(datetime.now(UTC))
