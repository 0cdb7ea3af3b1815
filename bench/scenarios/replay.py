"""Replay: records per second to rebuild the store from the compacted pauses topic.

N checkpoints are preloaded over the deployment's partitions. turnlog's figure is one call of
:func:`turnlog.projections.projector.rebuild` into an empty state directory -- consumer start,
decode, the store's atomic batches and the closing content digest included. Baseline: a raw
aiokafka consumer with the LogReader's settings (read_committed, same fetch sizes) reading the
same topics to their ends from a cold start, decoding nothing; and **consume + write**, that
consumer also putting every record's key and value into a new RocksDB (rocksdict, batches of
the rebuild's size, no write-ahead log, as the rebuild's bulk store): the least a rebuild must
do, so the fair limit (target: at least half of its rate).
"""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from bench.common import (
    consume_and_write,
    create_topics,
    make_deployment,
    preload,
    raw_read_to_end,
    reader_consumer,
    scenario_topics,
    unique_prefix,
)
from bench.measure import Profiling, Stopwatch
from bench.report import Row
from bench.scenarios import Context
from turnlog.projections.projector import rebuild

TARGET_RATIO = 0.5


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n = opts.replay_n
    rates: dict[str, list[float]] = {"turnlog": [], "raw": [], "write": []}
    details: list[dict[str, Any]] = []
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        prefix = unique_prefix(ctx.run_id, "replay")
        prefixes.append(prefix)
        dep = make_deployment(ctx.bootstrap, prefix, partitions=opts.partitions)
        await create_topics(dep)
        watch = Stopwatch()
        await preload(dep, n, messages=opts.messages, answers=False)
        ctx.log(f"preloaded {n:,} checkpoints in {watch.seconds:.1f}s")
        tps = [
            TopicPartition(topic, p)
            for topic in (dep.topics.pauses, dep.topics.consumptions)
            for p in range(opts.partitions)
        ]
        for k in range(ctx.repeats):
            order = ("raw", "write", "turnlog") if k % 2 == 0 else ("turnlog", "write", "raw")
            for mode in order:
                gc.collect()
                if mode == "turnlog":
                    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as state:
                        profiling = Profiling(ctx.profile_path(f"replay-{k}"))
                        profiling.start()
                        watch = Stopwatch()
                        await rebuild(ctx.bootstrap, Path(state) / "store", dep.topics)
                        seconds = watch.seconds
                        profiling.stop()
                    count = n
                elif mode == "write":
                    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as scratch:
                        watch = Stopwatch()
                        count = await consume_and_write(ctx.bootstrap, tps, Path(scratch) / "db")
                        seconds = watch.seconds
                else:
                    watch = Stopwatch()
                    consumer = reader_consumer(ctx.bootstrap, "bench-replay-raw")
                    await consumer.start()
                    try:
                        count = await raw_read_to_end(consumer, tps)
                    finally:
                        await consumer.stop()
                    seconds = watch.seconds
                if count != n:
                    ctx.log(f"WARNING: {mode} read {count:,} records, expected {n:,}")
                rates[mode].append(count / seconds)
                details.append({"mode": mode, "repeat": k, "records": count, "seconds": seconds})
                ctx.log(f"repeat {k + 1}: {mode:7s} {count / seconds:9,.0f} records/s")
    return [
        Row(
            scenario="replay",
            metric=f"rebuild from {n:,} checkpoints",
            unit="records/s",
            samples=rates["turnlog"],
            baseline_samples=rates["raw"],
            baseline_name="raw consumer",
            target=f"≥{TARGET_RATIO}x raw",
            check=lambda value, ratio: ratio is not None and ratio >= TARGET_RATIO,
            notes=f"{opts.messages}-message checkpoints over {opts.partitions} partitions; "
            "rebuild() includes the final content digest",
            details={"runs": details},
        ),
        Row(
            scenario="replay",
            metric=f"rebuild from {n:,} checkpoints, against consume + write",
            unit="records/s",
            samples=rates["turnlog"],
            baseline_samples=rates["write"],
            baseline_name="raw consumer + RocksDB write of the same bytes",
            target=f"≥{TARGET_RATIO}x consume+write",
            check=lambda value, ratio: ratio is not None and ratio >= TARGET_RATIO,
            notes="the same records' keys and values, batches of the rebuild's size, no WAL",
        ),
    ]
