"""The resume worker rides out its broker (issue 11): a stopped broker, a killed partition leader.

Before, a stopped broker ended the worker about three seconds later with a traceback. Here the
broker goes away in the middle of a stream of answers and comes back; the worker never exits,
says once that the broker went and once that it came back, and afterwards every pause is resumed
exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path

import pytest

from tests.brokers import Cluster3, OwnBroker
from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, sample_checkpoint, with_keyring
from tests.integration.worker_support import (
    Follower,
    keyed_deployment,
    of_type,
    run_task,
    running_worker,
    wait_owned,
)
from tests.kafka_helpers import eventually
from turnlog.contracts.events import TokenConsumed, TurnResumed
from turnlog.kafka.reader import LogReader
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder, RecordedPause

pytest_plugins = ["tests.brokers"]

PARTITIONS = 6


async def _pauses(dep: Deployment, prefix: str, count: int) -> list[RecordedPause]:
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        return [
            await recorder.record(sample_checkpoint(f"{prefix}-{i}"), request_json=REQUEST)
            for i in range(count)
        ]


async def _publish_stream(dep: Deployment, pauses: list[RecordedPause], gap: float) -> None:
    """One answer per pause, ``gap`` seconds apart (a stream, not a burst)."""
    async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
        for pause in pauses:
            await publisher.publish(pause.token, ANSWER, **axes(pause.pause.checkpoint))
            await asyncio.sleep(gap)  # pacing the stream, not waiting for a condition


async def _exactly_once(dep: Deployment, bootstrap: str, pauses: list[RecordedPause]) -> None:
    follower = Follower(bootstrap, dep.topics)
    await follower.start()
    try:
        for pause in pauses:
            await follower.wait_for(lambda p=pause: follower.resumed(p.token_id), timeout=90)
        # Everything is there; nothing is there twice.
        resumed = Counter(t.token_id for t in of_type(follower.events, TurnResumed))
        consumed = Counter(c.token_id for c in of_type(follower.events, TokenConsumed))
    finally:
        await follower.stop()
    tokens = {p.token_id for p in pauses}
    assert set(resumed) == tokens and set(consumed) == tokens
    assert set(resumed.values()) == {1} and set(consumed.values()) == {1}
    assert follower.rejections() == []


async def test_a_broker_stopped_mid_stream_is_ridden_out(
    own_broker: OwnBroker, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="turnlog")
    dep, _ = keyed_deployment(own_broker.bootstrap, names.prefix, names.app, tmp_path)
    pauses = await _pauses(dep, f"outage-{names.app}", 30)
    async with running_worker(dep, tmp_path / "w", expiry_interval=0.5) as worker:
        await wait_owned([worker], PARTITIONS)
        stream = asyncio.create_task(_publish_stream(dep, pauses, gap=0.2))

        async def some_resumed() -> bool:
            return worker.stats.resumed >= 5

        await eventually(some_resumed, timeout=60)
        await own_broker.outage(22)
        await stream
        await _exactly_once(dep, own_broker.bootstrap, pauses)
        assert not run_task(worker).done(), "the worker exited"
        assert worker.stats.broker_outages >= 1
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("turnlog.consumers")]
    went = [m for m in lines if "broker unreachable" in m]
    back = [m for m in lines if "broker reachable again" in m]
    assert went and back, lines
    # One line each way per outage seen, never one per retry.
    assert len(went) == len(back) <= 2 * worker.stats.broker_outages


async def test_killing_the_partition_leader_loses_nothing(
    cluster3: Cluster3, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(cluster3.bootstrap, names.prefix, names.app, tmp_path)
    dep = with_keyring(dep.settings.with_(replication_factor=3), dep.keyring)
    pauses = await _pauses(dep, f"leader-{names.app}", 24)
    async with running_worker(dep, tmp_path / "w") as worker:
        await wait_owned([worker], PARTITIONS)
        stream = asyncio.create_task(_publish_stream(dep, pauses, gap=0.15))

        async def some_resumed() -> bool:
            return worker.stats.resumed >= 4

        await eventually(some_resumed, timeout=60)
        leader = await cluster3.leader_of(dep.topics.answers, pauses[-1].partition)
        await cluster3.kill_node(leader)
        await stream
        await _exactly_once(dep, cluster3.bootstrap, pauses)
        assert not run_task(worker).done(), "the worker exited"
        await cluster3.start_node(leader)


async def test_a_broker_gone_between_the_workers_two_clients_starting_is_waited_out(
    own_broker: OwnBroker, names: Names, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker starts its answers consumer, then its restore reader; the broker stops between
    the two. Before, the retry started the answers consumer a second time and the worker died
    of aiokafka's "Did you call `start` twice?" (seen in the outage chaos test, where a worker
    restarted during the outage). Now it waits the outage out, takes its partitions and resumes
    each pause once."""
    dep, _ = keyed_deployment(own_broker.bootstrap, names.prefix, names.app, tmp_path)
    pauses = await _pauses(dep, f"start-{names.app}", 6)
    real_start = LogReader.start
    reader_starts: list[float] = []

    async def start_once_the_broker_is_gone(self: LogReader) -> None:
        if not reader_starts:
            await own_broker.stop()  # the answers consumer has started; now the broker goes
        reader_starts.append(asyncio.get_running_loop().time())
        await real_start(self)

    monkeypatch.setattr(LogReader, "start", start_once_the_broker_is_gone)
    async with running_worker(dep, tmp_path / "w") as worker:

        async def retried_or_died() -> bool:
            return len(reader_starts) >= 2 or run_task(worker).done()

        await eventually(retried_or_died, timeout=90)
        assert not run_task(worker).done(), run_task(worker).exception()
        await own_broker.start()
        await wait_owned([worker], PARTITIONS, timeout=120)
        await _publish_stream(dep, pauses, gap=0)
        await _exactly_once(dep, own_broker.bootstrap, pauses)
        assert not run_task(worker).done(), "the worker exited"
