"""``turnlog worker``'s group timings: the session timeout and the heartbeat, as flags over
``TURNLOG_SESSION_TIMEOUT_MS`` / ``TURNLOG_HEARTBEAT_INTERVAL_MS``, checked before any broker
is asked (docs/operations/scaling.md, "Failover in seconds")."""

from __future__ import annotations

from typing import Annotated

import typer

from turnlog.cli.app import EXIT_USAGE, fail
from turnlog.errors import SettingError
from turnlog.settings import Settings

SessionTimeoutOpt = Annotated[
    int | None,
    typer.Option(
        "--session-timeout-ms",
        metavar="MS",
        help="How long the group waits for a silent worker before its partitions move "
        "(env TURNLOG_SESSION_TIMEOUT_MS, default 10000). The broker's "
        "group.min.session.timeout.ms (6000 by default) is the least it accepts.",
    ),
]

HeartbeatOpt = Annotated[
    int | None,
    typer.Option(
        "--heartbeat-interval-ms",
        metavar="MS",
        help="How often the worker tells the group it is alive (env "
        "TURNLOG_HEARTBEAT_INTERVAL_MS; default a third of the session timeout, at most 1000).",
    ),
]


def group_timings(settings: Settings, session_ms: int | None, heartbeat_ms: int | None) -> Settings:
    """``settings`` with the flags given applied, or one ``error:`` line (exit 2) naming the
    flag whose value cannot be used."""
    changes = {
        name: value
        for name, value in (
            ("session_timeout_ms", session_ms),
            ("heartbeat_interval_ms", heartbeat_ms),
        )
        if value is not None
    }
    if not changes:
        return settings
    try:
        return settings.with_(**changes)
    except SettingError as exc:
        if "heartbeat" not in exc.name:
            flag = "--session-timeout-ms"
        else:  # the heartbeat is named where it came from: the flag, or the environment's
            flag = "--heartbeat-interval-ms" if heartbeat_ms is not None else exc.name
        raise fail(str(SettingError(flag, exc.value, exc.why)), EXIT_USAGE) from None
