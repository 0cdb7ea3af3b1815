"""``ResumedTurns``, the downstream reader of the resumed topic, rides out its broker (issue 11).

Before, an iterator whose broker went away said nothing (aiokafka retried inside every fetch and
commit), a commit owed while the broker was down waited without end, stopping the iterator in an
outage could raise ``CancelledError``, and one started while the broker was down failed at once.
Here the broker is stopped for twenty seconds while the caller is still handling a turn, so that
turn's commit falls into the outage; turns written before and after are each handed out exactly
once, the iteration never ends, one line says the broker went and one that it came back, and the
group's offsets reach the end of the topic (a restarted reader would get nothing again). A
broker that never comes back ends the iteration with ``BrokerUnavailable`` after the budget.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.brokers import OwnBroker
from tests.conftest import Names
from tests.deployment import Deployment, make_deployment, sample_checkpoint
from tests.kafka_helpers import eventually
from turnlog.clock import utc_now
from turnlog.consumers.resumed import ResumedTurns
from turnlog.contracts.events import PauseExpired, TurnResumed
from turnlog.contracts.rehydration import rehydrate
from turnlog.errors import BrokerUnavailable
from turnlog.kafka.topics import admin_client, ensure_topics
from turnlog.wire.codec import encode

pytest_plugins = ["tests.brokers"]

OUTAGE_SECONDS = 20.0
LOGGER = "turnlog.consumers.resumed"


def _turn(thread_id: str) -> TurnResumed:
    cp = sample_checkpoint(thread_id)
    return TurnResumed(
        event_id=uuid.uuid4().hex,
        occurred_at=utc_now(),
        package_version="test",
        token_id=f"tok-{thread_id}",
        answer_id=f"ans-{thread_id}",
        run_id=cp.run_id,
        session_id=cp.session_id,
        thread_id=cp.thread_id,
        checkpoint_id=cp.checkpoint_id,
        interrupt_id=cp.interrupt_id,
        tool_call_id=cp.tool_call_id,
        name=cp.name,
        prompt=cp.prompt,
        response_json='{"answers":[{"selections":["eu"],"other":null}]}',
        history=rehydrate(cp, cp.tool_call_id, "region: eu"),
        answered=None,
    )


async def _deployment(bootstrap: str, names: Names, state: Path) -> Deployment:
    dep = make_deployment(bootstrap, names.prefix, names.app, state, partitions=3)
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        await ensure_topics(admin, dep.topics)
    finally:
        await admin.close()
    return dep


@dataclass(frozen=True)
class Written:
    tokens: list[str]
    ends: dict[int, int]  # partition -> the offset after its last turn written here

    def __add__(self, other: Written) -> Written:
        ends = dict(self.ends)
        for p, end in other.ends.items():
            ends[p] = max(ends.get(p, 0), end)
        return Written(self.tokens + other.tokens, ends)


async def _write(dep: Deployment, prefix: str, count: int) -> Written:
    """``count`` resumed turns, committed in one transaction as a resume worker writes them."""
    producer = AIOKafkaProducer(
        bootstrap_servers=dep.settings.bootstrap_servers,
        transactional_id=f"{dep.settings.application_id}.test.{uuid.uuid4().hex}",
    )
    await producer.start()
    try:
        threads = [f"{prefix}-{i}" for i in range(count)]
        async with producer.transaction():
            sent = [
                await producer.send(dep.topics.resumed, encode(_turn(t)), key=t.encode())
                for t in threads
            ]
        ends: dict[int, int] = {}
        for delivery in sent:
            meta = await delivery
            ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
        return Written([f"tok-{t}" for t in threads], ends)
    finally:
        await producer.stop()


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and text in r.getMessage()]


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> Callable[[], Awaitable[list[str]]]:
    async def check() -> list[str]:
        return _lines(caplog, text)

    return check


async def test_resumed_turns_ride_out_a_stopped_broker(
    own_broker: OwnBroker, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnlog")
    dep = await _deployment(own_broker.bootstrap, names, tmp_path / "s")
    before = await _write(dep, "before", 6)
    held_token = before.tokens[-1]
    seen: Counter[str] = Counter()
    handling = asyncio.Event()  # the caller is inside the body for the held turn
    broker_down = asyncio.Event()  # ... and leaves it only once the broker is gone

    turns = ResumedTurns(dep.settings, group_id=names.group)

    async def agent() -> None:
        async for event in turns:
            if not isinstance(event, TurnResumed):
                raise AssertionError(f"unexpected {type(event).__name__}")
            seen[event.token_id] += 1
            if event.token_id == held_token and seen[held_token] == 1:
                handling.set()
                await broker_down.wait()

    async def count(tokens: list[str]) -> bool:
        return all(seen[t] >= 1 for t in tokens)

    task = asyncio.create_task(agent())
    try:
        await asyncio.wait_for(handling.wait(), 60)

        await own_broker.stop()
        broker_down.set()  # the held turn's commit now falls into the outage
        held = asyncio.create_task(asyncio.sleep(OUTAGE_SECONDS))  # holds the outage
        await eventually(_logged(caplog, "broker unreachable"), timeout=OUTAGE_SECONDS)
        await held
        assert not task.done(), "the iteration ended during the outage"
        await own_broker.start()

        after = await _write(dep, "after", 6)
        await eventually(lambda: count(before.tokens + after.tokens), timeout=60)
        await eventually(_logged(caplog, "reachable again"), timeout=30)

        # Every handled turn's offset is committed: a restarted reader would get none again.
        # (Not "up to the end offset": the last transaction's commit marker sits there.)
        async def all_committed() -> bool:
            got = await _committed(own_broker.bootstrap, names.group, dep.topics.resumed)
            return got == (before + after).ends

        await eventually(all_committed, timeout=60)
        assert not task.done(), "the iteration ended"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await turns.stop()

    everything = (before + after).tokens
    assert seen == Counter({t: 1 for t in everything}), "a turn was lost or handed out twice"
    assert turns.skipped == 0
    assert len(_lines(caplog, "broker unreachable")) == 1
    assert len(_lines(caplog, "reachable again")) == 1
    assert turns.outage.outages == 1


async def test_resumed_turns_give_up_after_the_outage_budget(
    own_broker: OwnBroker, names: Names, tmp_path: Path
) -> None:
    dep = await _deployment(own_broker.bootstrap, names, tmp_path / "s")
    before = await _write(dep, "before", 2)
    budget = 3.0
    settings = dep.settings.with_(broker_timeout_seconds=budget)
    seen: list[str] = []

    async with ResumedTurns(settings, group_id=names.group) as turns:

        async def agent() -> None:
            async for event in turns:
                if isinstance(event, PauseExpired):
                    raise AssertionError("no pause expires here")
                seen.append(event.token_id)

        task = asyncio.create_task(agent())
        try:

            async def got_all() -> bool:
                return sorted(seen) == sorted(before.tokens)

            await eventually(got_all, timeout=60)
            await own_broker.stop()
            loop = asyncio.get_running_loop()
            stopped_at = loop.time()
            with pytest.raises(BrokerUnavailable, match=r"unreachable for \d+s \(budget 3s"):
                await asyncio.wait_for(task, budget + 20)
            assert loop.time() - stopped_at >= budget
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # Started while the broker is down: it waits, then gives up the same way.
    late = ResumedTurns(settings, group_id=names.group)
    try:
        with pytest.raises(BrokerUnavailable, match="budget 3s"):
            await asyncio.wait_for(late.start(), budget + 20)
    finally:
        await late.stop()
