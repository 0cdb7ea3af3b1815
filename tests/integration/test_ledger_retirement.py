"""The bounded ledger against the real broker: a row is retired, and its token stays unspendable.

Tokens are spent with short windows, a one-second leeway and no kept margin; once the window
and the leeway have passed, the owner tombstones each row on the consumptions topic and drops
it from its store. An old answer published again after that is refused by the clock
(``token_expired``, step 1) -- by the worker that retired the row, and by a worker whose store
was rebuilt from the topics. Neither expires the pause a second time, and the audit holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, sample_checkpoint, with_keyring
from tests.integration.worker_support import keyed_deployment, running_worker, wait_owned
from tests.kafka_helpers import eventually, read_to_end
from turnlog.audit.scan import Auditor
from turnlog.contracts.events import AnswerRejected, PauseExpired, TurnResumed
from turnlog.kafka.partitioning import consumption_key
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.projections import layout
from turnlog.projections.store import Store
from turnlog.wire.codec import decode

SPENT = 3


def rows(store: Store, family: str) -> int:
    return sum(1 for _ in store._scan(family, b"", None))


async def records(dep: Deployment, topic: str) -> list[Any]:
    return await read_to_end(dep.settings.bootstrap_servers, topic, timeout=30.0)


async def events(dep: Deployment, topic: str, cls: type[Any]) -> list[Any]:
    found = [decode(r.value) for r in await records(dep, topic) if r.value is not None]
    return [e for e in found if isinstance(e, cls)]


async def replay(dep: Deployment, answer_ids: set[str]) -> None:
    """Publish again, byte for byte, the answers records of ``answer_ids`` (a replayed log)."""
    producer = AIOKafkaProducer(bootstrap_servers=dep.settings.bootstrap_servers)
    await producer.start()
    try:
        for r in await records(dep, dep.topics.answers):
            if decode(r.value).answer_id in answer_ids:
                await producer.send_and_wait(
                    dep.topics.answers, r.value, key=r.key, partition=r.partition
                )
    finally:
        await producer.stop()


async def refused_again(dep: Deployment, answer_ids: set[str], copies: int) -> list[Any]:
    async def check() -> list[AnswerRejected]:
        found = await events(dep, dep.topics.rejections, AnswerRejected)
        mine = [r for r in found if r.answer_id in answer_ids]
        return mine if len(mine) >= copies * len(answer_ids) else []

    result: list[Any] = await eventually(check, timeout=60.0, interval=0.2)
    return result


async def swept_past(dep: Deployment, recorder: PauseRecorder, name: str) -> None:
    """Wait until the owner has expired a pause recorded now: its sweep then ran after every
    deadline of the spent tokens (the sweep of a retired row's pause would have come first)."""
    cp = sample_checkpoint(name)
    marker = await recorder.record(cp, request_json=REQUEST, ttl=timedelta(seconds=1))

    async def check() -> list[PauseExpired]:
        found = await events(dep, dep.topics.resumed, PauseExpired)
        return [e for e in found if e.token_id == marker.token_id]

    await eventually(check, timeout=60.0, interval=0.2)


def wait_for(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def poll() -> bool:
        return check()

    return poll


async def test_a_retired_row_s_answer_is_still_refused_by_the_clock(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    keyed, _ = keyed_deployment(
        bootstrap, names.prefix, names.app, tmp_path, partitions=2, leeway_seconds=1
    )
    dep = with_keyring(keyed.settings.with_(ledger_keep_seconds=0), keyed.keyring)
    tokens: dict[str, str] = {}  # token id -> thread
    async with (
        PauseRecorder(dep.settings, dep.issuer) as recorder,
        running_worker(dep, tmp_path / "worker", expiry_interval=0.2) as worker,
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        await wait_owned([worker], dep.settings.partitions)
        answers: set[str] = set()
        for i in range(SPENT):
            cp = sample_checkpoint(f"retire-{i}")
            # Long enough to be answered on a slow machine, short enough to close in the test.
            pause = await recorder.record(cp, request_json=REQUEST, ttl=timedelta(seconds=6))
            sent = await publisher.publish(pause.token, ANSWER, **axes(cp))
            tokens[pause.token_id] = cp.thread_id
            answers.add(sent.answer_id)

        store = worker.store
        await eventually(
            wait_for(lambda: all(store.ledger(t) for t in tokens)), timeout=30.0, interval=0.05
        )
        resumed = await events(dep, dep.topics.resumed, TurnResumed)
        assert {t.token_id for t in resumed} >= set(tokens)
        before = {f: rows(store, f) for f in (layout.LEDGER, layout.SPENT, layout.THREAD_TOKENS)}
        assert before == {layout.LEDGER: SPENT, layout.SPENT: SPENT, layout.THREAD_TOKENS: SPENT}

        # The window (6 s) and the leeway (1 s) pass; the owner retires the rows.
        await eventually(
            wait_for(lambda: not any(store.ledger(t) for t in tokens)), timeout=60.0, interval=0.1
        )
        after = {f: rows(store, f) for f in (layout.LEDGER, layout.SPENT, layout.THREAD_TOKENS)}
        assert after == {layout.LEDGER: 0, layout.SPENT: 0, layout.THREAD_TOKENS: 0}
        assert worker.stats.retired == SPENT
        keys = {consumption_key(thread, token): token for token, thread in tokens.items()}
        on_topic = [r for r in await records(dep, dep.topics.consumptions) if r.key in keys]
        assert sorted((keys[r.key], r.value is None) for r in on_topic) == sorted(
            [(t, False) for t in tokens] + [(t, True) for t in tokens]
        )  # each row, then its tombstone

        await replay(dep, answers)
        refused = await refused_again(dep, answers, copies=1)
        assert {(r.reason, r.step) for r in refused} == {("token_expired", 1)}
        await swept_past(dep, recorder, "marker-1")
        assert worker.store.ledger(next(iter(tokens))) is None  # not expired again

    # A worker that never saw any of it: its store rebuilt from the topics.
    async with (
        PauseRecorder(dep.settings, dep.issuer) as recorder,
        running_worker(dep, tmp_path / "rebuilt", expiry_interval=0.2) as rebuilt,
    ):
        await wait_owned([rebuilt], dep.settings.partitions)
        assert rebuilt.stats.restored_records > 0
        assert not any(rebuilt.store.ledger(t) for t in tokens)
        assert not set(tokens) & {p.token_id for p in rebuilt.store.retirable(2**62)}
        await replay(dep, answers)
        refused = await refused_again(dep, answers, copies=2)
        assert {(r.reason, r.step) for r in refused} == {("token_expired", 1)}
        await swept_past(dep, recorder, "marker-2")
        assert not any(rebuilt.store.ledger(t) for t in tokens)

    expiries = await events(dep, dep.topics.resumed, PauseExpired)
    assert [e for e in expiries if e.token_id in tokens] == []  # never expired: they resumed
    async with Auditor(dep.settings, settle_seconds=0.5, timeout=60) as auditor:
        report = await auditor.audit()
    assert report.holds, report.violations
