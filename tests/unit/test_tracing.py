"""W3C traceparent: parse, format, children, and the optional OpenTelemetry context."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from turnlog.observability import tracing
from turnlog.observability.tracing import TraceParent

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_round_trips() -> None:
    parsed = tracing.parse(GOOD)
    assert parsed == TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
    assert str(parsed) == GOOD
    assert tracing.parse(GOOD.encode()) == parsed
    assert tracing.parse(parsed) is parsed


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        GOOD.upper(),  # the spec's hex is lowercase
        GOOD + "-extra",  # version 00 is exactly 55 characters
        "ff" + GOOD[2:],  # version ff is invalid
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"\xff" * 55,  # not ASCII
    ],
)
def test_anything_else_is_no_traceparent(value: str | bytes | None) -> None:
    assert tracing.parse(value) is None


def test_a_later_version_is_read_for_its_known_fields() -> None:
    assert tracing.parse("01" + GOOD[2:] + "-more") == tracing.parse(GOOD)
    assert tracing.parse("01" + GOOD[2:] + "x") is None


def test_a_child_is_a_new_span_in_the_same_trace() -> None:
    parent = tracing.parse(GOOD)
    child = tracing.child_of(parent)
    assert parent is not None
    assert child.trace_id == parent.trace_id and child.flags == parent.flags
    assert child.span_id != parent.span_id
    assert tracing.parse(str(child)) == child
    orphan = tracing.child_of(None)
    assert orphan.trace_id != parent.trace_id and tracing.parse(str(orphan)) == orphan


def test_headers_give_the_first_traceparent_and_ignore_a_malformed_one() -> None:
    assert tracing.from_headers([("other", b"x"), ("traceparent", GOOD.encode())]) == (
        tracing.parse(GOOD)
    )
    assert tracing.from_headers([("traceparent", b"00-nope")]) is None
    assert tracing.from_headers(None) is None
    assert tracing.from_headers([]) is None
    assert tracing.from_headers([("traceparent", None)]) is None  # type: ignore[list-item]
    assert TraceParent("a" * 32, "b" * 16).header() == [
        ("traceparent", f"00-{'a' * 32}-{'b' * 16}-01".encode())
    ]


def test_start_prefers_the_given_then_the_current_span_then_a_new_trace() -> None:
    given = tracing.parse(GOOD)
    assert tracing.start(GOOD) == given
    assert tracing.current() is None  # no span is current
    assert tracing.start("garbage").trace_id != given.trace_id  # type: ignore[union-attr]
    context = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=trace.TraceFlags(1),
    )
    with trace.use_span(trace.NonRecordingSpan(context)):
        current = tracing.current()
        assert str(current) == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        assert tracing.start(None) == current
        assert tracing.start(GOOD) == given
