"""``turnlog notify``: post to webhooks when a pause is recorded, when its window is about to
close, and when it is resumed, refused or expired (the ``notify`` extra: an HTTP client)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from turnlog.cli.app import (
    EXIT_FAILURE,
    EXIT_USAGE,
    BrokerTimeoutOpt,
    Interrupts,
    app,
    err,
    fail,
    run_async,
    run_state,
)
from turnlog.cli.observe import LogFormatOpt, LogLevelOpt, MetricsPortOpt, serving, setup_logs

EXTRA_MISSING = "the notifier needs the 'notify' extra: pip install 'turnlog[notify]'"


def _secrets(path: Path | None) -> list[bytes]:
    """The secrets of ``--secret-file``: one per line, the first signs (blank lines skipped)."""
    if path is None:
        return []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise fail(f"--secret-file {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    found = [line.strip() for line in lines if line.strip()]
    if not found:
        raise fail(f"--secret-file {path}: no secret in it", EXIT_USAGE)
    return found


@app.command("notify")
@run_async
async def notify(
    ctx: typer.Context,
    url: Annotated[
        list[str] | None,
        typer.Option(
            "--url",
            metavar="URL",
            help="A webhook that receives signed JSON notices; repeat it "
            "(env TURNLOG_NOTIFY_URLS, comma-separated).",
        ),
    ] = None,
    slack_url: Annotated[
        list[str] | None,
        typer.Option(
            "--slack-url",
            metavar="URL",
            help='A Slack-compatible incoming webhook ({"text": ...}); repeat it '
            "(env TURNLOG_NOTIFY_SLACK_URLS).",
        ),
    ] = None,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            "--secret-file",
            metavar="FILE",
            help="The HMAC secret, one per line, the first signing (rotation: add the new one "
            "first, remove the old one later); default env TURNLOG_NOTIFY_SECRET.",
        ),
    ] = None,
    remind_before: Annotated[
        str | None,
        typer.Option(
            "--remind-before",
            metavar="DURATION",
            help="Remind this long before a window closes: 90s, 15m, 1h, 1h30m, 2d "
            "(env TURNLOG_NOTIFY_REMIND_BEFORE; default: no reminders).",
        ),
    ] = None,
    inbox_url: Annotated[
        str | None,
        typer.Option(
            "--inbox-url",
            metavar="URL",
            help="The inbox's address, for each notice's link (env TURNLOG_INBOX_URL).",
        ),
    ] = None,
    notifier_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            metavar="NAME",
            help="Names this notifier's consumer groups; one process per id "
            "(env TURNLOG_NOTIFY_ID, default 'default').",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="The most one POST may take (env TURNLOG_NOTIFY_TIMEOUT, default 10).",
        ),
    ] = None,
    retry_for: Annotated[
        str | None,
        typer.Option(
            "--retry-for",
            metavar="DURATION",
            help="How long a notice the webhook does not take is kept and tried again before "
            "it is dead-lettered: 1m to 30d (env TURNLOG_NOTIFY_RETRY_FOR, default 1d).",
        ),
    ] = None,
    retry_base: Annotated[
        str | None,
        typer.Option(
            "--retry-base",
            metavar="DURATION",
            help="The first wait between attempts, doubled per failure "
            "(env TURNLOG_NOTIFY_RETRY_BASE, default 1s).",
        ),
    ] = None,
    retry_cap: Annotated[
        str | None,
        typer.Option(
            "--retry-cap",
            metavar="DURATION",
            help="The longest wait between attempts (env TURNLOG_NOTIFY_RETRY_CAP, default 5m).",
        ),
    ] = None,
    broker_timeout: BrokerTimeoutOpt = None,
    metrics_port: MetricsPortOpt = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Tell people when a question waits, until SIGTERM/SIGINT (one process per --id)."""
    interrupts = Interrupts()
    setup_logs(ctx, log_level, log_format)
    state = run_state(ctx)
    if not state.debug and log_level is None:
        # Undelivered notices are warnings, and a notifier that hides them helps nobody.
        logging.getLogger("turnlog").setLevel(logging.NOTSET)
    import importlib.util

    if importlib.util.find_spec("httpx") is None:
        raise fail(EXTRA_MISSING, EXIT_FAILURE)
    from turnlog.kafka.outage import serve_as
    from turnlog.notify.config import build
    from turnlog.notify.notifier import Notifier

    config = build(
        os.environ,
        urls=url or (),
        slack_urls=slack_url or (),
        secrets=_secrets(secret_file),
        remind_before=remind_before,
        inbox_url=inbox_url,
        notifier_id=notifier_id,
        timeout=timeout,
        retry_for=retry_for,
        retry_base=retry_base,
        retry_cap=retry_cap,
    )
    settings = state.settings
    serve_as("notifier")  # a broker down at its start is waited out, not ready meanwhile
    notifier = Notifier(settings, config)
    interrupts.on_stop(notifier.request_stop)
    async with notifier, serving(metrics_port, lambda: bool(notifier.lanes)):
        lead = config.remind_before
        reminders = f"reminders {lead} before the deadline" if lead else "no reminders"
        err.print(
            f"notifier {config.notifier_id} posting to {len(config.sinks)} webhook(s) "
            f"({', '.join(s.describe() for s in config.sinks)}), {reminders}, "
            f"{notifier.pauses_known} pause(s) known; Ctrl-C stops",
            soft_wrap=True,
            highlight=False,
        )
        await notifier.run()
