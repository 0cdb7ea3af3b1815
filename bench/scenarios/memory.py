"""Memory: the worker's peak RSS after a small and after a large number of answers.

All pauses and answers are preloaded; one worker process works through them and reports its
VmHWM (peak resident set, from /proc) when it has committed the first ``--memory-small`` and
then ``--memory-large`` answers. Bounded memory means the second figure is no higher than the
first: nothing may be kept per answer processed. The restore of every pause happens before the
first answer, so its share of the peak is in both figures alike; VmRSS at each mark is in the
notes. Baseline: the raw EOS loop over the same answers. One run (it is long and RSS is not
noisy the way rates are).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.common import (
    answer_load,
    scenario_topics,
    unique_prefix,
)
from bench.measure import Stopwatch
from bench.report import Row
from bench.scenarios import Context, worker_config
from bench.workerproc import WorkerProcess

TOLERANCE = 0.10  # allocator and RocksDB memtable noise


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    small, large = opts.memory_small, opts.memory_large
    if not 0 < small < large:
        raise ValueError("--memory-small must be below --memory-large")
    marks: dict[str, dict[str, dict[str, Any]]] = {}
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        prefix = unique_prefix(ctx.run_id, "memory")
        prefixes.append(prefix)
        watch = Stopwatch()
        dep, raw_topics = await answer_load(
            ctx.bootstrap,
            prefix,
            large,
            partitions=opts.partitions,
            commit_interval_ms=opts.commit_interval_ms,
            messages=opts.messages,
        )
        ctx.log(f"preloaded {large:,} pauses and answers in {watch.seconds:.1f}s")
        for mode in ("turnlog", "raw"):
            app_id = dep.settings.application_id if mode == "turnlog" else f"{prefix}raw"
            with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as state:
                config = worker_config(
                    ctx,
                    dep,
                    mode,
                    app_id=app_id,
                    state_dir=Path(state) / "store",
                    expect=large,
                    report_at=(small, large),
                    raw_topics=raw_topics,
                )
                proc = WorkerProcess(config)
                await proc.start()
                try:
                    found = {
                        "owned": await proc.wait_event("owned", 600),
                        "small": await proc.wait_event("progress", 1200, mark=small),
                        "large": await proc.wait_event("progress", 3600, mark=large),
                    }
                finally:
                    await proc.stop()
            marks[mode] = found
            ctx.log(
                f"{mode:7s} VmHWM owned {_mb(found['owned'], 'VmHWM'):.0f} MB, "
                f"{small:,}: {_mb(found['small'], 'VmHWM'):.0f} MB, "
                f"{large:,}: {_mb(found['large'], 'VmHWM'):.0f} MB"
            )
    turnlog, raw = marks["turnlog"], marks["raw"]
    first = _mb(turnlog["small"], "VmHWM")
    rss = ", ".join(f"{k} {_mb(turnlog[k], 'VmRSS'):.0f} MB" for k in ("owned", "small", "large"))
    return [
        Row(
            scenario="memory",
            metric=f"worker peak RSS after {small:,} answers",
            unit="MB",
            samples=[first],
            baseline_samples=[_mb(raw["small"], "VmHWM")],
            baseline_name="raw EOS loop",
            notes=f"turnlog VmRSS at owned (after restoring {large:,} pauses)/marks: {rss}",
            details={"marks": marks},
        ),
        Row(
            scenario="memory",
            metric=f"worker peak RSS after {large:,} answers",
            unit="MB",
            samples=[_mb(turnlog["large"], "VmHWM")],
            baseline_samples=[_mb(raw["large"], "VmHWM")],
            baseline_name="raw EOS loop",
            target=f"no growth (≤ the {small:,} figure +{TOLERANCE:.0%})",
            check=lambda value, ratio: value <= first * (1 + TOLERANCE),
        ),
    ]


def _mb(event: dict[str, Any], field: str) -> float:
    return float(event.get(field, 0)) / 1024
