"""Exactly once under crashes, rebalances and zombies (issue 6), against the real broker.

Exactly once is checked on the log itself, read ``read_committed`` once everything is processed:
one ``TokenConsumed`` and one ``TurnResumed`` per pause, none missing, none twice, no rejection.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from aiokafka.errors import ProducerFenced

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, sample_checkpoint
from tests.integration.worker_proc import Proc, common_options, spawn
from tests.integration.worker_support import (
    committed_events,
    keyed_deployment,
    of_type,
    running_worker,
    wait_owned,
)
from tests.kafka_helpers import read_to_end, wait_until_consumed
from turnlog.consumers.ownership import PartitionOwner
from turnlog.consumers.worker import ResumeWorker
from turnlog.contracts.events import AnswerRejected, TokenConsumed, TurnResumed
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.projections.store import Store
from turnlog.topics import admin_client

SESSION_MS = 6000  # the broker's group.min.session.timeout.ms: the fastest a dead member goes


async def _record(
    dep: Deployment, count: int, prefix: str, writers: int = 10
) -> list[RecordedPause]:
    """``count`` pauses on distinct threads, recorded by ``writers`` recorders side by side."""
    recorders = [PauseRecorder(dep.settings, dep.issuer) for _ in range(writers)]
    await recorders[0].ensure_ready()

    async def write(i: int) -> list[RecordedPause]:
        return [
            await recorders[i].record(sample_checkpoint(f"{prefix}-{n}"), request_json=REQUEST)
            for n in range(i, count, writers)
        ]

    try:
        chunks = await asyncio.gather(*(write(i) for i in range(writers)))
    finally:
        for r in recorders:
            await r.close()
    return [pause for chunk in chunks for pause in chunk]


async def _answer(publisher: AnswerPublisher, pauses: list[RecordedPause]) -> None:
    await asyncio.gather(
        *(
            publisher.publish(
                p.token, ANSWER, **axes(p.pause.checkpoint), answer_id=f"answer-{p.token_id}"
            )
            for p in pauses
        )
    )


async def _assert_exactly_once(
    bootstrap: str, dep: Deployment, pauses: list[RecordedPause]
) -> dict[str, int]:
    consumed = of_type(await committed_events(bootstrap, dep.topics.consumptions), TokenConsumed)
    turns = of_type(await committed_events(bootstrap, dep.topics.resumed), TurnResumed)
    rejected = of_type(await committed_events(bootstrap, dep.topics.rejections), AnswerRejected)
    expected = {p.token_id: f"answer-{p.token_id}" for p in pauses}
    assert [(r.reason, r.detail) for r in rejected[:5]] == []
    consumed_count = Counter(c.token_id for c in consumed)
    resumed_count = Counter(t.token_id for t in turns)
    assert {t: n for t, n in consumed_count.items() if n != 1} == {}, "consumed twice"
    assert {t: n for t, n in resumed_count.items() if n != 1} == {}, "resumed twice"
    assert set(consumed_count) == set(expected), "a pause is missing or foreign"
    assert set(resumed_count) == set(expected), "a resume is missing or foreign"
    assert {c.token_id: c.answer_id for c in consumed} == expected
    assert {c.outcome for c in consumed} == {"resumed"}
    return {"consumed": len(consumed), "resumed": len(turns), "rejected": len(rejected)}


# -- zombies ----------------------------------------------------------------------------------


async def test_a_fenced_zombie_commit_is_refused_by_the_broker(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    async with PauseRecorder(dep.settings, dep.issuer):
        pass  # creates the topics
    topic, p = dep.topics.consumptions, 2
    zombie = PartitionOwner(bootstrap, names.app, dep.topics.answers, p)
    successor = PartitionOwner(bootstrap, names.app, dep.topics.answers, p)
    try:
        await zombie.fence()
        await zombie.producer.begin_transaction()
        written = await zombie.producer.send(topic, b"zombie", key=b"t\x00z", partition=p)
        await written  # on the broker, inside the zombie's open transaction
        await successor.fence()  # same transactional id: new epoch, zombie's transaction aborted
        with pytest.raises(ProducerFenced):
            await zombie.producer.commit_transaction()
        async with successor.producer.transaction():
            await successor.producer.send(topic, b"successor", key=b"t\x00s", partition=p)
    finally:
        await zombie.close()
        await successor.close()
    committed = await read_to_end(bootstrap, topic, isolation_level="read_committed")
    everything = await read_to_end(bootstrap, topic, isolation_level="read_uncommitted")
    assert [r.value for r in committed] == [b"successor"]
    assert [r.value for r in everything] == [b"zombie", b"successor"]  # written, then aborted


async def test_a_worker_fenced_mid_run_gives_up_and_retakes_its_partition(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """A worker whose producer is fenced behind its back (a new owner's InitProducerId) loses
    that batch, puts it back and takes the partition again: nothing lost, nothing doubled."""
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    pauses = await _record(dep, 12, "fenced", writers=3)
    target = pauses[0].partition
    on_target = [p for p in pauses if p.partition == target]
    async with (
        running_worker(dep, tmp_path / "w", session_timeout_ms=SESSION_MS) as worker,
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        await wait_owned([worker], dep.settings.partitions)
        usurper = PartitionOwner(bootstrap, names.app, dep.topics.answers, target)
        await usurper.fence()
        await usurper.close()
        await _answer(publisher, pauses)
        await wait_until_consumed(bootstrap, names.app, dep.topics.answers, timeout=60)
        stats = worker.stats
    counts = await _assert_exactly_once(bootstrap, dep, pauses)
    assert counts["consumed"] == len(pauses) and on_target
    assert stats.fenced == 1


# -- rebalances -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_workers_joining_and_leaving_resume_each_pause_exactly_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    pauses = await _record(dep, 600, "rebalance")
    chunks = [pauses[i : i + 30] for i in range(0, len(pauses), 30)]
    workers: dict[str, ResumeWorker] = {}
    overlaps: list[dict[int, list[str]]] = []
    stop_watch = asyncio.Event()

    async def watch() -> None:
        # Ownership is disjoint at every moment (sampled): revocation completes before a take.
        while not stop_watch.is_set():
            seen: dict[int, list[str]] = {}
            for name, w in workers.items():
                for p in w.owned:
                    seen.setdefault(p, []).append(name)
            if any(len(v) > 1 for v in seen.values()):
                overlaps.append(seen)
            await asyncio.sleep(0.02)

    async with (
        running_worker(dep, tmp_path / "a", session_timeout_ms=SESSION_MS) as a,
        running_worker(dep, tmp_path / "b", session_timeout_ms=SESSION_MS) as b,
        running_worker(dep, tmp_path / "c", session_timeout_ms=SESSION_MS) as c,
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        workers.update(a=a, b=b, c=c)
        watcher = asyncio.create_task(watch())
        owned_at_start = await wait_owned([a, b, c], 6)
        for chunk in chunks[:7]:
            await _answer(publisher, chunk)
        async with running_worker(dep, tmp_path / "d", session_timeout_ms=SESSION_MS) as d:
            workers["d"] = d  # joins mid-run
            for chunk in chunks[7:14]:
                await _answer(publisher, chunk)
            b.request_stop()  # leaves mid-run
            del workers["b"]
            for chunk in chunks[14:]:
                await _answer(publisher, chunk)
            owned_at_end = await wait_owned([a, c, d], 6)
            await wait_until_consumed(bootstrap, names.app, dep.topics.answers, timeout=120)
        stop_watch.set()
        await watcher
    counts = await _assert_exactly_once(bootstrap, dep, pauses)
    assert counts == {"consumed": 600, "resumed": 600, "rejected": 0}
    assert all(len(o) == 2 for o in owned_at_start), owned_at_start
    assert all(len(o) == 2 for o in owned_at_end), owned_at_end
    assert overlaps == []


# -- crashes ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_sigkilled_worker_processes_resume_each_pause_exactly_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """2,000 pauses are answered while worker processes are SIGKILLed at random moments and
    restarted -- on a fresh state directory, or on the dead process's own (RocksDB after a
    crash) -- with one or two alive at any time."""
    total, min_kills = 2000, 12
    dep, keys = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    started = time.monotonic()
    pauses = await _record(dep, total, "crash")
    recorded_in = time.monotonic() - started
    options = common_options(bootstrap, names.prefix, names.app, keys, dep.settings.partitions)
    options += ["--session-timeout-ms", str(SESSION_MS), "--commit-delay", "0.15"]
    rng = random.Random()
    incarnations = 0
    all_procs: list[Proc] = []

    def start_worker(state: Path | None = None) -> Proc:
        nonlocal incarnations
        incarnations += 1
        state = state or tmp_path / f"state-{incarnations}"
        proc = spawn(
            "worker",
            tmp_path / f"worker-{incarnations}.log",
            *options,
            "--state",
            str(state),
            state=state,
        )
        all_procs.append(proc)
        return proc

    alive = [start_worker(), start_worker()]
    kills = reused = 0
    admin = admin_client(bootstrap)
    await admin.start()

    async def committed() -> int:
        offsets = await admin.list_consumer_group_offsets(names.app)
        return sum(max(o.offset, 0) for o in offsets.values())

    async def processing_again(mark: int, timeout: float = 30.0) -> None:
        """Until the group commits past ``mark``: the survivors are at work again (a kill
        during the session timeout that follows the previous one would only hit a waiting
        process)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await committed() > mark:
                return
            await asyncio.sleep(0.05)

    try:
        async with AnswerPublisher(dep.settings, dep.verifier) as publisher:

            async def publish() -> None:
                # Answers keep arriving through the chaos, so each kill finds work in flight.
                for i in range(0, total, 25):
                    await _answer(publisher, pauses[i : i + 25])
                    await asyncio.sleep(rng.uniform(0.3, 0.9))

            publishing = asyncio.create_task(publish())
            while kills < min_kills or not publishing.done():
                await processing_again(await committed())
                await asyncio.sleep(rng.uniform(0.0, 0.8))  # then a random moment
                victim = rng.choice(alive)
                victim.kill()
                kills += 1
                alive.remove(victim)
                reuse = kills % 2 == 0  # every other restart reopens the dead process's store
                reused += reuse
                alive.append(start_worker(victim.state if reuse else None))
            await publishing
            chaos_done = time.monotonic()
            await wait_until_consumed(bootstrap, names.app, dep.topics.answers, timeout=150)
            drained_in = time.monotonic() - chaos_done
        codes = [await p.terminate(timeout=60) for p in alive]
        assert codes == [0] * len(alive), "\n".join(p.tail() for p in alive)
    except BaseException:
        print("\n".join(p.tail(15) for p in all_procs[-4:]))
        raise
    finally:
        for p in all_procs:
            p.kill()
        await admin.close()
    counts = await _assert_exactly_once(bootstrap, dep, pauses)
    uncommitted = await read_to_end(
        bootstrap, dep.topics.consumptions, isolation_level="read_uncommitted", timeout=60
    )
    assert counts == {"consumed": total, "resumed": total, "rejected": 0}
    assert kills >= min_kills
    print(
        f"\ncrash test: {total} pauses recorded in {recorded_in:.1f}s, {kills} SIGKILLs "
        f"({reused} restarts on the dead store, {kills - reused} on a fresh one), "
        f"{incarnations} worker processes, drained {drained_in:.1f}s after the last kill, "
        f"{len(uncommitted) - total} consumption records of aborted transactions; {counts}"
    )
    # Every store a SIGKILL left behind opens again (RocksDB recovers it from its log).
    for state in {p.state for p in all_procs if p.state is not None}:
        if (state / "CURRENT").exists():
            with Store.open(state) as store:
                store.offsets()
