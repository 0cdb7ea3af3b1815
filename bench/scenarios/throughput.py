"""Resume throughput: answers per second through one ResumeWorker, exactly once.

N pauses and then N valid answers are preloaded over the deployment's partitions. The clock
starts when the worker owns every partition (fenced and restored) and stops when it has
committed its transaction for the last answer (its stats count the answer only after the
commit, which carries the group's offsets). Two baselines over the same answers, each with its
own consumer group: the raw consume -> transactional produce -> send_offsets_to_transaction loop
of :mod:`bench.workerproc`, writing the same output bytes; and the same loop verifying one
Ed25519 token signature per record ("copy + verify"), the fair floor: a resume cannot skip that
check, and on a small CPU it alone costs more than the whole raw loop. The three run in a
rotating order, so none always runs first on a cold broker.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.common import (
    Deployment,
    answer_load,
    end_offsets,
    scenario_topics,
    unique_prefix,
)
from bench.measure import Stopwatch
from bench.report import Row
from bench.scenarios import VERIFY_MODE, Context, worker_config
from bench.workerproc import WorkerProcess
from turnlog.kafka import clients

TARGET_RATE = 5000.0
#: Against the "copy + verify" loop (the issue's fair limit).
TARGET_RATIO = 0.7
MODES = ("raw", VERIFY_MODE, "turnlog")


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n = opts.answers
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    details: list[dict[str, Any]] = []
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        for k in range(ctx.repeats):
            prefix = unique_prefix(ctx.run_id, "tput", k)
            prefixes.append(prefix)
            watch = Stopwatch()
            dep, raw_topics = await answer_load(
                ctx.bootstrap,
                prefix,
                n,
                partitions=opts.partitions,
                commit_interval_ms=opts.commit_interval_ms,
                messages=opts.messages,
            )
            ctx.log(f"repeat {k + 1}: preloaded {n:,} pauses and answers in {watch.seconds:.1f}s")
            order = MODES[k % 3 :] + MODES[: k % 3]
            for mode in order:
                result = await _measure(ctx, dep, mode, n, raw_topics, k)
                rates[mode].append(result["rate"])
                details.append(result)
                ctx.log(
                    f"repeat {k + 1}: {mode:10s} {result['rate']:8,.0f} answers/s "
                    f"(owned after {result['ready_s']:.2f}s)"
                )
    turnlog = rates["turnlog"]
    if turnlog:
        ctx.facts["throughput"] = sorted(turnlog)[len(turnlog) // 2]
    metric = f"answers/s, 1 worker, EOS, {opts.partitions} partitions"
    return [
        Row(
            scenario="resume throughput",
            metric=metric,
            unit="/s",
            samples=turnlog,
            baseline_samples=rates["raw"],
            baseline_name="raw EOS loop",
            notes=(
                f"{n:,} answers per run on {opts.messages}-message checkpoints; commit interval "
                f"{opts.commit_interval_ms} ms, max batch {opts.max_batch}"
            ),
            details={"runs": details},
        ),
        Row(
            scenario="resume throughput",
            metric=f"{metric}, against copy + Ed25519 verify",
            unit="/s",
            samples=turnlog,
            baseline_samples=rates[VERIFY_MODE],
            baseline_name="raw EOS loop + 1 signature check per record",
            target=f"≥{TARGET_RATIO}x copy+verify and ≥{TARGET_RATE:,.0f}/s",
            check=lambda value, ratio: (
                ratio is not None and ratio >= TARGET_RATIO and value >= TARGET_RATE
            ),
        ),
    ]


async def _measure(
    ctx: Context, dep: Deployment, mode: str, n: int, raw_topics: tuple[str, str], k: int
) -> dict[str, Any]:
    group = mode.replace("+", "-")
    app_id = dep.settings.application_id if mode == "turnlog" else f"{dep.prefix}{group}"
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as state:
        config = worker_config(
            ctx,
            dep,
            mode,
            app_id=app_id,
            state_dir=Path(state) / "store",
            expect=n,
            raw_topics=raw_topics,
            profile=ctx.profile_path(f"throughput-{mode}-{k}"),
        )
        proc = WorkerProcess(config)
        await proc.start()
        try:
            start = await proc.wait_event("start", 60)
            owned = await proc.wait_event("owned", 600)
            done = await proc.wait_event("done", max(300.0, n / 100))
        finally:
            exit_event = await proc.stop()
    stats = (exit_event or {}).get("stats", {})
    committed = await _committed(ctx.bootstrap, app_id, dep.topics.answers)
    ends = await end_offsets(ctx.bootstrap, dep.topics.answers)
    complete = all(committed.get(p, -1) >= end for p, end in ends.items() if end > 0)
    if not complete:
        ctx.log(f"WARNING: {mode} group committed {committed}, answers end at {ends}")
    if mode == "turnlog" and stats.get("resumed") != n:
        ctx.log(f"WARNING: turnlog resumed {stats.get('resumed')} of {n}: {stats}")
    return {
        "mode": mode,
        "repeat": k,
        "answers": n,
        "rate": n / (done["t"] - owned["t"]),
        "seconds": done["t"] - owned["t"],
        "ready_s": owned["t"] - start["t"],
        "restored": owned.get("restored"),
        "committed_all": complete,
        "stats": stats,
        "timings": (exit_event or {}).get("timings"),
    }


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = clients.admin(bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
