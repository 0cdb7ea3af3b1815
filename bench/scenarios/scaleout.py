"""Scale out: answers per second through 1, 2 and 4 worker processes over 24 partitions.

How a team past one worker grows is by adding workers to the group: each owns some partitions
with its own fenced producers and its own store, and nothing is shared between them but the
broker. Each run records N pauses on a fresh deployment (``--scaleout-partitions``, 24), starts
the workers (``--scaleout-workers``, 1, 2 and 4, in one group), waits until every worker owns
its share (fenced and restored), and only then publishes the N answers, so no count starts
early. The clock runs from the first answer sent until the group's committed offsets cover every
answer (polled every 50 ms, the same way for every count). The ratio is k workers over one.

While the answers flow, the CPU time of the workers, the broker (``kafka.Kafka`` processes on
this machine, if any) and the harness (which publishes the answers and polls the offsets) is
read from ``/proc``, as a percentage of one core, beside the whole machine's: on a machine whose
cores the broker and the harness share with the workers, that is where the scaling stops.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from bench.common import (
    create_topics,
    end_offsets,
    make_deployment,
    preload,
    produce,
    scenario_topics,
    unique_prefix,
)
from bench.measure import CpuWatch, broker_pids, median
from bench.report import Row
from bench.scenarios import Context, worker_config
from bench.workerproc import WorkerProcess
from turnlog.kafka import clients

POLL_S = 0.05


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n = opts.answers
    counts: list[int] = opts.scaleout_workers
    partitions: int = opts.scaleout_partitions
    if any(partitions % k for k in counts):
        raise ValueError(f"{partitions} partitions do not split evenly over {counts} workers")
    rates: dict[int, list[float]] = {k: [] for k in counts}
    runs: list[dict[str, Any]] = []
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        for k in range(ctx.repeats):
            order = counts if k % 2 == 0 else list(reversed(counts))
            for workers in order:
                prefix = unique_prefix(ctx.run_id, f"scaleout{workers}w", k)
                prefixes.append(prefix)
                found = await _measure(ctx, prefix, n, workers, partitions)
                rates[workers].append(found["rate"])
                runs.append({"repeat": k, **found})
                cpu = found["cpu"]
                ctx.log(
                    f"repeat {k + 1}: {workers} worker(s) {found['rate']:8,.0f} answers/s "
                    f"(shares owned after {found['ready_s']:.2f}s); CPU % of one core: "
                    f"machine {cpu['machine_pct']:.0f}, broker {cpu['broker_pct']:.0f}, "
                    f"workers {cpu['workers_pct']:.0f}, harness {cpu['harness_pct']:.0f}"
                )
    one = counts[0]
    rf = f", replication factor {opts.replication_factor}" if opts.replication_factor > 1 else ""

    def cpu_note(workers: int) -> str:
        mine = [r["cpu"] for r in runs if r["workers"] == workers]
        parts = [
            f"{label} {median([c[key] for c in mine]) or 0:.0f}%"
            for label, key in (
                ("machine", "machine_pct"),
                ("broker", "broker_pct"),
                ("workers", "workers_pct"),
                ("harness", "harness_pct"),
            )
        ]
        return f"CPU (% of one core, {os.cpu_count()} cores) " + ", ".join(parts)

    rows = [
        Row(
            scenario="scale out",
            metric=f"answers/s, {workers} worker processes, {partitions} partitions{rf}",
            unit="/s",
            samples=rates[workers],
            baseline_samples=rates[one],
            baseline_name=f"{one} worker process",
            notes=f"with {workers}: {cpu_note(workers)}; with {one}: {cpu_note(one)}",
            details={"runs": runs} if workers == counts[-1] else {},
        )
        for workers in counts
        if workers != one
    ]
    if rows:
        rows[0].notes += (
            f". {n:,} answers per run; ratio = k workers / {one}, same deployment shape, "
            "answers published once every worker owns its share"
        )
    return rows


async def _measure(
    ctx: Context, prefix: str, n: int, workers: int, partitions: int
) -> dict[str, Any]:
    opts = ctx.options
    dep = make_deployment(
        ctx.bootstrap,
        prefix,
        partitions=partitions,
        commit_interval_ms=opts.commit_interval_ms,
        replication_factor=opts.replication_factor,
    )
    await create_topics(dep)
    answers = await preload(dep, n, messages=opts.messages)
    app_id = dep.settings.application_id
    share = partitions // workers
    async with AsyncExitStack() as stack:
        procs = []
        for _ in range(workers):
            state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="turnlog-bench-")))
            config = worker_config(ctx, dep, "turnlog", app_id=app_id, state_dir=state / "store")
            proc = WorkerProcess(config)
            await proc.start()
            stack.push_async_callback(proc.stop)
            procs.append(proc)
        started = time.monotonic()
        for proc in procs:
            await proc.wait_event("owns", 600, count=share)
        ready_s = time.monotonic() - started
        watch = CpuWatch(
            {
                "workers": [proc.pid for proc in procs],
                "broker": broker_pids(),
                "harness": [os.getpid()],
            }
        )
        watch.start()
        began = time.perf_counter()
        await produce(ctx.bootstrap, dep.topics.answers, answers, transactional=False)
        ends = await end_offsets(ctx.bootstrap, dep.topics.answers)
        await _until_committed(ctx.bootstrap, app_id, dep.topics.answers, ends, 600.0)
        seconds = time.perf_counter() - began
        cpu = watch.stop()
    return {
        "workers": workers,
        "partitions": partitions,
        "answers": n,
        "rate": n / seconds,
        "seconds": seconds,
        "ready_s": ready_s,
        "cpu": cpu,
    }


async def _until_committed(
    bootstrap: str, group: str, topic: str, ends: dict[int, int], timeout: float
) -> None:
    """Wait until ``group`` has committed every partition of ``topic`` up to ``ends``."""
    admin = clients.admin(bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            offsets = await admin.list_consumer_group_offsets(group)
            done = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
            if all(done.get(p, -1) >= end for p, end in ends.items() if end > 0):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{group} committed {done}, the answers end at {ends}")
            await asyncio.sleep(POLL_S)
    finally:
        await admin.close()
