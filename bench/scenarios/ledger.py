"""Ledger: what ``consumptions`` holds once N spent tokens' windows have closed (1M by default).

Every token an answer spends leaves one row on ``consumptions`` (compacted, one key per token),
so without retirement the topic and every worker's store keep a row per answer ever made. A
spent token's row is retired once its window, the verifier's leeway and
``TURNLOG_LEDGER_KEEP_SECONDS`` have passed: its owner tombstones it and drops it from its store,
and the broker's cleaner then removes the row, and later the tombstone.

The scenario writes N pauses (4 messages, their windows closed 30 days ago) and one
``TokenConsumed`` (outcome ``resumed``) for each on a fresh twelve-partition deployment, from
templates with the ids replaced in place, then starts one worker with
``TURNLOG_LEDGER_KEEP_SECONDS=0`` and its sweep every 0.05 s, and waits until it has retired all
N. The ``consumptions`` partitions' ``.log`` files (``--broker-log-dir``) are read before the
worker starts -- what the topic holds today after N spent tokens, compacted or not, since every
key is distinct -- then once the broker's cleaner has settled after the retirement, and once
more after a further pass of the cleaner (brought by new dirt: a fiftieth of N tombstones of
keys nobody holds, what later retirements bring), which drops the tombstones an earlier pass
kept.

So that the cleaner runs within the scenario, ``consumptions`` gets bench-only overrides: 1 MB
segments rolled after 10 s, cleanable at any dirt ratio and at the latest 10 s after a write, and
tombstones dropped once cleaned (``delete.retention.ms=0``; the topic's default keeps them a day,
during which the log holds a key-only record per retired row). One record is written to each
partition after the retirement so that the active segment, which holds the last tombstones and
which the cleaner never touches, rolls.

Baseline: the same ``.log`` bytes before the retirement (today's size). The store's bytes are
read the same way (the worker's RocksDB directory, before and after).
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from bench.common import (
    Deployment,
    Out,
    create_topics,
    dir_bytes,
    log_bytes,
    make_deployment,
    pause_for,
    produce,
    scenario_topics,
    unique_prefix,
)
from bench.measure import Stopwatch
from bench.report import Row
from bench.scenarios import Context, worker_config
from bench.workerproc import WorkerProcess
from turnlog.clock import utc_now
from turnlog.contracts.events import TokenConsumed
from turnlog.kafka import clients
from turnlog.kafka.partitioning import consumption_key, partition_for, pause_key
from turnlog.wire.codec import encode

PARTITIONS = 12
THREAD_MARK = "QZQZQZQZQZ"  # ten characters: thread ids are thread-0000000042
TOKEN_MARK = "f0e1d2c3b4a59687" * 2  # 32 hex digits, as a uuid4().hex
EVENT_MARK = "9687a5b4c3d2e1f0" * 2
#: bench-only overrides of ``consumptions`` so the broker's cleaner runs within the scenario
CLEANER_CONFIGS = {
    "segment.bytes": str(1024 * 1024),
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "0",
    "segment.ms": "10000",
    "max.compaction.lag.ms": "10000",
}
#: how long the cleaner is waited for once the rows are retired (it wakes every 15 s by default)
CLEANER_WAIT_S = 240.0
#: the bytes are taken as cleaned once they stop shrinking for this long (two of the broker's
#: default cleaner backoffs; kafka.sh's broker backs off for 1 s)
STABLE_S = 35.0


@dataclasses.dataclass
class Template:
    """One encoded record whose thread, token and event ids are replaced in place."""

    key: bytes
    value: bytes

    def records(self, n: int) -> Iterator[Out]:
        mark, token, event = THREAD_MARK.encode(), TOKEN_MARK.encode(), EVENT_MARK.encode()
        for i in range(n):
            digits = f"{i:010d}"
            tid, tok = digits.encode(), f"{i:032x}".encode()
            yield (
                partition_for(f"thread-{digits}", PARTITIONS),
                self.key.replace(mark, tid).replace(token, tok),
                self.value.replace(mark, tid).replace(token, tok).replace(event, tok[::-1]),
            )


def templates() -> tuple[Template, Template]:
    """A pause whose window closed 30 days ago, and its token's consumption (resumed)."""
    thread = f"thread-{THREAD_MARK}"
    then = utc_now() - timedelta(days=31)
    pause = dataclasses.replace(
        pause_for(thread, messages=4, now=then), token_id=TOKEN_MARK, event_id=EVENT_MARK
    )
    spent = TokenConsumed(
        event_id=EVENT_MARK,
        occurred_at=then + timedelta(minutes=5),
        package_version="bench",
        token_id=TOKEN_MARK,
        answer_id=f"answer-{TOKEN_MARK}",
        thread_id=thread,
        checkpoint_id=pause.checkpoint.checkpoint_id,
        outcome="resumed",
    )
    return (
        Template(pause_key(thread, pause.checkpoint.checkpoint_id), encode(pause)),
        Template(consumption_key(thread, TOKEN_MARK), encode(spent)),
    )


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n: int = opts.ledger_n
    if opts.broker_log_dir is None:
        ctx.log("ledger: skipped, it reads the broker's log files (--broker-log-dir)")
        return []
    async with scenario_topics(ctx.bootstrap, []) as prefixes:
        prefix = unique_prefix(ctx.run_id, "ledger")
        prefixes.append(prefix)
        dep = make_deployment(ctx.bootstrap, prefix, partitions=PARTITIONS)
        await create_topics(dep)
        await _cleaner_configs(dep)
        pause, spent = templates()
        watch = Stopwatch()
        await produce(ctx.bootstrap, dep.topics.pauses, pause.records(n), transactional=False)
        await produce(ctx.bootstrap, dep.topics.consumptions, spent.records(n), transactional=False)
        ctx.log(f"ledger: {n:,} pauses and spent tokens written in {watch.seconds:.1f}s")
        log_dir, topic = opts.broker_log_dir, dep.topics.consumptions
        before = log_bytes(log_dir, [topic], PARTITIONS)
        found = await _retire(ctx, dep, n)
        await _roll(dep, PARTITIONS)
        first, waited = await _cleaned(log_dir, topic, before)
        # The cleaner drops a tombstone at its next pass over the partition once the tombstone
        # is older than delete.retention.ms; new dirt is what brings that pass. Here: a
        # fiftieth of N more tombstones of keys nobody holds (what later retirements bring).
        await _roll(dep, max(PARTITIONS, n // 50))
        after, waited_again = await _cleaned(log_dir, topic, first)
        ctx.log(
            f"ledger: consumptions {before / 1e6:,.1f} MB before, {first / 1e6:,.2f} MB once "
            f"the cleaner settled ({first / before:.4f}x, waited {waited:.0f}s), "
            f"{after / 1e6:,.2f} MB after its next pass ({after / before:.4f}x, waited "
            f"{waited_again:.0f}s); retired in {found['seconds']:.1f}s; store "
            f"{found['store_before'] / 1e6:,.1f} MB -> {found['store_after'] / 1e6:,.1f} MB"
        )
    overrides = ", ".join(f"{k}={v}" for k, v in CLEANER_CONFIGS.items())
    notes = (
        f"{n:,} spent tokens whose windows closed, one worker, TURNLOG_LEDGER_KEEP_SECONDS=0, "
        f"retired in {found['seconds']:.1f}s ({n / found['seconds']:,.0f} rows/s); the cleaner "
        f"ran with bench-only overrides ({overrides})"
    )

    def on_topic(metric: str, value: int, **more: Any) -> Row:
        """A row of the topic's bytes beside today's (before the retirement)."""
        return Row(
            scenario="ledger",
            metric=metric,
            unit="B",
            samples=[float(value)],
            baseline_samples=[float(before)],
            baseline_name="the same topic before retirement (today)",
            **more,
        )

    return [
        on_topic(
            f"consumptions .log bytes, {n:,} rows retired, once the cleaner settled",
            first,
            notes="a retired row is a key-only tombstone until delete.retention.ms (0 here, a "
            "day by default) has passed and the cleaner passes over its segment again: the "
            "passes made while the retirement ran have dropped the earlier ones",
        ),
        on_topic(
            f"consumptions .log bytes after {n:,} spent tokens' windows closed",
            after,
            target="≤0.05x",
            check=lambda value, ratio: ratio is not None and ratio <= 0.05,
            notes=notes,
            details={"waited_for_cleaner_s": [waited, waited_again], **found},
        ),
        Row(
            scenario="ledger",
            metric=f"the worker's store after retiring {n:,} rows",
            unit="B",
            samples=[float(found["store_after"])],
            baseline_samples=[float(found["store_before"])],
            baseline_name="the same store before retirement (pauses and rows)",
            notes="the pauses stay (they are the pauses topic's, not the ledger's)",
        ),
    ]


async def _cleaner_configs(dep: Deployment) -> None:
    admin = clients.admin(dep.settings.bootstrap_servers)
    await admin.start()
    try:
        # AlterConfigs replaces a topic's whole set: turnlog's own configs go with the overrides.
        (spec,) = [s for s in dep.topics.specs() if s.name == dep.topics.consumptions]
        configs = {**spec.all_configs(), **CLEANER_CONFIGS}
        resource = ConfigResource(ConfigResourceType.TOPIC, spec.name, configs=configs)
        await admin.alter_configs([resource])
    finally:
        await admin.close()


async def _retire(ctx: Context, dep: Deployment, n: int) -> dict[str, Any]:
    """One worker over every partition, until it has retired ``n`` rows (its own count)."""
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        state = Path(tmp) / "store"
        config = worker_config(
            ctx, dep, "turnlog", app_id=dep.settings.application_id, state_dir=state
        )
        config.update(ledger_keep_seconds=0, expiry_interval=0.05, expect_retired=n)
        proc = WorkerProcess(config)
        await proc.start()
        try:
            owned = await proc.wait_event("owned", 1800)
            store_before = dir_bytes(state)
            retired = await proc.wait_event("retired", 3600)
        finally:
            await proc.stop()
        store_after = dir_bytes(state)
    return {
        "seconds": retired["t"] - owned["t"],
        "restored": owned.get("restored"),
        "store_before": store_before,
        "store_after": store_after,
    }


async def _roll(dep: Deployment, count: int) -> None:
    """Roll each partition's active segment, which the cleaner never touches: once it is older
    than ``segment.ms``, a write rolls it. The writes are ``count`` tombstones of keys nobody
    holds, spread over the partitions."""
    await asyncio.sleep(int(CLEANER_CONFIGS["segment.ms"]) / 1000 + 1)
    tag = uuid.uuid4().hex[:8]
    records: list[Any] = [
        (i % PARTITIONS, f"bench-roll-{tag}-{i}".encode(), None) for i in range(count)
    ]
    await produce(
        dep.settings.bootstrap_servers, dep.topics.consumptions, records, transactional=False
    )


async def _cleaned(log_dir: Path, topic: str, before: int) -> tuple[int, float]:
    """The topic's ``.log`` bytes once the cleaner has had its turn: polled until they are
    below ``before`` and stop shrinking for ``STABLE_S``, or ``CLEANER_WAIT_S``."""
    began = time.monotonic()
    last, since = log_bytes(log_dir, [topic], PARTITIONS), time.monotonic()
    while time.monotonic() - began < CLEANER_WAIT_S:
        await asyncio.sleep(2.0)
        now = log_bytes(log_dir, [topic], PARTITIONS)
        if now < last:
            last, since = now, time.monotonic()
        elif last < before and time.monotonic() - since > STABLE_S:
            break
    return last, time.monotonic() - began
