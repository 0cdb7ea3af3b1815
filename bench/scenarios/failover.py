"""Failover: how soon a worker taking over a partition can process its first answer.

A one-partition deployment holds N checkpoints on that partition. Each repeat publishes an
answer and starts a fresh ResumeWorker process twice: once with an empty state directory (a
full restore of pauses[0] and consumptions[0]) and once with the directory the first left behind
(restore from the stored offsets). "Ready" is ResumeWorker start -> every partition owned:
fenced and restored, the first answer next. The time until that answer's TurnResumed is visible
to a read_committed reader is reported alongside. Baseline: the raw loop taking the partition
the same way -- group join, fencing producer, and for the full case a raw read of the same two
partitions to their end.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from bench.common import (
    Deployment,
    Out,
    create_topics,
    make_deployment,
    preload,
    produce,
    scenario_topics,
    unique_prefix,
)
from bench.measure import Stopwatch, median
from bench.report import Row
from bench.scenarios import Context, worker_config
from bench.workerproc import WorkerProcess
from turnlog.kafka import clients

TARGET_S = 30.0


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n = opts.failover_n
    live = 2 * ctx.repeats
    ready: dict[str, list[float]] = {k: [] for k in ("full", "stored", "raw_full", "raw_stored")}
    visible: dict[str, list[float]] = {"full": [], "stored": []}
    runs: list[dict[str, Any]] = []
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        prefix = unique_prefix(ctx.run_id, "failover")
        prefixes.append(prefix)
        dep = make_deployment(
            ctx.bootstrap, prefix, partitions=1, commit_interval_ms=opts.commit_interval_ms
        )
        raw_topics = (f"{prefix}raw.consumptions", f"{prefix}raw.resumed")
        await create_topics(dep, *raw_topics)
        watch = Stopwatch()
        await preload(dep, n - live, messages=opts.messages, answers=False, tag="bg-")
        answers = await preload(dep, live, messages=opts.messages, tag="live-")
        ctx.log(f"preloaded {n:,} checkpoints on one partition in {watch.seconds:.1f}s")
        with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as states:
            for k in range(ctx.repeats):
                state = Path(states) / f"store-{k}"
                for phase, answer in (("full", answers[2 * k]), ("stored", answers[2 * k + 1])):
                    result = await _turnlog(ctx, dep, state, answer, f"{phase}-{k}")
                    ready[phase].append(result["ready_s"])
                    visible[phase].append(result["visible_s"])
                    runs.append({"mode": "turnlog", "phase": phase, "repeat": k, **result})
                    ctx.log(
                        f"repeat {k + 1}: turnlog {phase:6s} ready {result['ready_s']:.2f}s "
                        f"(restored {result['restored']:,}), first turn visible "
                        f"{result['visible_s']:.2f}s"
                    )
                shutil.rmtree(state, ignore_errors=True)  # hundreds of MB per repeat at 100k
                for phase, restore in (("raw_full", True), ("raw_stored", False)):
                    result = await _raw(ctx, dep, restore, raw_topics)
                    ready[phase].append(result["ready_s"])
                    runs.append({"mode": "raw", "phase": phase, "repeat": k, **result})
                    ctx.log(f"repeat {k + 1}: raw     {phase:10s} ready {result['ready_s']:.2f}s")

    def visible_note(phase: str) -> str:
        return f"first answer's TurnResumed visible after {median(visible[phase]) or 0:.2f}s"

    return [
        Row(
            scenario="failover",
            metric=f"ready: full restore of {n:,} checkpoints",
            unit="s",
            samples=ready["full"],
            baseline_samples=ready["raw_full"],
            baseline_name="raw join+fence+read",
            target=f"≤{TARGET_S:.0f} s",
            check=lambda value, ratio: value <= TARGET_S,
            notes=visible_note("full"),
            details={"runs": runs, "visible_s": visible},
        ),
        Row(
            scenario="failover",
            metric="ready: from stored offsets",
            unit="s",
            samples=ready["stored"],
            baseline_samples=ready["raw_stored"],
            baseline_name="raw join+fence",
            target=f"≤{TARGET_S:.0f} s",
            check=lambda value, ratio: value <= TARGET_S,
            notes=visible_note("stored"),
        ),
    ]


async def _turnlog(
    ctx: Context, dep: Deployment, state: Path, answer: Out, name: str
) -> dict[str, Any]:
    await produce(ctx.bootstrap, dep.topics.answers, [answer], transactional=False)
    thread = answer[1].partition(b"\x00")[0]
    seen = asyncio.get_running_loop().create_future()
    watcher = asyncio.create_task(_watch(ctx.bootstrap, dep.topics.resumed, thread, seen))
    config = worker_config(
        ctx,
        dep,
        "turnlog",
        app_id=dep.settings.application_id,
        state_dir=state,
        expect=1,
        profile=ctx.profile_path(f"failover-{name}"),
    )
    proc = WorkerProcess(config)
    try:
        await asyncio.wait_for(asyncio.shield(seen), 30)  # the watcher is reading
        await proc.start()
        start = await proc.wait_event("start", 60)
        owned = await proc.wait_event("owned", 600)
        await proc.wait_event("done", 600)
        at = await asyncio.wait_for(watcher, 60)
    finally:
        await proc.stop()
        watcher.cancel()
    return {
        "ready_s": owned["t"] - start["t"],
        "visible_s": at - start["t"],
        "restored": owned.get("restored", 0),
        "rss_kb_owned": owned.get("VmHWM"),
    }


async def _raw(
    ctx: Context, dep: Deployment, restore: bool, raw_topics: tuple[str, str]
) -> dict[str, Any]:
    config = worker_config(
        ctx, dep, "raw", app_id=f"{dep.prefix}raw", restore=restore, raw_topics=raw_topics
    )
    proc = WorkerProcess(config)
    await proc.start()
    try:
        start = await proc.wait_event("start", 60)
        owned = await proc.wait_event("owned", 600)
    finally:
        await proc.stop()
    return {"ready_s": owned["t"] - start["t"], "restored": owned.get("restored", 0)}


async def _watch(bootstrap: str, topic: str, thread: bytes, reading: asyncio.Future[None]) -> float:
    """``time.monotonic()`` when a TurnResumed keyed ``thread`` becomes visible after now."""
    consumer = clients.consumer(
        bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        reading.set_result(None)
        while True:
            batch = await consumer.getmany(timeout_ms=50)
            now = time.monotonic()
            if any(r.key == thread for records in batch.values() for r in records):
                return now
    finally:
        await consumer.stop()
