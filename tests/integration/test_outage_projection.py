"""The checkpoint projector rides out its broker (issue 11, item 3).

Before, a following projector said nothing at all while its broker was gone (aiokafka retried
inside every fetch and logged an ERROR line ten times a second), and a projector started while
the broker was down failed at once with ``KafkaConnectionError``. Here the broker is stopped
under a following projector for twenty seconds with pauses written before and after: the
projector never exits, says once that the broker went and once that it came back, and the store
ends up holding every pause, each applied exactly once. A broker that never comes back ends it
with ``BrokerUnavailable`` after the outage budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.brokers import OwnBroker
from tests.conftest import Names
from tests.deployment import REQUEST, Deployment, make_deployment, sample_checkpoint
from tests.kafka_helpers import eventually
from turnlog.errors import BrokerUnavailable
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.projections.projector import CheckpointProjector
from turnlog.projections.store import Store

pytest_plugins = ["tests.brokers"]

OUTAGE_SECONDS = 20.0
LOGGER = "turnlog.projections.projector"


async def _record(dep: Deployment, prefix: str, count: int) -> list[RecordedPause]:
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        return [
            await recorder.record(sample_checkpoint(f"{prefix}-{i}"), request_json=REQUEST)
            for i in range(count)
        ]


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and text in r.getMessage()]


def _logged(
    caplog: pytest.LogCaptureFixture, text: str, times: int = 1
) -> Callable[[], Awaitable[list[str]]]:
    """A check for :func:`eventually`: ``text`` has been logged at least ``times`` times."""

    async def check() -> list[str]:
        lines = _lines(caplog, text)
        return lines if len(lines) >= times else []

    return check


@asynccontextmanager
async def _following(projector: CheckpointProjector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(projector.follow(poll_ms=100))
    try:
        yield task
    finally:
        projector.request_stop()
        await asyncio.wait_for(task, 30)  # raises whatever ended it


async def _applied(store: Store, pauses: list[RecordedPause], topic: str) -> bool:
    offsets = store.offsets()
    return all(offsets.get((topic, p.partition), 0) > p.offset for p in pauses)


async def test_projector_rides_out_a_stopped_broker(
    own_broker: OwnBroker, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnlog")
    dep = make_deployment(
        own_broker.bootstrap, names.prefix, names.app, tmp_path / "s", partitions=3
    )
    topic = dep.topics.pauses
    before = await _record(dep, "before", 6)
    store = Store.open(tmp_path / "projection")
    try:
        async with (
            CheckpointProjector(own_broker.bootstrap, store, dep.topics) as projector,
            _following(projector) as follower,
        ):
            await eventually(lambda: _applied(store, before, topic), timeout=30)

            await own_broker.stop()
            held = asyncio.create_task(asyncio.sleep(OUTAGE_SECONDS))  # holds the outage
            await eventually(_logged(caplog, "broker unreachable"), timeout=OUTAGE_SECONDS)
            await held
            assert not follower.done()
            await own_broker.start()

            after = await _record(dep, "after", 6)
            await eventually(lambda: _applied(store, before + after, topic), timeout=60)
            await eventually(_logged(caplog, "reachable again"), timeout=30)
            assert not follower.done(), "the projector stopped following during the outage"

        everything = before + after
        assert projector.stats.applied == len(everything), "a pause was applied twice"
        assert projector.stats.skipped == 0
        for pause in everything:
            [stored] = store.list_checkpoints(pause.thread_id)
            assert stored == store.latest(pause.thread_id)
            assert store.pause_for_token(pause.token_id) is not None
        last: dict[int, int] = {}
        for pause in everything:
            last[pause.partition] = max(last.get(pause.partition, -1), pause.offset)
        # Up to the last pause of each partition, and not beyond it.
        assert {p: o for (t, p), o in store.offsets().items() if t == topic} == {
            p: o + 1 for p, o in last.items()
        }
    finally:
        store.close()

    assert len(_lines(caplog, "broker unreachable")) == 1
    assert len(_lines(caplog, "reachable again")) == 1
    assert projector.outage.outages == 1


async def test_projector_started_or_catching_up_in_an_outage_waits_for_the_broker(
    own_broker: OwnBroker, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``turnlog project`` and ``rebuild`` start, then catch up: both wait an outage out."""
    caplog.set_level(logging.INFO, logger="turnlog")
    hold = 6.0
    dep = make_deployment(
        own_broker.bootstrap, names.prefix, names.app, tmp_path / "s", partitions=3
    )
    first = await _record(dep, "first", 3)
    store = Store.open(tmp_path / "projection")
    projector = CheckpointProjector(own_broker.bootstrap, store, dep.topics, call_timeout=2.0)
    try:
        await own_broker.stop()
        starting = asyncio.create_task(projector.start())
        await eventually(_logged(caplog, "broker unreachable"), timeout=hold)
        await asyncio.sleep(hold)  # holds the outage
        assert not starting.done()
        await own_broker.start()
        await asyncio.wait_for(starting, 30)
        assert len(_lines(caplog, "reachable again")) == 1

        second = await _record(dep, "second", 3)
        await own_broker.stop()
        catching_up = asyncio.create_task(projector.catch_up(timeout=120))
        await eventually(_logged(caplog, "broker unreachable", times=2), timeout=hold + 10)
        await asyncio.sleep(hold)  # holds the outage
        assert not catching_up.done()
        await own_broker.start()
        applied = await asyncio.wait_for(catching_up, 60)

        assert applied == len(first + second) == projector.stats.applied
        assert await _applied(store, first + second, dep.topics.pauses)
    finally:
        await projector.stop()
        store.close()
    assert len(_lines(caplog, "broker unreachable")) == 2
    assert len(_lines(caplog, "reachable again")) == 2


async def test_projector_gives_up_after_its_outage_budget(
    own_broker: OwnBroker, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(
        own_broker.bootstrap, names.prefix, names.app, tmp_path / "s", partitions=3
    )
    before = await _record(dep, "before", 2)
    budget = 3.0
    store = Store.open(tmp_path / "projection")
    try:
        projector = CheckpointProjector(
            own_broker.bootstrap, store, dep.topics, broker_timeout=budget
        )
        await projector.start()
        try:
            follower = asyncio.create_task(projector.follow(poll_ms=100))
            await eventually(lambda: _applied(store, before, dep.topics.pauses), timeout=30)
            await own_broker.stop()
            loop = asyncio.get_running_loop()
            stopped_at = loop.time()
            with pytest.raises(BrokerUnavailable, match=r"unreachable for \d+s \(budget 3s"):
                await asyncio.wait_for(follower, budget + 20)
            assert loop.time() - stopped_at >= budget
        finally:
            await projector.stop()

        # Started while the broker is down: it waits, then gives up the same way.
        late = CheckpointProjector(own_broker.bootstrap, store, dep.topics, broker_timeout=budget)
        try:
            with pytest.raises(BrokerUnavailable, match="budget 3s"):
                await asyncio.wait_for(late.start(), budget + 20)
        finally:
            await late.stop()
    finally:
        store.close()
