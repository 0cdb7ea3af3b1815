"""Scale out: answers per second through two worker processes over twelve partitions, vs one.

How a team past one worker grows is by adding workers to the group: each owns some partitions
with its own fenced producers and its own store, and nothing is shared between them but the
broker. Each run records N pauses on a fresh twelve-partition deployment, starts the workers
(one, or two in the same group), waits until every worker owns its share (fenced and restored),
and only then publishes the N answers, so neither count starts early. The clock runs from the
first answer sent until the group's committed offsets cover every answer (polled every 50 ms,
the same way for both counts). The ratio is two workers over one; on a machine whose cores the
broker and the harness share with the workers it says how much a second process can still add.
"""

from __future__ import annotations

import asyncio
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
from bench.report import Row
from bench.scenarios import Context, worker_config
from bench.workerproc import WorkerProcess
from turnlog.kafka import clients

PARTITIONS = 12
POLL_S = 0.05


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n = opts.answers
    rates: dict[int, list[float]] = {1: [], 2: []}
    runs: list[dict[str, Any]] = []
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        for k in range(ctx.repeats):
            for workers in (1, 2) if k % 2 == 0 else (2, 1):
                prefix = unique_prefix(ctx.run_id, f"scale{workers}w", k)
                prefixes.append(prefix)
                found = await _measure(ctx, prefix, n, workers)
                rates[workers].append(found["rate"])
                runs.append({"repeat": k, **found})
                ctx.log(
                    f"repeat {k + 1}: {workers} worker(s) {found['rate']:8,.0f} answers/s "
                    f"(shares owned after {found['ready_s']:.2f}s)"
                )
    return [
        Row(
            scenario="scale out",
            metric=f"answers/s, 2 worker processes, {PARTITIONS} partitions",
            unit="/s",
            samples=rates[2],
            baseline_samples=rates[1],
            baseline_name="1 worker process",
            notes=(
                f"{n:,} answers per run; ratio = 2 workers / 1 worker, same deployment shape, "
                "answers published once every worker owns its share"
            ),
            details={"runs": runs},
        )
    ]


async def _measure(ctx: Context, prefix: str, n: int, workers: int) -> dict[str, Any]:
    opts = ctx.options
    dep = make_deployment(
        ctx.bootstrap, prefix, partitions=PARTITIONS, commit_interval_ms=opts.commit_interval_ms
    )
    await create_topics(dep)
    answers = await preload(dep, n, messages=opts.messages)
    app_id = dep.settings.application_id
    share = PARTITIONS // workers
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
        began = time.perf_counter()
        await produce(ctx.bootstrap, dep.topics.answers, answers, transactional=False)
        ends = await end_offsets(ctx.bootstrap, dep.topics.answers)
        await _until_committed(ctx.bootstrap, app_id, dep.topics.answers, ends, 600.0)
        seconds = time.perf_counter() - began
    return {
        "workers": workers,
        "answers": n,
        "rate": n / seconds,
        "seconds": seconds,
        "ready_s": ready_s,
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
