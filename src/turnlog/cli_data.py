"""The data verbs of ``turnlog``: pause, answer, worker, project, replay, pending, show, tail,
forget and demo. Registered on :data:`turnlog.cli.app` on import."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from turnlog.cli import (
    EXIT_FAILURE,
    EXIT_REFUSED,
    EXIT_USAGE,
    STATE,
    BrokerTimeoutOpt,
    Interrupted,
    Interrupts,
    JsonOpt,
    _fail,
    app,
    err,
    out,
    print_json,
    run_async,
)
from turnlog.errors import StoreError
from turnlog.settings import Settings

# -- shared set-up -------------------------------------------------------------------------------


def _keyring() -> Any:
    import os

    from turnlog.tokens import Keyring

    settings = STATE.settings
    keys_dir = settings.keys_dir if settings.keys_dir.is_dir() else None
    return Keyring.from_env(os.environ, keys_dir=keys_dir)


def _issuer() -> Any:
    from turnlog.tokens import TokenIssuer

    s = STATE.settings
    return TokenIssuer(_keyring(), issuer=s.issuer, audience=s.audience)


def _verifier() -> Any:
    from turnlog.tokens import TokenVerifier

    s = STATE.settings
    return TokenVerifier(
        _keyring(),
        issuer=s.issuer,
        audience=s.audience,
        leeway=timedelta(seconds=s.token_leeway_seconds),
    )


def projection_dir(settings: Settings) -> Path:
    return settings.state_dir / "projection"


def worker_dir(settings: Settings) -> Path:
    return settings.state_dir / "worker"


@contextmanager
def open_for_reading(settings: Settings) -> Iterator[tuple[Any, bool]]:
    """The projection store: read-write when free, else a secondary beside the running writer.

    Yields ``(store, is_writer)``; a writer can be caught up from Kafka before answering.
    """
    from turnlog.projections.store import Store

    path = projection_dir(settings)
    try:
        store = Store.open(path)
    except StoreError:
        scratch = Path(tempfile.mkdtemp(prefix="turnlog-secondary-"))
        try:
            store = Store.open_secondary(path, scratch)
            try:
                store.catch_up()
                yield store, False
            finally:
                store.close()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    try:
        yield store, True
    finally:
        store.close()


async def _caught_up(store: Any) -> int:
    """Apply what the store has not yet applied, riding out an unreachable broker (a retry
    goes on from the offsets the store already holds: each batch was written with them)."""
    from turnlog.kafka.topics import TopicSet
    from turnlog.producers.pauses import ride_out
    from turnlog.projections.projector import CheckpointProjector

    settings = STATE.settings

    async def attempt() -> int:
        projector = CheckpointProjector(
            settings.bootstrap_servers,
            store,
            TopicSet.from_settings(settings),
            broker_timeout=settings.broker_timeout_seconds,
        )
        try:
            await projector.start()
            return await projector.catch_up()
        finally:
            await projector.stop()

    return await ride_out(attempt, settings=settings, who="store catch-up")


def _freshness(store: Any) -> str:
    offsets = store.offsets()
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(offsets.items())) or "nothing applied"


# -- pause / answer ------------------------------------------------------------------------------


@app.command("pause")
@run_async
async def pause(
    checkpoint_file: Annotated[Path, typer.Argument(help="JSON checkpoint (canonical body).")],
    request: Annotated[str, typer.Option(help="The paused request as JSON text.")] = "{}",
    interaction: Annotated[
        str | None, typer.Option(help="Defaults to the checkpoint's name.")
    ] = None,
    ttl: Annotated[int | None, typer.Option(help="Window in seconds (at least 1).")] = None,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Record a pause from a checkpoint file and print its token.

    Everything is checked before Kafka is contacted (exit 2 naming the field): the file, the
    request, the interaction and the window -- a pause is never written without its token.
    """
    from turnlog.errors import PauseInvalid
    from turnlog.producers.pauses import PauseRecorder, read_checkpoint

    try:
        raw = checkpoint_file.read_bytes()
    except OSError as exc:
        raise _fail(f"cannot read checkpoint {checkpoint_file}: {exc}", EXIT_USAGE) from None
    try:
        checkpoint = read_checkpoint(raw)
    except PauseInvalid as exc:
        raise _fail(f"checkpoint {checkpoint_file}: {exc}", EXIT_USAGE) from None
    if ttl is not None and ttl < 1:
        raise _fail(f"--ttl={ttl}: a pause's window is at least 1 second", EXIT_USAGE)
    window = timedelta(seconds=ttl) if ttl is not None else None
    recorder = PauseRecorder(STATE.settings, _issuer())
    try:
        recorder.prepare(checkpoint, request_json=request, interaction=interaction, ttl=window)
    except PauseInvalid as exc:
        option = {"request_json": "--request", "interaction": "--interaction", "ttl": "--ttl"}
        name = option.get(exc.field, f"checkpoint {checkpoint_file}: {exc.field}")
        raise _fail(f"{name}: {exc.detail}", EXIT_USAGE) from None
    try:
        recorded = await recorder.record(
            checkpoint, request_json=request, interaction=interaction, ttl=window
        )
    finally:
        await recorder.close()
    data = {
        "token": recorded.token,
        "token_id": recorded.token_id,
        "thread_id": recorded.thread_id,
        "partition": recorded.partition,
        "offset": recorded.offset,
        "expires_at": recorded.pause.expires_at.isoformat(),
    }
    if as_json:
        print_json(data)
    else:
        out.print(recorded.token, soft_wrap=True)


@app.command("answer")
@run_async
async def answer(
    token: Annotated[str, typer.Argument(help="The pause token.")],
    response: Annotated[str, typer.Option(help="The response, JSON.")],
    scope: Annotated[str | None, typer.Option(help="Tenant scope hash.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id.")] = None,
    run: Annotated[str | None, typer.Option(help="Run id.")] = None,
    call: Annotated[str | None, typer.Option(help="The answered call id.")] = None,
    answer_id: Annotated[
        str | None, typer.Option(help="Idempotency id (retries reuse it).")
    ] = None,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Publish an answer; a bad token, a missing axis, a response nested too deeply or an answer
    over TURNLOG_MAX_ANSWER_BYTES is refused before publishing (exit 3)."""
    from turnlog.producers.answers import AnswerPublisher

    try:
        json.loads(response)
    except RecursionError:
        pass  # valid or not, too deep to read: the pre-check refuses it by name (exit 3)
    except ValueError as exc:
        raise _fail(f"--response must be JSON: {exc}", EXIT_USAGE) from None
    publisher = AnswerPublisher(STATE.settings, _verifier())
    candidate = publisher.build(
        token, response, scope_hash=scope, session_id=session, run_id=run, call_id=call,
        answer_id=answer_id,
    )  # fmt: skip
    publisher.precheck(candidate)  # raises Refused before anything touches Kafka
    async with publisher:
        sent = await publisher.publish_unchecked(candidate)
    data = {"answer_id": sent.answer_id, "partition": sent.partition, "offset": sent.offset}
    if as_json:
        print_json(data)
    else:
        out.print(
            f"published answer {sent.answer_id} to partition {sent.partition} @ {sent.offset}"
        )


# -- long-running verbs --------------------------------------------------------------------------


@app.command("worker")
@run_async
async def worker(broker_timeout: BrokerTimeoutOpt = None) -> None:
    """Run the resume worker until SIGTERM/SIGINT (finishes its batch, commits, leaves)."""
    interrupts = Interrupts()
    from turnlog.consumers.worker import ResumeWorker
    from turnlog.contracts.interactions import default_interactions
    from turnlog.errors import BrokerUnavailable
    from turnlog.projections.store import Store

    settings = STATE.settings
    store = Store.open(worker_dir(settings))
    try:
        resume = ResumeWorker(
            settings, store=store, verifier=_verifier(), interactions=default_interactions()
        )
        interrupts.on_stop(resume.request_stop)
        err.print(
            f"worker {settings.application_id} on {settings.bootstrap_servers}; Ctrl-C stops",
            soft_wrap=True,
        )
        try:
            await resume.run()
        except BrokerUnavailable:
            if interrupts.signal is None:
                raise
            raise Interrupted from None  # stopped while it waited for the broker
        s = resume.stats
        err.print(
            f"stopped: resumed {s.resumed}, rejected {s.rejected}, expired {s.expired}",
            soft_wrap=True,
        )
    finally:
        store.close()


@app.command("project")
@run_async
async def project(broker_timeout: BrokerTimeoutOpt = None) -> None:
    """Follow pauses and consumptions into the local store until SIGTERM/SIGINT."""
    interrupts = Interrupts()
    from turnlog.kafka.topics import TopicSet
    from turnlog.projections.projector import CheckpointProjector
    from turnlog.projections.store import Store

    settings = STATE.settings
    store = Store.open(projection_dir(settings))
    err.print(f"projecting into {projection_dir(settings)}; Ctrl-C stops", soft_wrap=True)
    try:
        # Catching up does not look at the stop flag: a signal during it cancels (Interrupts).
        applied = await _caught_up(store)
        projector = CheckpointProjector(
            settings.bootstrap_servers,
            store,
            TopicSet.from_settings(settings),
            broker_timeout=settings.broker_timeout_seconds,
        )
        # Registered before the start (not ``async with``): a signal from here on is a graceful
        # stop, and a cancellation inside the start still closes its client.
        interrupts.on_stop(projector.request_stop)
        try:
            await projector.start()
            err.print(f"caught up ({applied} records); following", soft_wrap=True)
            await projector.follow()
        finally:
            await projector.stop()
    finally:
        store.close()


@app.command("replay")
@run_async
async def replay(as_json: JsonOpt = False, broker_timeout: BrokerTimeoutOpt = None) -> None:
    """Rebuild the store from the topics (earliest offsets) and print its digest."""
    from turnlog.kafka.topics import TopicSet
    from turnlog.producers.pauses import ride_out
    from turnlog.projections.projector import Progress as Step
    from turnlog.projections.projector import rebuild

    settings = STATE.settings
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
                settings.bootstrap_servers,
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


# -- queries -------------------------------------------------------------------------------------


@app.command("pending")
@run_async
async def pending(as_json: JsonOpt = False, broker_timeout: BrokerTimeoutOpt = None) -> None:
    """Pauses waiting for an answer (unconsumed, window open)."""
    from turnlog.clock import utc_now

    with open_for_reading(STATE.settings) as (store, writer):
        if writer:
            await _caught_up(store)
        now_ms = int(utc_now().timestamp() * 1000)
        rows = [
            {"token_id": p.token_id, "thread_id": p.thread_id, "expires_at_ms": p.expires_at_ms}
            for p in store.pending(now_ms)
        ]
        fresh = _freshness(store)
    if as_json:
        print_json({"pending": rows, "as_of": fresh})
        return
    table = Table("thread", "token id", "expires in")
    for row in rows:
        table.add_row(
            row["thread_id"], row["token_id"], f"{(row['expires_at_ms'] - now_ms) / 1000:.0f}s"
        )
    out.print(table)
    err.print(f"as of {fresh}", soft_wrap=True)


@app.command("show")
@run_async
async def show(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """The latest checkpoint of a thread and its history (oldest first). Exit 1 if unknown."""
    from turnlog.contracts.events import PauseRecorded
    from turnlog.wire.codec import decode

    with open_for_reading(STATE.settings) as (store, writer):
        if writer:
            await _caught_up(store)
        history = [decode(raw, PauseRecorded) for raw in store.list_checkpoints(thread)]
        spent = {p.token_id: store.ledger(p.token_id) for p in history}
        fresh = _freshness(store)
    if not history:
        raise _fail(f"no checkpoint recorded for thread {thread!r} (as of {fresh})", EXIT_FAILURE)
    rows = [
        {
            "sequence": p.checkpoint.sequence,
            "checkpoint_id": p.checkpoint.checkpoint_id,
            "token_id": p.token_id,
            "interaction": p.response_schema,
            "messages": len(p.checkpoint.messages),
            "state": spent[p.token_id].outcome if spent[p.token_id] else "pending",
        }
        for p in history
    ]
    if as_json:
        print_json({"thread_id": thread, "latest": rows[-1], "history": rows, "as_of": fresh})
        return
    table = Table("seq", "checkpoint", "interaction", "messages", "state", title=f"thread {thread}")
    for row in rows:
        table.add_row(
            *(
                str(row[k])
                for k in ("sequence", "checkpoint_id", "interaction", "messages", "state")
            )
        )
    out.print(table)
    err.print(f"as of {fresh}", soft_wrap=True)


@app.command("tail")
@run_async
async def tail(
    stream: Annotated[str, typer.Argument(help="resumed | rejections")],
    from_beginning: Annotated[bool, typer.Option(help="Start at the earliest offset.")] = False,
    max_records: Annotated[int | None, typer.Option("--max", help="Stop after N records.")] = None,
    idle: Annotated[float | None, typer.Option(help="Stop after N idle seconds.")] = None,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Print records of the resumed or rejections stream (read_committed)."""
    from aiokafka import AIOKafkaConsumer

    from turnlog.errors import DecodeError
    from turnlog.kafka.topics import TopicSet
    from turnlog.producers.pauses import ride_out
    from turnlog.wire.codec import decode
    from turnlog.wire.records import to_record

    topics = TopicSet.from_settings(STATE.settings)
    names = {"resumed": topics.resumed, "rejections": topics.rejections}
    if stream not in names:
        raise _fail(f"tail takes 'resumed' or 'rejections', not {stream!r}", EXIT_USAGE)

    async def started() -> Any:
        consumer = AIOKafkaConsumer(
            names[stream],
            bootstrap_servers=STATE.settings.bootstrap_servers,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
        )
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        return consumer

    consumer = await ride_out(started, settings=STATE.settings, who="tail")
    seen = 0
    try:
        while max_records is None or seen < max_records:
            batch = await consumer.getmany(timeout_ms=int((idle or 3600) * 1000), max_records=1)
            if not batch:
                break
            for records in batch.values():
                for record in records:
                    seen += 1
                    try:
                        event = decode(record.value)
                    except DecodeError as exc:
                        err.print(f"[yellow]{record.partition}@{record.offset}: {exc}[/yellow]")
                        continue
                    data = {"type": type(event).__name__, **to_record(event)}
                    if as_json:
                        print_json(data)
                    else:
                        _print_event(data)
    finally:
        await consumer.stop()


def _print_event(data: dict[str, Any]) -> None:
    kind = data["type"]
    if kind == "AnswerRejected":
        out.print(
            f"[red]rejected[/red] answer {data['answer_id']} — {data['reason']} "
            f"(step {data['step']}): {data['detail']}"
        )
    elif kind == "TurnResumed":
        out.print(
            f"[green]resumed[/green] thread {data['thread_id']} run {data['run_id']} "
            f"— {len(data['history'])} messages"
        )
    else:
        out.print(f"{kind} {json.dumps(data, default=str)}")


@app.command("forget")
@run_async
async def forget(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Write tombstones for every key of a thread on the compacted topics (exit 1, saying how
    many, if any tombstone was not delivered: run it again)."""
    from turnlog.forget import forget_thread
    from turnlog.kafka.topics import TopicSet

    if not yes and not typer.confirm(f"forget every fact of thread {thread!r}?"):
        raise typer.Exit(EXIT_REFUSED)
    counts = await forget_thread(STATE.settings, TopicSet.from_settings(STATE.settings), thread)
    if as_json:
        print_json({"thread_id": thread, "tombstones": counts})
    else:
        for topic, n in counts.items():
            out.print(f"{n} tombstone(s) on {topic}")


@app.command("demo")
@run_async
async def demo(broker_timeout: BrokerTimeoutOpt = None) -> None:
    """Pause → answer → resume on the local broker, with the refusals and a rebuild."""
    from turnlog.demo import run_demo

    await run_demo(STATE.settings, out)
