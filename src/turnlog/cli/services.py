"""The long-running verbs and the demo: worker, project, replay, demo."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from turnlog.cli.app import (
    BrokerTimeoutOpt,
    Interrupted,
    Interrupts,
    JsonOpt,
    app,
    err,
    out,
    print_json,
    run_async,
    run_state,
)
from turnlog.cli.common import caught_up, projection_dir, verifier, worker_dir
from turnlog.cli.group_timings import HeartbeatOpt, SessionTimeoutOpt, group_timings
from turnlog.cli.observe import LogFormatOpt, LogLevelOpt, MetricsPortOpt, serving, setup_logs
from turnlog.errors import BrokerUnavailable
from turnlog.settings import Settings

if TYPE_CHECKING:
    from turnlog.consumers.worker import ResumeWorker
    from turnlog.projections.projector import CheckpointProjector
    from turnlog.projections.store import Store
    from turnlog.tokens import TokenVerifier


@app.command("worker")
@run_async
async def worker(
    ctx: typer.Context,
    broker_timeout: BrokerTimeoutOpt = None,
    instance_id: Annotated[
        str | None,
        typer.Option(
            envvar="TURNLOG_INSTANCE_ID",
            help="A stable id per worker slot (Kafka static membership): a restarted worker "
            "takes its partitions straight back instead of stalling the group for a session "
            "timeout. Unique per running worker.",
        ),
    ] = None,
    standby: Annotated[
        int,
        typer.Option(
            "--standby",
            envvar="TURNLOG_STANDBY",
            min=0,
            max=8,
            help="Keep warm, read-only copies of partitions other workers own: N copies of "
            "each partition, on workers other than its owner that run with --standby. When an "
            "owner dies, its partitions go to their copies and are ready from there instead of "
            "a full restore.",
        ),
    ] = 0,
    passive: Annotated[
        bool,
        typer.Option(
            "--passive",
            envvar="TURNLOG_PASSIVE",
            help="A second region's worker: keep warm, read-only copies of every mirrored "
            "partition and answer nothing until `turnlog region promote` names this region; "
            "then take over from the copies (docs/operations/regions.md).",
        ),
    ] = False,
    session_timeout_ms: SessionTimeoutOpt = None,
    heartbeat_interval_ms: HeartbeatOpt = None,
    metrics_port: MetricsPortOpt = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the resume worker until SIGTERM/SIGINT (finishes its batch, commits, leaves)."""
    interrupts = Interrupts()
    setup_logs(ctx, log_level, log_format)
    from turnlog.kafka.outage import serve_as
    from turnlog.projections.store import Store

    settings = group_timings(run_state(ctx).settings, session_timeout_ms, heartbeat_interval_ms)
    checks = verifier(settings)  # the keys and the store first: neither needs the broker
    store = Store.open(worker_dir(settings))
    # A service: a broker down when it starts is waited out under TURNLOG_BROKER_TIMEOUT, not
    # ready meanwhile (health served from the start), as an outage after first contact would be.
    serve_as("worker")
    running: list[ResumeWorker] = []  # ready once it owns every partition the group gave it
    try:
        async with serving(metrics_port, lambda: bool(running) and running[0].ready):
            try:
                await _work(
                    settings, store, checks, instance_id, (standby, passive), interrupts, running
                )
            except BrokerUnavailable:
                if interrupts.signal is None:
                    raise
                raise Interrupted from None  # stopped while it waited for the broker
        s = running[0].stats
        err.print(
            f"stopped: resumed {s.resumed}, rejected {s.rejected}, expired {s.expired}",
            soft_wrap=True,
        )
    finally:
        store.close()


async def _work(
    settings: Settings,
    store: Store,
    checks: TokenVerifier,
    instance_id: str | None,
    copies: tuple[int, bool],
    interrupts: Interrupts,
    running: list[ResumeWorker],
) -> None:
    """The worker's first contact (and whether a restart of this cluster can lose a resume),
    then its run until a stop."""
    from turnlog.consumers.worker import ResumeWorker
    from turnlog.contracts.interactions import default_interactions
    from turnlog.kafka.registry import prepare_wire
    from turnlog.kafka.topics import TopicSet, replication_warning

    warning = await replication_warning(settings, TopicSet.from_settings(settings))
    await prepare_wire(settings)  # the registry wire's schemas, before any client exists
    resume = ResumeWorker(
        settings,
        store=store,
        verifier=checks,
        interactions=default_interactions(),
        instance_id=instance_id,
        standbys=copies[0],
        passive=copies[1],
    )
    interrupts.on_stop(resume.request_stop)
    running.append(resume)
    if warning is not None:  # before the line that says it runs: nothing comes between
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    err.print(
        f"worker {settings.application_id} on {settings.connection.describe()}"
        + ("; passive until `turnlog region promote`" if copies[1] else "")
        + "; Ctrl-C stops",
        soft_wrap=True,
    )
    await resume.run()


@app.command("project")
@run_async
async def project(
    ctx: typer.Context,
    broker_timeout: BrokerTimeoutOpt = None,
    metrics_port: MetricsPortOpt = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Follow pauses and consumptions into the local store until SIGTERM/SIGINT."""
    interrupts = Interrupts()
    setup_logs(ctx, log_level, log_format)
    from turnlog.kafka.outage import serve_as
    from turnlog.projections.store import Store

    serve_as("projector")  # a broker down at its start is waited out, not ready meanwhile

    settings = run_state(ctx).settings
    store = Store.open(projection_dir(settings))
    err.print(
        f"projecting {settings.connection.describe()} into {projection_dir(settings)}; "
        "Ctrl-C stops",
        soft_wrap=True,
    )
    following: list[CheckpointProjector] = []  # ready once the follower caught up
    try:
        async with serving(metrics_port, lambda: any(p.ready for p in following)):
            await _project(settings, store, interrupts, following)
    finally:
        store.close()


async def _project(
    settings: Settings, store: Store, interrupts: Interrupts, following: list[CheckpointProjector]
) -> None:
    from turnlog.kafka.topics import TopicSet
    from turnlog.projections.projector import CheckpointProjector

    # Catching up does not look at the stop flag: a signal during it cancels (Interrupts).
    applied = await caught_up(store, settings)
    projector = CheckpointProjector(
        settings.connection,
        store,
        TopicSet.from_settings(settings),
        broker_timeout=settings.broker_timeout_seconds,
    )
    # Registered before the start (not ``async with``): a signal from here on is a graceful
    # stop, and a cancellation inside the start still closes its client.
    interrupts.on_stop(projector.request_stop)
    following.append(projector)
    try:
        await projector.start()
        await projector.catch_up()  # what came since the first catch-up; marks it ready
        err.print(f"caught up ({applied} records); following", soft_wrap=True)
        await projector.follow()
    finally:
        await projector.stop()


@app.command("replay")
@run_async
async def replay(
    ctx: typer.Context, as_json: JsonOpt = False, broker_timeout: BrokerTimeoutOpt = None
) -> None:
    """Rebuild the store from the topics (earliest offsets) and print its digest."""
    from turnlog.kafka.outage import reach, ride_out
    from turnlog.kafka.topics import TopicSet
    from turnlog.projections.projector import Progress as Step
    from turnlog.projections.projector import rebuild

    settings = run_state(ctx).settings
    # The rebuild's projector retries on its own, for the outage budget: an address that never
    # answered is told apart first, within the first-contact budget.
    await reach(settings, who="replay")
    started = time.monotonic()
    bar = Progress(
        TextColumn("replay"),
        BarColumn(),
        TextColumn("{task.completed:,} records · {task.fields[rate]:,.0f}/s"),
        TimeRemainingColumn(),
        console=err,
        disable=as_json,
    )
    task = bar.add_task("replay", total=None, rate=0.0)

    def report(step: Step) -> None:
        bar.update(
            task, completed=step.applied, total=step.applied + step.remaining, rate=step.rate
        )

    with bar:
        # The rebuild rides out an outage itself; a client that cannot even start is retried
        # here, from the start (a rebuild is its own fresh store).
        digest = await ride_out(
            lambda: rebuild(
                settings.connection,
                projection_dir(settings),
                TopicSet.from_settings(settings),
                on_progress=report,
                broker_timeout=settings.broker_timeout_seconds,
            ),
            settings=settings,
            who="replay",
        )
    elapsed = time.monotonic() - started
    if as_json:
        print_json({"digest": digest, "seconds": round(elapsed, 3)})
    else:
        out.print(f"digest {digest}  ({elapsed:.1f}s)")


@app.command("demo")
@run_async
async def demo(
    ctx: typer.Context,
    broker_timeout: BrokerTimeoutOpt = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Pause → answer → resume on the local broker, with the refusals and a rebuild."""
    setup_logs(ctx, log_level, log_format)
    from turnlog.cli.demo import run_demo

    await run_demo(run_state(ctx).settings, out)
