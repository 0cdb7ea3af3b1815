"""``turnlog region``: a second region -- promote it, see whether it was, how far its mirror
lags, and what a failover lost or doubled (``docs/operations/regions.md``).

Every verb runs against the region named by ``--bootstrap-servers`` (region B, the one that
takes over); ``--source`` names region A, the one mirrored from. Both are reached with the same
Kafka security settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from turnlog.cli.app import (
    EXIT_FAILURE,
    EXIT_USAGE,
    BrokerTimeoutOpt,
    Interrupts,
    JsonOpt,
    app,
    fail,
    out,
    print_json,
    run_async,
    run_state,
)
from turnlog.cli.observe import MetricsPortOpt, serving
from turnlog.settings import Settings

if TYPE_CHECKING:
    from turnlog.region.control import Promotion
    from turnlog.region.lag import PartitionLag

region_app = typer.Typer(
    help="A second region: promote it after the first is lost, its mirror's lag, the "
    "cross-region audit.",
    no_args_is_help=True,
)
app.add_typer(region_app, name="region")

#: Exit status of ``region audit`` when the window held something (lost, missing, doubled).
EXIT_WINDOW = 1

SourceOpt = Annotated[
    str,
    typer.Option(
        "--source",
        metavar="BOOTSTRAP",
        help="Region A's bootstrap servers (the region mirrored from).",
    ),
]


@region_app.command("promote")
@run_async
async def promote(
    ctx: typer.Context,
    by: Annotated[str, typer.Option("--by", help="Who decides (a person, a runbook's id).")],
    region: Annotated[
        str, typer.Option("--region", help="This region's name, as the runbooks call it.")
    ] = "B",
    reason: Annotated[str, typer.Option("--reason", help="Why, in a few words.")] = "",
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            metavar="BOOTSTRAP",
            help="Region A's bootstrap servers: refuse while A still answers (its workers "
            "would go on resuming there).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Promote even though --source answers.")
    ] = False,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Move turnlog to this region: one record on its control topic, which its passive workers
    (``turnlog worker --passive``) read before they take the answers over. Nothing else
    promotes a region -- not A's silence, which a network blip looks like."""
    from turnlog.region.control import (
        Promotion,
        control_topic,
        ensure_control_topic,
        publish,
        read_promotion,
    )

    if not by.strip():
        raise fail("--by must name who decides", EXIT_USAGE)
    settings = run_state(ctx).settings
    name = control_topic(settings.topic_prefix)
    existing = await read_promotion(settings.connection, name)
    if existing is not None:
        _said(existing.line() + " (already; nothing written)", existing, as_json)
        return
    if source is not None and not force and await _answers(settings, source):
        raise fail(
            f"region A at {source} still answers: stop its workers and MirrorMaker first (two "
            "regions resuming the same answers cannot be undone), or pass --force",
            EXIT_FAILURE,
        )
    await ensure_control_topic(settings.connection, name, settings.replication_factor)
    promotion = Promotion(region, by.strip(), int(time.time() * 1000), reason.strip())
    await publish(settings.connection, name, promotion)
    _said(promotion.line(), promotion, as_json)


def _said(line: str, promotion: Promotion, as_json: bool) -> None:
    if as_json:
        from dataclasses import asdict

        print_json(asdict(promotion))
    else:
        out.print(line, soft_wrap=True, highlight=False, markup=False)


async def _answers(settings: Settings, source: str, timeout: float = 5.0) -> bool:
    """Whether region A's brokers answer a metadata request within ``timeout``."""
    from turnlog.kafka import clients

    admin = clients.admin(settings.with_(bootstrap_servers=source), client_id="turnlog-region")
    try:
        await asyncio.wait_for(admin.start(), timeout)
        return True
    except Exception:  # noqa: BLE001 - unreachable in any way: A does not answer
        return False
    finally:
        # closing a client that never connected: whatever it raises says nothing more
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), timeout)


@region_app.command("status")
@run_async
async def status(
    ctx: typer.Context, as_json: JsonOpt = False, broker_timeout: BrokerTimeoutOpt = None
) -> None:
    """Whether this region was promoted: by whom, when, why."""
    from turnlog.region.control import control_topic, read_promotion

    settings = run_state(ctx).settings
    found = await read_promotion(settings.connection, control_topic(settings.topic_prefix))
    if as_json:
        from dataclasses import asdict

        print_json({"promoted": found is not None, **(asdict(found) if found else {})})
        return
    if found is None:
        out.print("not promoted: passive workers here answer nothing", highlight=False)
    else:
        out.print(found.line(), soft_wrap=True, highlight=False, markup=False)


@region_app.command("lag")
@run_async
async def lag(
    ctx: typer.Context,
    source: SourceOpt,
    as_json: JsonOpt = False,
    watch: Annotated[
        float | None,
        typer.Option("--watch", metavar="SECONDS", help="Measure again every SECONDS."),
    ] = None,
    metrics_port: MetricsPortOpt = None,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """How far this region stands behind region A, per topic: the records A holds that this
    region does not have yet, and the age of the oldest -- the window a loss of A now would
    open. With --metrics-port, served as turnlog_region_mirror_lag_seconds and
    turnlog_region_mirror_behind_records."""
    from turnlog.kafka.topics import TopicSet
    from turnlog.region.lag import mirror_lag
    from turnlog.region.metrics import region_metrics

    if watch is not None and watch <= 0:
        raise fail(f"--watch must be a positive number of seconds, not {watch}", EXIT_USAGE)
    settings = run_state(ctx).settings
    topics = TopicSet.from_settings(settings)
    a = settings.with_(bootstrap_servers=source).connection
    metrics = region_metrics()
    stop = asyncio.Event()
    if watch is not None:
        Interrupts().on_stop(stop.set)
    measured = False
    async with serving(metrics_port, lambda: measured):
        while True:
            lags = await mirror_lag(
                a, settings.connection, topics, timeout=settings.broker_timeout_seconds
            )
            metrics.observe(lags)
            measured = True
            _show_lag(lags, as_json)
            if watch is None:
                return
            try:
                await asyncio.wait_for(stop.wait(), watch)
                return
            except TimeoutError:
                continue


def _show_lag(lags: list[PartitionLag], as_json: bool) -> None:
    from turnlog.region.lag import worst

    behind, seconds = worst(lags)
    if as_json:
        print_json(
            {
                "behind": behind,
                "lag_seconds": round(seconds, 3),
                "partitions": [x.as_dict() for x in lags],
            }
        )
        return
    table = Table("topic", "records behind", "oldest unmirrored (s)")
    for topic in dict.fromkeys(x.topic for x in lags):
        mine = [x for x in lags if x.topic == topic]
        b, s = worst(mine)
        table.add_row(topic, str(b), f"{s:.3f}")
    out.print(table)
    out.print(f"behind: {behind} records; lag {seconds:.3f} s", highlight=False)


@region_app.command("audit")
@run_async
async def audit(
    ctx: typer.Context,
    source: SourceOpt,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            metavar="SECONDS",
            help="How long to wait for transactions still open on either region to end first "
            "(a region back from a crash holds its killed writers' until their timeout).",
        ),
    ] = 90.0,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """What the failover from region A to this region lost and doubled: answers A took that
    never reached here, pauses missing here, tokens resumed in both, with the window's bounds.
    Exit 0 when the window held none of these, 1 when it did (each named)."""
    from turnlog.audit.region_scan import audit_regions
    from turnlog.audit.regions import window_line
    from turnlog.kafka.topics import TopicSet

    settings = run_state(ctx).settings
    report = await audit_regions(
        settings.with_(bootstrap_servers=source).connection,
        settings.connection,
        TopicSet.from_settings(settings),
        names=(source, settings.bootstrap_servers),
        timeout=settings.broker_timeout_seconds + settle,
        settle=settle,
    )
    if as_json:
        print_json(report.as_dict())
    else:
        s = report.summary()
        out.print(
            f"region {report.target} after {report.source}: "
            + ("nothing lost or doubled" if report.clean else "the window held losses")
            + f"; {s['answers_lost']} answers lost, {s['pauses_missing']} pauses missing, "
            f"{s['tokens_resumed_in_both']} tokens resumed in both "
            f"({s['doubled_with_distinct_events']} under distinct event ids), "
            f"{s['resumes_unmirrored']} resumes not mirrored, "
            f"{s['refused_unmirrored_pause']} answers refused for a pause never mirrored, "
            f"{s['refused_spent_in_target']} replays refused as spent",
            soft_wrap=True,
            highlight=False,
        )
        out.print(window_line(report), soft_wrap=True, highlight=False)
        for region, blocked in report.unsettled.items():
            if blocked:
                out.print(
                    f"not read to the end in {region}: a transaction still open on "
                    f"{', '.join(blocked)} after {settle:.0f} s hides what follows it; "
                    "run again later",
                    soft_wrap=True, highlight=False, markup=False,
                )  # fmt: skip
        for answer, token, _ in report.answers_lost:
            out.print(f"answer lost: {answer} (token {token})", highlight=False, markup=False)
        for token, _ in report.pauses_missing:
            out.print(f"pause missing: token {token}", highlight=False, markup=False)
        for d in report.doubled:
            how = "same event id" if d.same_event else "DISTINCT event ids"
            out.print(
                f"resumed in both: token {d.token_id}, answers {list(d.answers_a)} in A and "
                f"{list(d.answers_b)} here ({how})",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
    if not report.clean:
        raise typer.Exit(EXIT_WINDOW)


__all__ = ["audit", "lag", "promote", "status"]
