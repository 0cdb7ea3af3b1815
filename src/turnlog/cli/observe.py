"""What the long-running verbs share for operators: ``--log-level``/``--log-format`` and
``--metrics-port`` (``/metrics``, ``/healthz``, ``/readyz`` on one port while the verb runs)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated

import typer

from turnlog.cli.app import EXIT_USAGE, err, fail, run_state

LogLevelOpt = Annotated[
    str | None,
    typer.Option(
        "--log-level",
        metavar="LEVEL",
        envvar="TURNLOG_LOG_LEVEL",
        help="debug, info (one line per answer and ownership change), warning or error.",
    ),
]
LogFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--log-format",
        metavar="FORMAT",
        envvar="TURNLOG_LOG_FORMAT",
        help="text, or json (one object per line).",
    ),
]
MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        metavar="PORT",
        envvar="TURNLOG_METRICS_PORT",
        help="Serve /metrics, /healthz and /readyz on this port (0: any free one).",
    ),
]


def setup_logs(ctx: typer.Context, level: str | None, fmt: str | None) -> None:
    """Apply ``--log-level``/``--log-format``; without either the verb logs as before (warnings,
    as text). The Kafka client's own lines are shown only with ``--log-level debug`` or
    ``--debug``: at WARNING a 30-second outage wrote thousands of aiokafka ERROR lines (one per
    reconnect attempt) beside turnlog's own two, which say the same."""
    if level is None and fmt is None:
        return
    from turnlog.observability.logs import FORMATS, LEVELS, configure

    level = (level or "info").lower()
    fmt = (fmt or "text").lower()
    if level not in LEVELS:
        raise fail(f"--log-level must be one of {', '.join(LEVELS)}, not {level!r}", EXIT_USAGE)
    if fmt not in FORMATS:
        raise fail(f"--log-format must be one of {', '.join(FORMATS)}, not {fmt!r}", EXIT_USAGE)
    chatty = run_state(ctx).debug or level == "debug"
    configure(level, fmt, kafka_level="debug" if chatty else "critical")


@asynccontextmanager
async def serving(port: int | None, ready: Callable[[], bool]) -> AsyncIterator[None]:
    """The health and metrics endpoints for the life of the block, if a port was given."""
    if port is None:
        yield
        return
    from turnlog.kafka.outage import waiting
    from turnlog.observability.health import HealthServer

    if not 0 <= port <= 65535:
        raise fail(f"--metrics-port must be 0..65535, not {port}", EXIT_USAGE)
    server = HealthServer(port, ready=ready, why=waiting)
    await server.start()
    err.print(f"metrics and health on port {server.port}", soft_wrap=True)
    try:
        yield
    finally:
        await server.stop()
