"""One trace across the pause: the agent's turn, the person's answer, the continuation.

A W3C ``traceparent`` (https://www.w3.org/TR/trace-context/) travels in a Kafka record header --
never in the Avro value: it is context about the fact, not the fact -- from the pause record,
through the answer record, to the records the worker writes for that answer. Each hop is a child
(same trace id, a new span id), so a tracing backend links a turn paused on Monday with its
continuation on Thursday, in other processes.

A header comes from outside (any Kafka client may publish an answer): one that does not parse is
ignored as if absent -- never an error, never a refusal, never a stopped consumer. Tracing is
context; it must not change what happens to an answer.

OpenTelemetry is optional (``pip install 'turnlog[otel]'``): with ``opentelemetry-api``
installed and a span current, a pause joins that span's trace. Without it everything here still
works on plain ids, and nothing is exported anywhere.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

#: The record header's name (the W3C name, as every Kafka instrumentation uses it).
HEADER = "traceparent"
#: Record headers as aiokafka takes and gives them.
Headers = list[tuple[str, bytes]]

_FIELDS = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_SAMPLED = 0x01


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed ``traceparent``: whose trace, which span, and the trace flags."""

    trace_id: str  # 32 lowercase hex digits, not all zero
    span_id: str  # 16 lowercase hex digits, not all zero
    flags: int = _SAMPLED

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    def header(self) -> Headers:
        """This traceparent as the one record header that carries it."""
        return [(HEADER, str(self).encode("ascii"))]


def parse(value: str | bytes | TraceParent | None) -> TraceParent | None:
    """The traceparent in ``value``, or ``None`` for anything that is not a valid one.

    Version ``00`` is exactly 55 characters; a later version may append fields after a dash,
    which are ignored (the spec's forward compatibility); version ``ff`` and all-zero ids are
    invalid. Hex must be lowercase, as the spec says.
    """
    if isinstance(value, TraceParent):
        return value
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str) or len(value) < 55:
        return None
    match = _FIELDS.match(value)
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or (version == "00" and len(value) != 55):
        return None
    if len(value) > 55 and value[55] != "-":
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def from_headers(headers: Iterable[tuple[str, bytes]] | None) -> TraceParent | None:
    """The record's traceparent, or ``None`` (absent, malformed, or the headers themselves
    unreadable). The first ``traceparent`` header decides, as in HTTP."""
    try:
        for name, value in headers or ():
            if name == HEADER:
                return parse(value)
    except (TypeError, ValueError):
        return None
    return None


def _new_span_id() -> str:
    while True:
        span = secrets.token_hex(8)
        if span != "0" * 16:
            return span


def fresh() -> TraceParent:
    """The root of a new trace, sampled."""
    while True:
        trace = secrets.token_hex(16)
        if trace != "0" * 32:
            return TraceParent(trace, _new_span_id())


def child_of(parent: TraceParent | None) -> TraceParent:
    """A new span in ``parent``'s trace (its flags kept); a new trace without a parent."""
    if parent is None:
        return fresh()
    return TraceParent(parent.trace_id, _new_span_id(), parent.flags)


def current() -> TraceParent | None:
    """The current OpenTelemetry span's context, or ``None`` (no OpenTelemetry, no span)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return TraceParent(
        format(context.trace_id, "032x"), format(context.span_id, "016x"), int(context.trace_flags)
    )


def start(given: str | TraceParent | None = None) -> TraceParent:
    """Where a new hop's trace starts: ``given`` (a malformed one is ignored), else the current
    OpenTelemetry span, else a new trace."""
    return parse(given) or current() or fresh()
