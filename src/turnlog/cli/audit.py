"""``turnlog audit``: is every answer resumed or refused exactly once? Read from the log alone.

An operator's check, independent of the workers: it reads the five topics ``read_committed``
and the worker group's committed offsets, needs no store and no key, and exits 0 when the
invariant holds, 1 when it does not (every violation printed with its ids). ``--watch`` keeps
judging, every interval, going on from where the last pass stopped, and serves the verdict as a
Prometheus gauge with ``--metrics-port``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from turnlog.cli.app import (
    BrokerTimeoutOpt,
    Interrupts,
    JsonOpt,
    app,
    out,
    print_json,
    run_async,
    run_state,
)
from turnlog.cli.observe import MetricsPortOpt, serving

if TYPE_CHECKING:
    from turnlog.audit import Report

EXIT_VIOLATED = 1


@app.command("audit")
@run_async
async def audit(
    ctx: typer.Context,
    as_json: JsonOpt = False,
    watch: Annotated[
        float | None,
        typer.Option(
            "--watch",
            metavar="SECONDS",
            help="Judge again every SECONDS until Ctrl-C (prints each change of the verdict).",
        ),
    ] = None,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            metavar="SECONDS",
            help="How long to wait before re-reading an outcome that is not visible yet (a "
            "commit still writing its markers).",
        ),
    ] = 3.0,
    group: Annotated[
        str | None,
        typer.Option(
            help="The worker group whose committed offsets are judged (default: "
            "TURNLOG_APPLICATION_ID's)."
        ),
    ] = None,
    metrics_port: MetricsPortOpt = None,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Check the exactly-once invariant on the log: each answer below the worker group's
    committed offset resumed or refused exactly once, every consumption with its resumed turn,
    each expiry once. Exit 0 when it holds, 1 when it does not."""
    from turnlog.audit import Auditor
    from turnlog.observability.metrics import audit_metrics

    if watch is not None and watch <= 0:
        from turnlog.cli.app import EXIT_USAGE, fail

        raise fail(f"--watch must be a positive number of seconds, not {watch}", EXIT_USAGE)
    settings = run_state(ctx).settings
    metrics = audit_metrics()
    interrupts = Interrupts() if watch is not None else None
    stop = asyncio.Event()
    if interrupts is not None:
        interrupts.on_stop(stop.set)
    async with Auditor(
        settings,
        group_id=group,
        settle_seconds=settle,
        timeout=settings.broker_timeout_seconds,
    ) as auditor:
        judged = False  # ready (``/readyz``) once a first verdict is out
        async with serving(metrics_port, lambda: judged):
            last: tuple[int, ...] | None = None
            while True:
                report = await auditor.audit()
                for kind, n in report.by_kind().items():
                    metrics.violations.labels(kind).set(n)
                metrics.answers.set(report.answers_judged)
                metrics.passes.inc()
                metrics.last_pass.set(time.time())
                judged = True
                shape = (len(report.violations), report.answers_judged)
                if watch is None or shape != last:
                    _show(report, as_json)
                last = shape
                if watch is None:
                    break
                try:
                    await asyncio.wait_for(stop.wait(), watch)
                    break
                except TimeoutError:
                    continue
    if not report.holds:
        raise typer.Exit(EXIT_VIOLATED)


def _show(report: Report, as_json: bool) -> None:
    if as_json:
        print_json(report.as_dict())
        return
    s = report.summary()
    verdict = "holds" if report.holds else "VIOLATED"
    out.print(
        f"exactly once {verdict}: {s['answers_judged']} answers judged on {s['partitions']} "
        f"partitions ({s['resumed']} resumed, {s['refused']} refused, {s['expired']} expired; "
        f"{s['not_yet_handled']} not yet handled, {s['beyond_retention']} beyond retention)",
        soft_wrap=True,
        highlight=False,
    )
    if report.holds:
        return
    table = Table("kind", "count", title="violations")
    for kind, n in report.by_kind().items():
        if n:
            table.add_row(kind, str(n))
    out.print(table)
    for v in report.violations:
        out.print(v.line(), soft_wrap=True, highlight=False, markup=False)
