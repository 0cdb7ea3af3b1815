"""The faults production sees, on three nodes (issue 27): a rolling restart and hard bounces,
under worker SIGKILLs and a stream of answers, judged by the exact count and by turnlog audit.

Shaped like Kafka's own transactions system test (``tests/kafkatest/tests/core/
transactions_test.py``): three brokers, replication factor 3, ``min.insync.replicas`` 2; the
brokers bounced one at a time -- cleanly (SIGTERM: a controlled shutdown, as a rolling restart
does) or hard (SIGKILL) -- while the copiers run and are bounced too; no duplicates, the input
set equals the output set, and a concurrent ``read_committed`` reader sees the same.

Here the copiers are the resume workers of the SIGKILL chaos (``chaos_support``): three slots
of worker processes SIGKILLed again and again, most kills inside an open transaction, while
answers stream in (duplicates, competing answers from two processes, misrouted ones) and pauses
expire. Each node in turn is stopped (or killed, then held down until the controller has fenced
it, as Kafka's test waits out the broker session), started again and waited for until no
partition of any topic is under-replicated, before the next. A bounce is aimed like the kills:
it waits for a worker holding a transaction open, then takes the node away at once. The answers
wait for each bounce to have begun, so every bounce has answers arriving during it, and the
kills go on until the last node is back. Judged three ways once drained:

- the exact count against the answers log (``_assert_chaos``): every output once per input;
- ``turnlog audit`` from the log alone: the chaos's own verdict before any repair must already
  hold (nothing found, nothing healed), and a fresh :class:`~turnlog.audit.Auditor` after the
  workers stopped holds, with one judged answer per distinct answer of the log;
- a ``read_committed`` reader that followed the output topics through every bounce holds
  exactly what a fresh reader reads at the end (nothing twice, nothing aborted, nothing lost).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import Cluster3
from tests.conftest import Names
from tests.deployment import Deployment, with_keyring
from tests.integration.chaos_count import Outputs
from tests.integration.chaos_support import Chaos, ChaosConfig, ChaosResult
from tests.integration.test_worker_chaos import _assert_chaos
from tests.integration.worker_support import Follower, keyed_deployment
from tests.kafka_helpers import eventually
from turnlog.audit import Auditor, Report
from turnlog.producers.pauses import PauseRecorder

pytest_plugins = ["tests.brokers"]

NODES = (1, 2, 3)


class Bounces:
    """Each node in turn down and up again, aimed like the kills: a bounce waits (a while) for
    a worker holding a transaction open, then takes the node away at once; it is done once the
    node is back and no partition is under-replicated."""

    def __init__(self, cluster: Cluster3, *, hard: bool) -> None:
        self.cluster = cluster
        self.hard = hard
        self.chaos: Chaos | None = None  # set once the chaos exists: its workers' marks
        #: per bounce: transactions open in live workers at the moment the node was taken away
        self.open_at_fault: list[int] = []

    def steps(self) -> tuple[Callable[[], Awaitable[None]], ...]:
        return tuple(partial(self.bounce, node) for node in NODES)

    async def _open_transactions(self, patience: float = 15.0) -> int:
        """Polled until a live worker has a transaction open, or ``patience`` is out."""
        assert self.chaos is not None
        deadline = time.monotonic() + patience
        while True:
            found = sum(w.marks.open_transactions() for w in self.chaos.workers.values())
            if found or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.005)

    async def bounce(self, node: int) -> None:
        cluster = self.cluster
        self.open_at_fault.append(await self._open_transactions())
        began = time.monotonic()
        if self.hard:
            await cluster.kill_node(node)  # SIGKILL: no shutdown; its sessions, leaderships hang
            await cluster.until_fenced(node)  # the controller fenced it, moved its leaderships
        else:
            await cluster.stop_node(node)  # SIGTERM: a controlled shutdown moves leaderships
        down = time.monotonic()
        await cluster.start_node(node)
        up = time.monotonic()
        await cluster.until_in_sync()
        print(
            f"node {node} {'killed' if self.hard else 'stopped'} with "
            f"{self.open_at_fault[-1]} transaction(s) open, down in {down - began:.1f}s, "
            f"back in {up - down:.1f}s, in sync {time.monotonic() - up:.1f}s later"
        )


def _config(bounces: Bounces) -> ChaosConfig:
    """The outage chaos test's shape, smaller, with a bounce of each node in turn as faults."""
    return ChaosConfig(
        answered=150,
        competing=12,
        misrouted=12,
        expiring=6,
        expiring_late=3,
        min_kills=8,
        publish_seconds=16.0,
        commit_delay=0.3,  # transactions held open longer: the bounces find them
        kill_gap=(1.0, 3.0),  # slower than the outage test's: workers commit between kills
        faults=bounces.steps(),
    )


def _deployment(cluster: Cluster3, names: Names, root: Path) -> tuple[Deployment, Path]:
    dep, keys = keyed_deployment(cluster.bootstrap, names.prefix, names.app, root)
    settings = dep.settings.with_(replication_factor=3, min_insync_replicas=2)
    return with_keyring(settings, dep.keyring), keys


def _counters(outputs: Outputs) -> tuple[Counter[Any], ...]:
    return (outputs.consumed, outputs.resumed, outputs.expired, outputs.rejections)


async def _follower_saw_the_same(follower: Follower, result: ChaosResult) -> None:
    """The reader that followed the outputs through the bounces holds, once caught up, exactly
    what a fresh reader read at the end. Its counts only grow, so a record it was handed twice
    (or an aborted one) keeps it from ever matching."""
    final = _counters(result.outputs)

    async def caught_up() -> bool:
        if follower._task is not None and follower._task.done():
            raise AssertionError(f"the concurrent reader stopped: {follower._task!r}")
        return _counters(Outputs.of(follower.events)) == final

    try:
        await eventually(caught_up, timeout=120, interval=0.5)
    except AssertionError:
        seen = _counters(Outputs.of(follower.events))
        diff = [(dict(s - f), dict(f - s)) for s, f in zip(seen, final, strict=True)]
        raise AssertionError(f"the concurrent reader differs (extra, missing): {diff}") from None


def _check_audit(report: Report, result: ChaosResult) -> None:
    """A fresh audit holds, and counts what the log calls for: one judged answer per distinct
    answer (partition, answer id) of the log, each resume, refusal and expiry."""
    assert report.holds, "\n".join(v.line() for v in report.violations[:20])
    e = result.expected
    distinct = {(a.partition, a.answer_id) for a in result.inputs}
    refused_ids = {answer_id for answer_id, _, _ in e.rejections}
    refused = {(p, a) for p, a in distinct if a in refused_ids}
    assert report.answers_judged == len(distinct), report.summary()
    assert report.not_yet_handled == 0, report.summary()
    assert report.resumed == len(e.resumes), report.summary()
    assert report.expired == len(e.expired), report.summary()
    assert report.refused == len(refused), report.summary()
    assert len(distinct) == len(e.resumes) + len(refused)  # each answer one outcome


def _print_bounces(result: ChaosResult) -> None:
    submitted = [a.submitted for a in result.inputs]
    commits = [t for times in result.commits.values() for t in times]
    for node, (began, ended) in zip(NODES, result.faults, strict=False):
        print(
            f"node {node}: {sum(began <= t <= ended for t in commits)} commits and "
            f"{sum(began <= t <= ended for t in submitted)} answers while it was bounced "
            f"({ended - began:.1f}s)"
        )


async def _chaos_through_bounces(
    cluster3: Cluster3, names: Names, tmp_path: Path, *, hard: bool
) -> None:
    dep, keys = _deployment(cluster3, names, tmp_path)
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        await recorder.ensure_ready()  # the topics, so the concurrent reader can follow them
    follower = Follower(cluster3.bootstrap, dep.topics)
    await follower.start()
    try:
        bounces = Bounces(cluster3, hard=hard)
        config = _config(bounces)
        chaos = Chaos(cluster3.bootstrap, dep, keys, tmp_path, config)
        bounces.chaos = chaos
        result = await chaos.run()
        what = "hard bounces" if hard else "a rolling restart"
        print(f"\nchaos through {what} on three nodes: {result.summary()}")
        _print_bounces(result)
        async with Auditor(dep.settings, settle_seconds=3.0, timeout=180) as auditor:
            report = await auditor.audit()  # the workers are stopped: the log as it stays
        print(f"turnlog audit once the workers stopped: {json.dumps(report.summary())}")
        await _follower_saw_the_same(follower, result)
    finally:
        await follower.stop()

    # The chaos's own audit, once drained and before any repair: nothing to heal on three nodes.
    assert result.audit is not None
    assert result.audit.found == [], "\n".join(v.line() for v in result.audit.found)
    _assert_chaos(result, config)
    # The input set equals the output set: each answered pause resumed once, by its winner.
    assert result.outputs.resumed == Counter(result.expected.resumes.items())
    _check_audit(report, result)

    # Every node was bounced, with answers arriving and workers committing while it was, and
    # bounces found transactions open (each waits for one, a while).
    assert len(result.faults) == len(NODES)
    assert sum(n > 0 for n in bounces.open_at_fault) >= 2, bounces.open_at_fault
    submitted = [a.submitted for a in result.inputs]
    commits = [t for times in result.commits.values() for t in times]
    for began, ended in result.faults:
        assert any(began <= t <= ended for t in submitted), (began, ended)
        assert any(began <= t <= ended for t in commits), (began, ended)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_the_chaos_lives_through_a_rolling_restart_of_three_nodes(
    cluster3: Cluster3, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each node in turn stopped with a controlled shutdown and started again, waited for until
    in sync, while workers are SIGKILLed and answers stream: every output exactly once, by the
    count, by turnlog audit (nothing to repair) and by a concurrent read_committed reader."""
    caplog.set_level(logging.CRITICAL, logger="aiokafka")  # this process's clients, retrying
    await _chaos_through_bounces(cluster3, names, tmp_path, hard=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_the_chaos_lives_through_hard_bounces_of_three_nodes(
    cluster3: Cluster3, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each node in turn SIGKILLed, held down until the controller fenced it, started again
    and waited for until in sync, while workers are SIGKILLed and answers stream: every output
    exactly once, by the count, by turnlog audit (nothing to repair) and by a concurrent
    read_committed reader."""
    caplog.set_level(logging.CRITICAL, logger="aiokafka")
    await _chaos_through_bounces(cluster3, names, tmp_path, hard=True)
