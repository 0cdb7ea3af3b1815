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
    from turnlog.audit import Auditor, Report

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
    heal: Annotated[
        bool,
        typer.Option(
            "--heal",
            help="Ask each partition's owner to write what a lost transaction marker took (a "
            "resumed turn, a consumption, a skipped answer's outcome), wait for the workers, "
            "and judge again.",
        ),
    ] = False,
    heal_timeout: Annotated[
        float,
        typer.Option("--heal-timeout", metavar="SECONDS", help="How long --heal waits."),
    ] = 120.0,
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
                if heal and not report.holds:
                    report = await _healed(auditor, report, heal_timeout, as_json)
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


async def _healed(auditor: Auditor, report: Report, timeout: float, quiet: bool) -> Report:
    """Ask for the repairs, wait until the workers have read every request, judge again."""
    from turnlog.kafka.groups import group_status

    requests = await auditor.heal(report)
    if not requests:
        return report
    if not quiet:
        out.print(f"asked the owners for {len(requests)} repair(s)", highlight=False)
    due: dict[int, int] = {}
    for r in requests:
        due[r.partition] = max(due.get(r.partition, 0), r.request_offset + 1)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    settings, topic = auditor.settings, auditor.topics.answers
    while True:
        group = await group_status(settings.connection, auditor.group_id, topic)
        committed = {p.partition: p.committed or 0 for p in group.partitions}
        if all(committed.get(p, 0) >= end for p, end in due.items()):
            break
        if loop.time() > deadline:
            from turnlog.cli.app import EXIT_FAILURE, fail

            waiting = sorted(p for p, end in due.items() if committed.get(p, 0) < end)
            raise fail(
                f"the repairs were asked for, but no worker handled them on partitions "
                f"{waiting} within {timeout:.0f}s: is a worker running?",
                EXIT_FAILURE,
            )
        await asyncio.sleep(0.2)  # polling the group's offsets until the deadline
    return await auditor.audit()


def _show(report: Report, as_json: bool) -> None:
    if as_json:
        print_json(report.as_dict())
        return
    s = report.summary()
    verdict = "holds" if report.holds else "VIOLATED"
    out.print(
        f"exactly once {verdict}: {s['answers_judged']} answers judged on {s['partitions']} "
        f"partitions ({s['resumed']} resumed, {s['refused']} refused, {s['expired']} expired; "
        f"{s['not_yet_handled']} not yet handled, {s['beyond_retention']} beyond retention)"
        + (
            f"; {s['claims_judged']} claims on resumed turns judged ({s['claims_refused']} refused)"
            if s["claims_judged"]
            else ""
        ),
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
