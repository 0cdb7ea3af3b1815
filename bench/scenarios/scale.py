"""Scale: how each cost grows with the number of pending pauses (10k, 100k, 1M by default).

Per size (``--scale-sizes``), a fresh twelve-partition deployment gets N pending 20-message pauses
(one day's window, so none is due), written fast: one pause is encoded once and each record is
that template with its thread id, token id and event id replaced in place (same lengths, so the
Avro stays valid), sent by a plain idempotent producer in big batches. turnlog's producers do
not compress, and neither does this one. Then, each beside a baseline from the same run:

- **bytes** on the topics (the partitions' ``.log`` files when ``--broker-log-dir`` is given,
  beside the sum of the records' keys and values) and in the worker's store (its RocksDB
  directory, beside a RocksDB holding the same records' keys and values);
- **rebuild** records/s (:func:`turnlog.projections.projector.rebuild`), beside a raw consumer
  reading the same partitions, and beside **consume + write**: that consumer also putting every
  record's key and value into RocksDB (rocksdict, raw mode, batches of the rebuild's size, the
  write-ahead log off as in the rebuild's bulk store) -- the least a rebuild must do;
- the worker's **full restore** (start -> every partition owned, from an empty state directory)
  and its peak RSS (VmHWM) then, beside the raw loop joining, fencing and reading the same
  partitions; and **ready from stored offsets** (the same directory again), beside the raw loop
  joining and fencing;
- the **expiry sweep's cost per pass**: the worker's own timing of ``_expire`` (the catch-up read
  of new pauses, what is due by deadline, the ledger rows to retire) over the seconds it runs
  after the second take, beside a raw consumer's catch-up read of the same partitions from their
  ends;
- ``turnlog pending`` and ``turnlog status`` (the library calls they make on the store:
  ``open_pauses`` and ``pending_summary``) and the inbox's first page (``pending_for``, its
  list query), on the worker's store once it stopped, beside a scan of every value of the
  baseline RocksDB (pending, status) and a read of its first page's worth of values (inbox);
- the inbox's **live update**: one pending pause answered (written to that store), the bytes of
  the live stream's next event and the time to make it (``LiveList.step``), beside the event
  the stream sent before (every id pending for the viewer, at most 2,000) and the first page.

The scenario prints the growth factor of every metric between neighbouring sizes with what it
should do: flat (the work is the same whatever is pending) or linear (it holds or reads it all).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import rocksdict
from aiokafka import TopicPartition
from rich.console import Console

from bench.common import (
    Deployment,
    Out,
    consume_and_write,
    create_topics,
    delete_topics,
    dir_bytes,
    group_options,
    log_bytes,
    make_deployment,
    pause_for,
    produce,
    raw_read_to_end,
    reader_consumer,
    scenario_topics,
    unique_prefix,
)
from bench.growth import Expect, Series, growth_table, ratio_table
from bench.measure import REPO, Stopwatch, median, memory_kb
from bench.report import Row
from bench.scenarios import Context, worker_config
from bench.workerproc import WorkerProcess
from turnlog.inbox.views import LIST_LIMIT
from turnlog.kafka.partitioning import partition_for, pause_key
from turnlog.settings import Settings
from turnlog.wire.codec import encode

PARTITIONS = 12
#: How long the worker runs after its second take, sweeping every ``SWEEP_INTERVAL`` seconds.
SWEEP_SECONDS = 4.0
SWEEP_INTERVAL = 0.25

THREAD_MARK = "QZQZQZQZQZ"  # ten characters: thread ids are thread-0000000042
TOKEN_MARK = "f0e1d2c3b4a59687" * 2  # 32 hex digits, as a uuid4().hex
EVENT_MARK = "9687a5b4c3d2e1f0" * 2


@dataclasses.dataclass
class Template:
    key: bytes
    value: bytes

    @classmethod
    def make(cls, messages: int) -> Template:
        thread = f"thread-{THREAD_MARK}"
        pause = dataclasses.replace(
            pause_for(thread, messages=messages), token_id=TOKEN_MARK, event_id=EVENT_MARK
        )
        value = encode(pause)
        # The thread id is in the checkpoint's thread, run, session and interrupt ids.
        counts = (value.count(THREAD_MARK.encode()), value.count(TOKEN_MARK.encode()))
        if counts != (4, 1) or value.count(EVENT_MARK.encode()) != 1:
            raise RuntimeError(f"the template's marks are not where expected: {counts}")
        return cls(pause_key(thread, "cp-1"), value)

    def records(self, n: int, partitions: int) -> Iterator[Out]:
        mark, token, event = THREAD_MARK.encode(), TOKEN_MARK.encode(), EVENT_MARK.encode()
        for i in range(n):
            digits = f"{i:010d}"
            tid = digits.encode()
            value = self.value.replace(mark, tid).replace(token, f"{i:032x}".encode())
            yield (
                partition_for(f"thread-{digits}", partitions),
                self.key.replace(mark, tid),
                value.replace(event, f"{i:031x}e".encode()),
            )


#: The metrics of one size, in the order they are printed: (label, unit, expected growth).
METRICS: dict[str, tuple[str, Expect]] = {
    "topic bytes": ("MB", "linear"),
    "store bytes": ("MB", "linear"),
    "rebuild": ("records/s", "flat"),
    "rebuild vs consume + write": ("records/s", "flat"),
    "full restore": ("s", "linear"),
    "peak RSS after the full restore": ("MB", "flat"),
    "ready from stored offsets": ("s", "flat"),
    "ready after the owner's SIGKILL, from a standby": ("s", "flat"),
    "standby's take of the dead owner's partitions": ("s", "flat"),
    "expiry sweep, one pass": ("ms", "flat"),
    "turnlog pending": ("s", "flat"),  # its first page, through the waiting index
    "turnlog status": ("s", "flat"),
    # The CLI's first page on a machine that never projected the topics: it reads them first.
    "turnlog pending from an empty state dir": ("s", "linear"),
    "inbox first page": ("ms", "flat"),
    "inbox live update": ("bytes", "flat"),
    "inbox live update, one step": ("ms", "flat"),
}


async def run(ctx: Context) -> list[Row]:
    sizes: list[int] = ctx.options.scale_sizes
    found: dict[int, dict[str, dict[str, Any]]] = {}
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        for index, n in enumerate(sizes):
            prefix = unique_prefix(ctx.run_id, "scale", index)
            prefixes.append(prefix)
            try:
                found[n] = await _one_size(ctx, prefix, n)
            finally:
                await delete_topics(ctx.bootstrap, prefix)  # frees the disk before the next size
    rows = [
        Row(
            scenario="scale",
            metric=f"{metric} @ {n:,} pending",
            unit=unit,
            samples=found[n][metric]["samples"],
            baseline_samples=found[n][metric].get("baseline", []),
            baseline_name=found[n][metric].get("baseline_name", ""),
            notes=found[n][metric].get("notes", ""),
        )
        for n in sizes
        for metric, (unit, _) in METRICS.items()
        if metric in found[n]
    ]
    table = growth_table(
        sizes,
        [
            Series(metric, unit, expect, [median(found[n][metric]["samples"]) for n in sizes])
            for metric, (unit, expect) in METRICS.items()
            if all(metric in found[n] for n in sizes)
        ],
    )
    ratios = ratio_table(
        sizes,
        {
            f"{metric} ({found[sizes[0]][metric]['baseline_name']})": [
                _ratio(found[n][metric]) for n in sizes
            ]
            for metric in METRICS
            if all(metric in found[n] and found[n][metric].get("baseline") for n in sizes)
        },
    )
    console = Console(width=None)
    console.print("\nscale: growth between sizes (medians)", highlight=False)
    console.print(table, markup=False, highlight=False, soft_wrap=True)
    console.print("\nscale: ratio to the same run's baseline, by size", highlight=False)
    console.print(ratios, markup=False, highlight=False, soft_wrap=True)
    if rows:
        rows[0].details["growth_markdown"] = table
        rows[0].details["ratio_markdown"] = ratios
        rows[0].details["sizes"] = {str(n): found[n] for n in sizes}
    return rows


def _ratio(entry: dict[str, Any]) -> float | None:
    value, baseline = median(entry["samples"]), median(entry.get("baseline", []))
    if value is None or not baseline:
        return None
    return value / baseline


async def _one_size(ctx: Context, prefix: str, n: int) -> dict[str, dict[str, Any]]:
    opts = ctx.options
    out: dict[str, dict[str, Any]] = {}
    dep = make_deployment(
        ctx.bootstrap, prefix, partitions=PARTITIONS, commit_interval_ms=opts.commit_interval_ms
    )
    await create_topics(dep)
    template = Template.make(opts.messages)
    sent = {"bytes": 0}

    def counted() -> Iterator[Out]:
        for record in template.records(n, PARTITIONS):
            sent["bytes"] += len(record[1]) + len(record[2])
            yield record

    watch = Stopwatch()
    await produce(ctx.bootstrap, dep.topics.pauses, counted(), transactional=False)
    ctx.log(f"{n:,}: produced {sent['bytes'] / 1e6:,.0f} MB of pauses in {watch.seconds:.1f}s")
    record_mb = sent["bytes"] / 1e6
    log_mb = (
        log_bytes(opts.broker_log_dir, _topics(dep), PARTITIONS) / 1e6
        if opts.broker_log_dir
        else None
    )
    out["topic bytes"] = (
        {
            "samples": [log_mb],
            "baseline": [record_mb],
            "baseline_name": "sum of keys and values",
            "notes": "the partitions' .log files on the broker",
        }
        if log_mb is not None
        else {"samples": [record_mb], "notes": "sum of the records' keys and values"}
    )
    reps = ctx.repeats if n <= 100_000 else 1
    tps = [
        TopicPartition(topic, p)
        for topic in (dep.topics.pauses, dep.topics.consumptions)
        for p in range(PARTITIONS)
    ]
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-scale-") as scratch:
        root = Path(scratch)
        raw_db = root / "raw-db"
        rates: dict[str, list[float]] = {"rebuild": [], "raw": [], "write": []}
        for k in range(reps):
            for mode in ("raw", "write", "rebuild") if k % 2 == 0 else ("rebuild", "write", "raw"):
                gc.collect()
                if mode == "write":
                    shutil.rmtree(raw_db, ignore_errors=True)
                watch = Stopwatch()
                if mode == "raw":
                    count = await _raw_read(ctx.bootstrap, tps)
                elif mode == "write":
                    count = await consume_and_write(ctx.bootstrap, tps, raw_db)
                else:
                    from turnlog.projections.projector import rebuild

                    await rebuild(ctx.bootstrap, root / "rebuilt", dep.topics)
                    count = n
                    shutil.rmtree(root / "rebuilt", ignore_errors=True)
                seconds = watch.seconds
                if count != n:
                    ctx.log(f"WARNING: {mode} read {count:,} records, expected {n:,}")
                rates[mode].append(count / seconds)
                ctx.log(f"{n:,}: {mode:7s} {count / seconds:9,.0f} records/s")
        out["rebuild"] = {
            "samples": rates["rebuild"],
            "baseline": rates["raw"],
            "baseline_name": "raw consumer",
        }
        out["rebuild vs consume + write"] = {
            "samples": rates["rebuild"],
            "baseline": rates["write"],
            "baseline_name": "consume + RocksDB write of the same bytes",
            "notes": "the least a rebuild must do; target ≥0.5x",
        }

        state = root / "store"
        full = await _take(ctx, dep, "turnlog", state)
        raw_full = await _take(ctx, dep, "raw", None, restore=True)
        out["full restore"] = {
            "samples": [full["ready_s"]],
            "baseline": [raw_full["ready_s"]],
            "baseline_name": "raw join+fence+read",
            "notes": f"restored {full['restored']:,} records",
        }
        out["peak RSS after the full restore"] = {
            "samples": [full["hwm_mb"]],
            "baseline": [raw_full["hwm_mb"]],
            "baseline_name": "raw loop, same read",
        }
        store_mb = dir_bytes(state) / 1e6
        out["store bytes"] = {
            "samples": [store_mb],
            "baseline": [dir_bytes(raw_db) / 1e6],
            "baseline_name": "RocksDB of the same keys and values",
        }
        stored = await _take(ctx, dep, "turnlog", state, linger=SWEEP_SECONDS)
        raw_stored = await _take(ctx, dep, "raw", None)
        out["ready from stored offsets"] = {
            "samples": [stored["ready_s"]],
            "baseline": [raw_stored["ready_s"]],
            "baseline_name": "raw join+fence",
            "notes": f"restored {stored['restored']:,} records",
        }
        sweep = stored["timings"].get("sweep", {})
        catch_up = [t * 1000 for t in await _raw_end_offsets(ctx.bootstrap, tps)]
        out["expiry sweep, one pass"] = {
            "samples": [sweep.get("p50_ms", 0.0)],
            "baseline": catch_up,
            "baseline_name": "raw end_offsets of the same partitions",
            "notes": (
                f"the worker's own timing, {sweep.get('calls', 0)} passes, p99 "
                f"{sweep.get('p99_ms', 0.0):.1f} ms"
            ),
        }
        out.update(await _queries(ctx, state, raw_db, ctx.repeats, n))
        fresh = await _cli_pending(ctx, dep, root / "cli-state", min(n, PENDING_PAGE))
        out["turnlog pending from an empty state dir"] = {
            "samples": [fresh["first"]],
            "baseline": fresh["again"],
            "baseline_name": "the same command on the store it left",
            "notes": (
                "`turnlog pending --json` in a fresh process, its first page: it reads the "
                f"pauses and consumptions topics into a store of its own first ({fresh['said']})"
            ),
        }
        took = await _standby_takeover(ctx, dep, state, root / "standby")
        out["ready after the owner's SIGKILL, from a standby"] = {
            "samples": [took["ready_s"]],
            "baseline": [full["ready_s"]],
            "baseline_name": "full restore (above)",
            "notes": (
                f"the group's session timeout ({took['session_s']:g} s, "
                f"TURNLOG_SESSION_TIMEOUT_MS; heartbeat {took['heartbeat_ms']} ms) is in it: the "
                "time to notice a dead member"
                + (
                    f"; the owner had dropped out of the group {took['dropped']} time(s) before"
                    if took["dropped"]
                    else ""
                )
            ),
        }
        out["standby's take of the dead owner's partitions"] = {
            "samples": [took["take_s"]],
            "baseline": [stored["ready_s"]],
            "baseline_name": "ready from stored offsets (above)",
            "notes": (
                f"restored {took['restored']:,} records of those partitions "
                f"(full restore: {full['restored']:,} of all); its copies took "
                f"{took['warm_s']:.1f}s to warm from empty"
            ),
        }
    return out


async def _standby_takeover(
    ctx: Context, dep: Deployment, owner_state: Path, standby_state: Path
) -> dict[str, Any]:
    """Two workers with ``--standby 1``: the owner on the store the takes above left, the other
    from an empty directory. The group splits the partitions; the newcomer restores its half
    and keeps warm copies of the owner's. Once they are current, the owner is SIGKILLed, and
    the newcomer is timed to owning every partition, and its take of the dead owner's."""
    timings = group_options()  # the workers read the same variables (bench/workerproc.py)
    session_ms = timings["session_timeout_ms"]

    def config(state: Path) -> dict[str, Any]:
        made = worker_config(
            ctx, dep, "turnlog", app_id=dep.settings.application_id, state_dir=state
        )
        # The session timeout is the soonest a SIGKILLed member's partitions move: the
        # workers take it from TURNLOG_SESSION_TIMEOUT_MS, as `turnlog worker` does (10 s by
        # default; under the broker's group.min.session.timeout.ms, 6 s, needs that lowered).
        made.update(standbys=1, expiry_interval=SWEEP_INTERVAL)
        return made

    owner, standby = WorkerProcess(config(owner_state)), WorkerProcess(config(standby_state))
    try:
        await owner.start()
        await owner.wait_event("owned", 3600)
        await standby.start()
        began = (await standby.wait_event("start", 120))["t"]
        while True:  # the first time its copies of the owner's half stand at the log's end
            current = await standby.wait_event("standby_current", 3600)
            if current["standby"]:
                break
            standby.events.remove(current)
        victim = current["standby"]
        # Owning every partition before the kill means the owner dropped out of the group once
        # (a heartbeat missed for a whole session timeout): said in the notes.
        dropped = sum(
            1
            for e in standby.events
            if e["event"] == "owns" and e["count"] == dep.settings.partitions
        )
        killed = time.monotonic()
        await owner.kill()
        while True:  # the first time it owns every partition after the kill
            owned = await standby.wait_event("owns", 3600, count=dep.settings.partitions)
            if owned["t"] >= killed:
                break
            standby.events.remove(owned)
        ended = await standby.stop()
    finally:
        await owner.stop()
        await standby.stop()
    take = ((ended or {}).get("stats") or {}).get("takes", [{}])[-1]
    records = {int(p): count for p, count in take.get("records", {}).items()}
    return {
        "ready_s": owned["t"] - killed,
        "take_s": float(take.get("seconds", 0.0)),
        "restored": sum(records.get(p, 0) for p in victim),
        "warm_s": current["t"] - began,
        "session_s": session_ms / 1000,
        "heartbeat_ms": Settings(**timings).heartbeat_ms,
        "dropped": dropped,
    }


async def _take(
    ctx: Context,
    dep: Deployment,
    mode: str,
    state: Path | None,
    *,
    restore: bool = False,
    linger: float = 0.0,
) -> dict[str, Any]:
    """Start a worker (turnlog's or the raw loop) and time it to owning every partition."""
    app_id = dep.settings.application_id if mode == "turnlog" else f"{dep.prefix}raw"
    config = worker_config(ctx, dep, mode, app_id=app_id, state_dir=state, restore=restore)
    config.update(timings=True, expiry_interval=SWEEP_INTERVAL)
    proc = WorkerProcess(config)
    await proc.start()
    try:
        start = await proc.wait_event("start", 120)
        owned = await proc.wait_event("owned", 3600)
        if linger:
            await asyncio.sleep(linger)  # the worker sweeps meanwhile; its timings say how long
    finally:
        ended = await proc.stop()
    return {
        "ready_s": owned["t"] - start["t"],
        "restored": owned.get("restored", 0),
        "hwm_mb": float(owned.get("VmHWM", 0)) / 1024,
        "timings": (ended or {}).get("timings", {}),
    }


async def _raw_read(bootstrap: str, tps: list[TopicPartition]) -> int:
    consumer = reader_consumer(bootstrap, "bench-scale-raw")
    await consumer.start()
    try:
        return await raw_read_to_end(consumer, tps)
    finally:
        await consumer.stop()


async def _raw_end_offsets(bootstrap: str, tps: list[TopicPartition]) -> list[float]:
    """Seconds of one ``end_offsets`` request for ``tps`` (after a first one warmed the
    connection), five times: how a pass that finds nothing new learns it is at the ends."""
    consumer = reader_consumer(bootstrap, "bench-scale-ends")
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.end_offsets(tps)
        found = []
        for _ in range(5):
            began = time.perf_counter()
            await consumer.end_offsets(tps)
            found.append(time.perf_counter() - began)
        return found
    finally:
        await consumer.stop()


#: ``turnlog pending``'s default page.
PENDING_PAGE = 50

#: The address space the query child may use: ``open_pauses`` and the inbox's list query hold
#: every pending pause decoded at once, which at a million is more than a shared machine has.
QUERY_MEMORY_LIMIT = 6 * 1024**3


async def _cli_pending(ctx: Context, dep: Deployment, state: Path, page: int) -> dict[str, Any]:
    """``turnlog pending --json`` as an operator runs it on a new machine: a fresh process and
    an empty state directory (its first page comes after it projected the topics), then the
    same command again on the store the first left (``ctx.repeats`` times)."""
    shutil.rmtree(state, ignore_errors=True)
    env = {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": ctx.bootstrap,
        "TURNLOG_TOPIC_PREFIX": dep.settings.topic_prefix,
        "TURNLOG_PARTITIONS": str(dep.settings.partitions),
        "TURNLOG_STATE_DIR": str(state),
    }

    async def once() -> tuple[float, str]:
        watch = Stopwatch()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "turnlog", "pending", "--json", "--limit", str(page),
            cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await proc.communicate()
        seconds = watch.seconds
        shown = json.loads(stdout or b"{}").get("pending", [])
        if proc.returncode != 0 or len(shown) != page:
            raise RuntimeError(f"turnlog pending: {proc.returncode}, {len(shown)} rows: {stderr!r}")
        return seconds, stderr.decode().strip().splitlines()[-1] if stderr.strip() else ""

    first, said = await once()
    again = [(await once())[0] for _ in range(ctx.repeats)]
    shutil.rmtree(state, ignore_errors=True)
    ctx.log(f"pending from an empty state dir {first:.2f}s, then {median(again) or 0:.2f}s")
    return {"first": first, "again": again, "said": said or "it said nothing"}


async def _queries(
    ctx: Context, state: Path, raw_db: Path, reps: int, n: int
) -> dict[str, dict[str, Any]]:
    """pending, status and the inbox's first page on the worker's store, beside raw scans: in a
    child process whose address space is capped at :data:`QUERY_MEMORY_LIMIT`, so a query that
    would hold more fails there (reported) instead of taking the machine's memory."""
    config = {"state": str(state), "raw_db": str(raw_db), "reps": reps, "n": n}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.scenarios.scale",
        json.dumps(config),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    stdout, _ = await proc.communicate()
    lines = [line for line in stdout.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:  # e.g. killed by the allocator inside RocksDB
        why = f"the query process ended with {proc.returncode}"
        found: dict[str, Any] = {
            "times": {k: [] for k in ("status", "inbox", "pending")},
            "base": {k: [] for k in ("scan", "keys", "page")},
            "failed": {k: why for k in ("status", "inbox", "pending", "live")},
            "hwm_mb": {},
            "live": {"bytes": [], "ms": [], "old_bytes": [], "snapshot_bytes": 0},
        }
    else:
        found = json.loads(lines[-1])
    times, base, memory = found["times"], found["base"], found["hwm_mb"]
    for name, problem in found["failed"].items():
        ctx.log(f"{n:,}: {name} failed: {problem}")
    ctx.log(
        f"{n:,}: pending {median(times['pending']) or 0:.2f}s, "
        f"status {median(times['status']) or 0:.2f}s, "
        f"inbox first page {median(times['inbox']) or 0:.1f} ms; peak RSS after status "
        f"{memory.get('status', 0):.0f} MB, inbox {memory.get('inbox', 0):.0f} MB, "
        f"pending {memory.get('pending', 0):.0f} MB"
    )

    def note(name: str, words: str) -> str:
        failed = found["failed"].get(name)
        if failed:
            return f"{words}; FAILED: {failed}"
        if name not in memory:  # measured after the others: their peak, not its own
            return words
        return f"{words}; the query process's peak RSS {memory.get(name, 0):,.0f} MB"

    return {
        "turnlog pending": {
            "samples": times["pending"],
            "baseline": base["scan"],
            "baseline_name": "raw RocksDB scan of every value",
            "notes": note("pending", f"pending_page: the first page of {PENDING_PAGE}"),
        },
        "turnlog status": {
            "samples": times["status"],
            "baseline": base["keys"],
            "baseline_name": "raw RocksDB scan of every key",
            "notes": note("status", "pending_summary: the count and the oldest"),
        },
        "inbox first page": {
            "samples": times["inbox"],
            "baseline": base["page"],
            "baseline_name": f"raw RocksDB read of {LIST_LIMIT} values",
            "notes": note("inbox", f"pending_for: the first {LIST_LIMIT} rows, oldest first"),
        },
        "inbox live update": {
            "samples": found["live"]["bytes"],
            "baseline": found["live"]["old_bytes"],
            "baseline_name": f"every pending id again, as before (at most {OLD_LIVE:,})",
            "notes": note(
                "live",
                "one pending pause answered: the stream's next event, on the wire; its first "
                f"snapshot {found['live']['snapshot_bytes']:,} bytes",
            ),
        },
        "inbox live update, one step": {
            "samples": found["live"]["ms"],
            "baseline": times["inbox"],
            "baseline_name": "the inbox's first page",
            "notes": note("live", "LiveList.step: the changes feed read, the window check"),
        },
    }


def _query_child(config: dict[str, Any]) -> dict[str, Any]:
    from turnlog.clock import utc_now
    from turnlog.inbox.auth import Viewer
    from turnlog.inbox.views import pending_for
    from turnlog.projections.pending import pending_summary
    from turnlog.projections.store import Store

    resource.setrlimit(resource.RLIMIT_AS, (QUERY_MEMORY_LIMIT, QUERY_MEMORY_LIMIT))
    n, reps = config["n"], config["reps"]
    viewer = Viewer(name="bench", scopes=frozenset({"tenant-a"}))
    times: dict[str, list[float]] = {k: [] for k in ("status", "inbox", "pending")}
    base: dict[str, list[float]] = {k: [] for k in ("scan", "keys", "page")}
    failed: dict[str, str] = {}
    hwm: dict[str, float] = {}
    queries: dict[str, Any] = {
        "status": lambda now: pending_summary(store, now).count,
        "inbox": lambda now: len(pending_for(store, viewer, now)),
        # turnlog pending's first page (its default --limit), through the waiting index
        "pending": lambda now: len(
            store.pending_page(int(now.timestamp() * 1000), limit=PENDING_PAGE).items
        ),
    }
    expected = {"status": n, "inbox": min(n, LIST_LIMIT), "pending": min(n, PENDING_PAGE)}
    store = Store.open(config["state"])
    db = rocksdict.Rdict(config["raw_db"], rocksdict.Options(raw_mode=True))
    try:
        for name, query in queries.items():  # lightest first: the peak after each is its own
            for _ in range(reps):
                if name in failed:
                    break
                gc.collect()
                began = time.perf_counter()
                try:
                    count = query(utc_now())
                except MemoryError:
                    failed[name] = f"out of memory at {QUERY_MEMORY_LIMIT / 1024**3:.0f} GB"
                    break
                elapsed = time.perf_counter() - began
                times[name].append(elapsed * 1000 if name == "inbox" else elapsed)
                if count != expected[name]:
                    failed[name] = f"found {count:,}, expected {expected[name]:,}"
            gc.collect()
            hwm[name] = memory_kb().get("VmHWM", 0) / 1024
        live = _live_updates(store, viewer, reps, failed)
        for _ in range(reps):
            began = time.perf_counter()
            values = sum(len(v) for v in db.values())
            base["scan"].append(time.perf_counter() - began)
            began = time.perf_counter()
            keys = sum(1 for _ in db.keys())  # noqa: SIM118 - a raw Rdict cannot be iterated
            base["keys"].append(time.perf_counter() - began)
            began = time.perf_counter()
            shown = sum(len(v) for v in itertools.islice(db.values(), LIST_LIMIT))
            base["page"].append((time.perf_counter() - began) * 1000)
            if keys != n or not values or not shown:
                failed["raw"] = f"the raw store holds {keys:,} keys, expected {n:,}"
    finally:
        store.close()
        db.close()
    return {"times": times, "base": base, "failed": failed, "hwm_mb": hwm, "live": live}


#: The most ids the inbox's live stream sent at each change before it sent changes.
OLD_LIVE = 2000


class _Source:
    """What the inbox's live stream reads (:class:`turnlog.inbox.service.LiveSource`), over the
    stopped worker's store rather than a running inbox's."""

    def __init__(self, store: Any) -> None:
        from turnlog.clock import utc_now

        self.store, self.clock = store, utc_now

    def changes(self, since: int) -> Any:
        return self.store.changes(since)

    def pause(self, viewer: Any, token_id: str) -> None:
        return None  # a list's stream never asks


def _live_updates(store: Any, viewer: Any, reps: int, failed: dict[str, str]) -> dict[str, Any]:
    """The inbox's live stream at this size: its snapshot of the first page, then ``reps``
    times one pending pause answered (its consumption written to the store, as the projector
    writes it) and the stream's next event -- its bytes as sent and the time to make it --
    beside what the stream sent before: every id pending for the viewer, at every change."""
    from turnlog.clock import utc_now
    from turnlog.inbox.service import LiveList

    live = LiveList(_Source(store))
    snapshot = live.wire(("snapshot", live.snapshot(viewer)))
    out: dict[str, Any] = {"bytes": [], "ms": [], "old_bytes": [], "snapshot_bytes": 0}
    out["snapshot_bytes"] = len(snapshot.encode())
    for i in range(reps):
        now_ms = int(utc_now().timestamp() * 1000)
        first = store.pending_page(now_ms, limit=1).items[0]
        with store.batch() as batch:
            batch.put_consumption(first.thread_id, first.token_id, "resumed", f"bench-{i}")
        gc.collect()
        began = time.perf_counter()
        said = live.step(viewer)
        out["ms"].append((time.perf_counter() - began) * 1000)
        if said is None or said[1].get("removed") != [first.token_id]:
            failed["live"] = f"the stream's event was {said!r}, not the answered pause leaving"
            break
        out["bytes"].append(len(live.wire(said).encode()))
        page = store.pending_page(now_ms, scope=sorted(viewer.scopes), limit=OLD_LIVE)
        ids = sorted(p.token_id for p in page.items)
        out["old_bytes"].append(len(f"event: pending\ndata: {json.dumps(ids)}\n\n".encode()))
    return out


def _topics(dep: Deployment) -> list[str]:
    return [spec.name for spec in dep.topics.specs()]


if __name__ == "__main__":
    print(json.dumps(_query_child(json.loads(sys.argv[1]))), flush=True)
