"""Latency: answer published -> its TurnResumed visible to a read_committed reader.

The offered load is fixed at half the throughput measured earlier in the same run (or
``--latency-rate``), paced in 1 ms steps by an idempotent acks=all producer like the
AnswerPublisher's. Each answer's clock starts just before its ``send`` and stops when a
read_committed consumer of the resumed topic returns the turn (matched by its thread key), so
the figure holds the produce, the worker's poll, the work, the commit and the reader's fetch.
The worker runs in its own process; the publisher and the reader share the harness's loop.
Baseline: the raw EOS loop at the same load on its own topics. The first 10% of each run is
warm-up and not counted. turnlog's worker also times its steps (:class:`bench.workerproc.Timings`:
rounds, handling, transactions, the expiry sweep), printed and kept in the JSON, which is what
says where a tail comes from.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from bench.common import (
    Out,
    create_topics,
    make_deployment,
    preload,
    scenario_topics,
    unique_prefix,
)
from bench.measure import percentile
from bench.report import Row
from bench.scenarios import Context, worker_config
from bench.workerproc import WorkerProcess
from turnlog.kafka import clients

DEFAULT_RATE = 500.0
WARMUP = 0.1


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    measured = ctx.facts.get("throughput")
    rate = opts.latency_rate or (measured / 2 if measured else DEFAULT_RATE)
    per_run = max(50, int(rate * opts.latency_seconds))
    total = per_run * ctx.repeats
    source = (
        "--latency-rate"
        if opts.latency_rate
        else ("half the measured throughput" if measured else "default, throughput not measured")
    )
    ctx.log(f"offered load {rate:,.0f} answers/s ({source}), {per_run:,} answers per run")
    results: dict[str, list[dict[str, float]]] = {"turnlog": [], "raw": []}
    steps: dict[str, Any] = {}
    answers: list[Out] = []
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        for mode in ("turnlog", "raw"):
            prefix = unique_prefix(ctx.run_id, f"lat{mode}")
            prefixes.append(prefix)
            dep = make_deployment(
                ctx.bootstrap,
                prefix,
                partitions=opts.partitions,
                commit_interval_ms=opts.commit_interval_ms,
            )
            await create_topics(dep)
            if mode == "turnlog":
                answers = await preload(dep, total, messages=opts.messages)
            # The raw loop checks nothing: it gets the same answer bytes and no pauses.
            with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as state:
                app_id = dep.settings.application_id
                config = worker_config(
                    ctx, dep, mode, app_id=app_id, state_dir=Path(state) / "store"
                )
                config["timings"] = True  # what the tail is made of
                proc = WorkerProcess(config)
                await proc.start()
                try:
                    await proc.wait_event("owned", 600)
                    for k in range(ctx.repeats):
                        chunk = answers[k * per_run : (k + 1) * per_run]
                        found = await offered_load(
                            ctx.bootstrap, dep.topics.answers, dep.topics.resumed, chunk, rate
                        )
                        results[mode].append(found)
                        ctx.log(
                            f"{mode:7s} run {k + 1}: p50 {found['p50']:.1f} ms, "
                            f"p99 {found['p99']:.1f} ms, max {found['max']:.1f} ms "
                            f"(achieved {found['achieved_rate']:,.0f}/s)"
                        )
                finally:
                    exit_event = await proc.stop()
                steps[mode] = (exit_event or {}).get("timings", {})
                ctx.log(
                    f"{mode} worker steps (p50 / p99 / max ms): "
                    + "; ".join(
                        f"{name} {t['p50_ms']:.1f} / {t['p99_ms']:.1f} / {t['max_ms']:.1f}"
                        for name, t in steps[mode].items()
                    )
                )
    limit = opts.commit_interval_ms + 50
    common: dict[str, Any] = {
        "unit": "ms",
        "baseline_name": "raw EOS loop",
        "details": {"rate": rate, "rate_source": source, "runs": results, "steps": steps},
    }
    return [
        Row(
            scenario="latency",
            metric=f"p50 answer → TurnResumed visible @ {rate:,.0f}/s",
            samples=[r["p50"] for r in results["turnlog"]],
            baseline_samples=[r["p50"] for r in results["raw"]],
            **common,
        ),
        Row(
            scenario="latency",
            metric=f"p99 answer → TurnResumed visible @ {rate:,.0f}/s",
            samples=[r["p99"] for r in results["turnlog"]],
            baseline_samples=[r["p99"] for r in results["raw"]],
            target=f"≤{limit} ms (commit interval + 50 ms)",
            check=lambda value, ratio: value <= limit,
            notes=f"offered load: {source}; {per_run:,} answers per run, first 10% not counted",
            **common,
        ),
    ]


async def offered_load(
    bootstrap: str, answers_topic: str, resumed_topic: str, answers: list[Out], rate: float
) -> dict[str, float]:
    """Publish ``answers`` at ``rate``/s; per-answer latency to its resumed record, in ms."""
    producer = clients.producer(
        bootstrap, acks="all", enable_idempotence=True, client_id="bench-lat"
    )
    reader = clients.consumer(
        bootstrap,
        group_id=None,
        isolation_level="read_committed",
        enable_auto_commit=False,
        client_id="bench-lat-reader",
    )
    await producer.start()
    await reader.start()
    sent: dict[bytes, float] = {}
    seen: dict[bytes, float] = {}
    published = asyncio.Event()
    all_seen = asyncio.Event()

    async def read() -> None:
        while not all_seen.is_set():
            batch = await reader.getmany(timeout_ms=20)
            now = time.perf_counter()
            for records in batch.values():
                for record in records:
                    seen.setdefault(record.key, now)
            if published.is_set() and len(seen.keys() & sent.keys()) == len(sent):
                all_seen.set()

    try:
        partitions = sorted(await producer.partitions_for(resumed_topic))
        tps = [TopicPartition(resumed_topic, p) for p in partitions]
        reader.assign(tps)
        await reader.seek_to_end(*tps)
        for tp in tps:
            await reader.position(tp)
        reading = asyncio.create_task(read())
        started = time.perf_counter()
        i = 0
        while i < len(answers):
            due = min(len(answers), int((time.perf_counter() - started) * rate) + 1)
            while i < due:
                partition, key, value = answers[i]
                thread = key.partition(b"\x00")[0]
                sent[thread] = time.perf_counter()
                await producer.send(answers_topic, value, key=key, partition=partition)
                i += 1
            await asyncio.sleep(0.001)
        achieved = len(answers) / (time.perf_counter() - started)
        published.set()
        try:
            await asyncio.wait_for(all_seen.wait(), 60)
        except TimeoutError:
            all_seen.set()  # counted as missing below
        await reading
    finally:
        await reader.stop()
        await producer.stop()
    order = sorted(sent, key=sent.__getitem__)
    counted = order[int(len(order) * WARMUP) :]
    latencies = [(seen[t] - sent[t]) * 1000 for t in counted if t in seen]
    missing = sum(1 for t in counted if t not in seen)
    if not latencies:
        raise RuntimeError("no resumed turn became visible")
    return {
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        "max": max(latencies),
        "count": len(latencies),
        "missing": missing,
        "achieved_rate": achieved,
    }
