"""A paused turn survives the loss of its cluster: region A mirrored to region B by MirrorMaker 2
(active/passive), A's broker SIGKILLed while pauses and answers flow, ``turnlog region promote``,
answers continuing in B, and ``turnlog region audit`` judged against what the harness sent.

Two single-node clusters of the test's own and one MirrorMaker process; A's workers run as an
OS process (killed with their region), B's passive worker in this process, so the test can time
its takeover and see what its take restored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from tests.brokers import BrokerControlError, OwnBroker, free_ports
from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, sample_checkpoint, with_keyring
from tests.integration.chaos_support import record_pauses
from tests.integration.region_support import Mirror
from tests.integration.worker_proc import Proc, common_options, spawn
from tests.integration.worker_support import (
    committed_events,
    keyed_deployment,
    run_task,
    running_worker,
)
from tests.kafka_helpers import eventually, wait_until_consumed
from turnlog.audit.region_scan import audit_regions
from turnlog.contracts.events import AnswerRejected, TurnResumed
from turnlog.errors import TopicMismatch
from turnlog.kafka.groups import GroupStatus, group_status
from turnlog.kafka.topics import admin_client, ensure_topics
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.projections.store import Store
from turnlog.region.lag import mirror_lag, worst

pytest_plugins = ["tests.brokers"]

PARTITIONS = 3


async def _own(tmp: Path, label: str) -> OwnBroker:
    for attempt in range(3):
        broker = OwnBroker(tmp / f"{label}-{attempt}", free_ports(2))
        try:
            await broker.start()
            return broker
        except BrokerControlError:
            with contextlib.suppress(BrokerControlError):
                await broker.kill()
            if attempt == 2:
                raise
    raise BrokerControlError("unreachable")


@contextlib.asynccontextmanager
async def _regions(tmp: Path) -> AsyncIterator[tuple[OwnBroker, OwnBroker]]:
    a, b = await asyncio.gather(_own(tmp, "region-a"), _own(tmp, "region-b"))
    try:
        yield a, b
    finally:
        for broker in (a, b):
            with contextlib.suppress(BrokerControlError):
                await broker.kill()


def _cli(env: dict[str, str], *args: str) -> tuple[int, str, str, float]:
    import subprocess

    began = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "turnlog", *args], env=env, capture_output=True, text=True,
        timeout=180, check=False,
    )  # fmt: skip
    return ran.returncode, ran.stdout, ran.stderr, time.monotonic() - began


def _env(bootstrap: str, dep: Deployment, keys: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": bootstrap,
        "TURNLOG_TOPIC_PREFIX": dep.settings.topic_prefix,
        "TURNLOG_APPLICATION_ID": dep.settings.application_id,
        "TURNLOG_PARTITIONS": str(PARTITIONS),
        "TURNLOG_KEYS_DIR": str(keys),
        "TURNLOG_BROKER_TIMEOUT": "30",
    }


class _Arrivals:
    """When each answer (by id) appeared on B's answers topic: the mirror's latency, measured
    from outside MirrorMaker."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.seen: dict[str, float] = {}
        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
            isolation_level="read_committed", fetch_max_wait_ms=20,
        )  # fmt: skip
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        from turnlog.contracts.events import AnswerSubmitted
        from turnlog.wire.codec import decode

        while True:
            batch = await self._consumer.getmany(timeout_ms=100)
            now = time.monotonic()
            for records in batch.values():
                for r in records:
                    with contextlib.suppress(Exception):
                        self.seen.setdefault(decode(r.value, AnswerSubmitted).answer_id, now)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()


def _offsets(status: GroupStatus) -> dict[int, str]:
    return {p.partition: f"{p.committed}/{p.end}" for p in status.partitions}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _publish(
    publisher: AnswerPublisher, pause: RecordedPause, answer_id: str, timeout: float = 10.0
) -> bool:
    """One answer; True once acknowledged (False: the region went first)."""
    try:
        await asyncio.wait_for(
            publisher.publish(
                pause.token, ANSWER, **axes(pause.pause.checkpoint), answer_id=answer_id
            ),
            timeout,
        )
    except (TimeoutError, Exception):
        return False
    return True


async def test_region_a_lost_mid_flow_b_promoted_and_the_window_named(
    names: Names, tmp_path: Path
) -> None:
    async with _regions(tmp_path) as (broker_a, broker_b):
        dep_a, keys = keyed_deployment(
            broker_a.bootstrap, names.prefix, names.app, tmp_path, partitions=PARTITIONS
        )
        dep_b = with_keyring(
            dep_a.settings.with_(bootstrap_servers=broker_b.bootstrap), dep_a.keyring
        )
        # Region B's operator makes the topic set there first (same partitions, same configs).
        for dep in (dep_a, dep_b):
            admin = admin_client(dep.settings)
            await admin.start()
            try:
                await ensure_topics(admin, dep.topics)
            finally:
                await admin.close()
        mirror = Mirror(
            tmp_path / "mirror", broker_a.bootstrap, broker_b.bootstrap, names.prefix, names.app
        )
        worker_a: Proc | None = None
        arrivals = _Arrivals(broker_b.bootstrap, dep_b.topics.answers)
        try:
            await mirror.start()
            await arrivals.start()
            worker_a = spawn(
                "worker", tmp_path / "worker-a.log",
                *common_options(broker_a.bootstrap, names.prefix, names.app, keys, PARTITIONS),
                "--state", str(tmp_path / "state-a"),
            )  # fmt: skip
            await _flow(
                dep_a, dep_b, keys, tmp_path, broker_a, broker_b, mirror, worker_a, arrivals
            )
        finally:
            await arrivals.stop()
            if worker_a is not None and worker_a.alive():
                worker_a.kill()
            with contextlib.suppress(BrokerControlError):
                await mirror.kill()


async def _flow(
    dep_a: Deployment,
    dep_b: Deployment,
    keys: Path,
    tmp_path: Path,
    broker_a: OwnBroker,
    broker_b: OwnBroker,
    mirror: Mirror,
    worker_a: Proc,
    arrivals: _Arrivals,
) -> None:
    app, topics = dep_a.settings.application_id, dep_a.topics
    first = await record_pauses(dep_a, 120, "phase1")
    recorded = {p.pause.token_id: p for p in first}  # acknowledged by A
    acked: dict[str, float] = {}  # answer id -> when A acknowledged it
    tried: dict[str, RecordedPause] = {}  # answer id -> its pause, every answer sent to A
    async with running_worker(dep_b, tmp_path / "state-b", passive=True) as worker_b:
        async with AnswerPublisher(dep_a.settings, dep_a.verifier) as pub_a:

            async def answer_a(pause: RecordedPause, answer_id: str) -> None:
                tried[answer_id] = pause
                if await _publish(pub_a, pause, answer_id):
                    acked[answer_id] = time.monotonic()

            # Phase 1: half the pauses answered and resumed in A, all of it mirrored.
            await asyncio.gather(*(answer_a(p, f"a1-{p.pause.token_id}") for p in first[:60]))
            await wait_until_consumed(broker_a.bootstrap, app, topics.answers, timeout=120)

            async def mirrored() -> bool:
                lags = await mirror_lag(
                    dep_a.settings.connection, dep_b.settings.connection, topics
                )
                return worst(lags)[0] == 0

            await eventually(mirrored, timeout=120, interval=0.5)

            async def warm() -> bool:
                return worker_b.standby_current

            await eventually(warm, timeout=60, interval=0.1)
            assert worker_b.owned == [] and worker_b.promotion is None
            group_a = await group_status(dep_a.settings.connection, app, topics.answers)

            # Phase 2: pauses recorded and answered in A at ~50/s; A's broker SIGKILLed mid-run.
            # One transaction at a time per recorder: record() on one recorder from several
            # tasks at once fails (aiokafka: IN_TRANSACTION -> IN_TRANSACTION), so four
            # recorders, each behind its lock.
            recorders = [PauseRecorder(dep_a.settings, dep_a.issuer) for _ in range(4)]
            locks = [asyncio.Lock() for _ in recorders]

            async def record(name: str, n: int) -> RecordedPause:
                async with locks[n % len(recorders)]:
                    made = await asyncio.wait_for(
                        recorders[n % len(recorders)].record(
                            sample_checkpoint(name), request_json=REQUEST
                        ),
                        10,
                    )
                recorded[made.pause.token_id] = made
                return made

            stop_flow = asyncio.Event()
            phase2_ms = int(time.time() * 1000)

            async def flow() -> None:
                pending: list[asyncio.Task[None]] = []
                for i in range(400):
                    if stop_flow.is_set():
                        break
                    if i < 55:  # the last five are kept for region A's return (failback)
                        p = first[60 + i]
                        pending.append(asyncio.create_task(answer_a(p, f"a2-{p.pause.token_id}")))

                    async def pause_and_answer(n: int) -> None:
                        with contextlib.suppress(Exception):  # A gone: not recorded
                            made = await record(f"phase2-{n}", n)
                            if n % 2 == 0:
                                await answer_a(made, f"a2-{made.pause.token_id}")

                    pending.append(asyncio.create_task(pause_and_answer(i)))
                    await asyncio.sleep(0.02)  # the flow's pace, not a wait for a condition
                await asyncio.gather(*pending)

            flowing = asyncio.create_task(flow())

            async def midway() -> bool:
                return sum(1 for a in acked if a.startswith("a2-")) >= 30

            await eventually(midway, timeout=60, interval=0.01)
            # The mirror stalls (SIGSTOP) a moment before the loss: what A takes meanwhile --
            # these five pauses, three of them answered -- is certainly in the window.
            mirror.freeze()
            stalled = list(await asyncio.gather(*(record(f"stalled-{n}", n) for n in range(5))))
            for made in stalled[:3]:
                await answer_a(made, f"a2-{made.pause.token_id}")
            assert all(f"a2-{m.pause.token_id}" in acked for m in stalled[:3])
            await broker_a.kill()
            killed_ms, killed = int(time.time() * 1000), time.monotonic()
            worker_a.kill()  # the region's workers go with it
            stop_flow.set()
            await flowing
            await mirror.kill()
            await asyncio.gather(
                *(asyncio.wait_for(r.close(), 10) for r in recorders), return_exceptions=True
            )

        # Region A is gone. Nothing has promoted B: its worker still answers nothing.
        assert worker_b.owned == [] and worker_b.promotion is None
        # What MirrorMaker's checkpoints made of the group's offsets in B (printed below).
        group_b = await group_status(dep_b.settings.connection, app, topics.answers)
        env_b = _env(broker_b.bootstrap, dep_b, keys)
        rc, out, err, _ = _cli(
            env_b, "region", "promote", "--by", "harness", "--reason", "region A lost",
            "--source", broker_a.bootstrap,
        )  # fmt: skip
        promoted = time.monotonic()
        assert rc == 0, err
        assert out.startswith("region B promoted by harness at "), out

        async def ready() -> bool:
            return worker_b.ready and sorted(worker_b.owned) == list(range(PARTITIONS))

        await eventually(ready, timeout=90, interval=0.02)
        ready_after = time.monotonic() - promoted
        assert worker_b.promotion is not None and worker_b.promotion.by == "harness"
        take = worker_b.stats.takes[-1]
        assert sorted(take["warm"]) == list(range(PARTITIONS))  # taken from the warm copies

        # Phase 3, in B: a client that heard nothing from A sends again (same id) -- half of
        # them; the pauses nobody answered get answers; turns A resumed are answered again.
        phase2 = sorted(a for a in tried if a.startswith("a2-"))
        resent = phase2[::2]
        unanswered = [
            p for t, p in recorded.items()
            if not any(a.endswith(t) for a in tried)
        ]  # fmt: skip
        replays = first[:20]
        # Five pauses A recorded and mirrored, left for region A once it is back (failback).
        kept = first[115:]
        assert all(p in unanswered for p in kept)
        unanswered = [p for p in unanswered if p not in kept]
        async with AnswerPublisher(dep_b.settings, dep_b.verifier) as pub_b:
            sends = [(tried[a], a) for a in resent]
            sends += [(p, f"b-{p.pause.token_id}") for p in unanswered]
            sends += [(p, f"again-{p.pause.token_id}") for p in replays]
            done = await asyncio.gather(*(_publish(pub_b, p, a, 30) for p, a in sends))
            assert all(done)
        await wait_until_consumed(broker_b.bootstrap, app, topics.answers, timeout=120)

        # A comes back (its brokers only: its workers stay down) to be audited across.
        await broker_a.start()
        began = time.monotonic()
        rc, out, err, _ = _cli(env_b, "region", "audit", "--source", broker_a.bootstrap, "--json")
        audit_seconds = time.monotonic() - began
        assert rc in (0, 1), err
        report = json.loads(out)
        assert rc == (0 if report["clean"] else 1)

        await _judge(report, dep_a, dep_b, broker_a, broker_b, tried, acked, recorded, replays)
        # What A took while the mirror stalled is named: every pause missing in B, every
        # answer lost or, sent again to B, refused for its pause, never resumed there.
        missing = {x["token_id"] for x in report["pauses_missing"]}
        lost = {x["answer_id"] for x in report["answers_lost"]}
        assert {m.pause.token_id for m in stalled} <= missing
        for made in stalled[:3]:
            answer_id = f"a2-{made.pause.token_id}"
            assert answer_id in lost or answer_id in report["refused_unmirrored_pause"]
        assert report["refused_unmirrored_pause"]  # at least the two answered first in B
        if report["window"] is not None:
            first_ms, last_ms = report["window"]
            assert phase2_ms - 1000 <= first_ms <= last_ms <= killed_ms + 1000, (report, killed_ms)

        # The figures: mirror latency (A's ack to B's copy), the window, B's takeover.
        # Phase 1's answers went out while MirrorMaker's task was still starting: the steady
        # state is phase 2's, up to the kill (an answer sent again to B arrives there later).
        latency = [
            arrivals.seen[a] - t
            for a, t in acked.items()
            if a[:3] == "a2-" and arrivals.seen.get(a, killed) < killed
        ]
        cold = Store.open(tmp_path / "cold-b")
        try:
            from turnlog.cli.common import caught_up

            t0 = time.monotonic()
            cold_records = await caught_up(cold, dep_b.settings)
            cold_seconds = time.monotonic() - t0
        finally:
            cold.close()
        s = report
        print(
            f"\nregions: mirror latency p50 {statistics.median(latency) * 1000:.0f} ms, "
            f"p99 {_pct(latency, 0.99) * 1000:.0f} ms over {len(latency)} answers; window "
            f"{None if s['window'] is None else (s['window'][1] - s['window'][0]) / 1000} s held "
            f"{s['unmirrored']}; answers lost {len(s['answers_lost'])}, pauses missing "
            f"{len(s['pauses_missing'])}, resumed in both {len(s['tokens_resumed_in_both'])} "
            f"({s['doubled_with_distinct_events']} under distinct ids), refused for an "
            f"unmirrored pause {len(s['refused_unmirrored_pause'])}; ready in B "
            f"{ready_after:.2f} s after the promotion (its take read "
            f"{sum(take['records'].values())} records in {take['seconds']:.2f} s; a cold "
            f"restore of B read {cold_records} in {cold_seconds:.2f} s); B refused "
            f"{worker_b.stats.rejected}, duplicates {worker_b.stats.duplicates}; audit "
            f"{audit_seconds:.1f} s; the group's offsets after phase 1 in A "
            f"{_offsets(group_a)}, translated into B by the loss {_offsets(group_b)}; "
            f"read with transactions still open: {s['unsettled']}"
        )

        # Failback: A rebuilt from B, then promoted again.
        async def stop_b() -> None:
            worker_b.request_stop()
            await run_task(worker_b)

        await _failback(dep_a, dep_b, keys, tmp_path, broker_a, broker_b, stop_b, kept, replays)


async def _failback(
    dep_a: Deployment,
    dep_b: Deployment,
    keys: Path,
    tmp_path: Path,
    broker_a: OwnBroker,
    broker_b: OwnBroker,
    stop_b: Callable[[], Awaitable[None]],
    kept: list[RecordedPause],
    resumed: list[RecordedPause],
) -> None:
    """docs/operations/regions.md's failback: A's topics deleted and made again, B mirrored
    into A, A's passive worker promoted once B's stopped; nothing resumed again in A."""
    app, topics = dep_a.settings.application_id, dep_a.topics
    names = [spec.name for spec in topics.specs()]
    admin = admin_client(dep_a.settings)
    await admin.start()
    try:
        await admin.delete_topics(names)

        async def deleted() -> bool:
            return not set(names) & set(await admin.list_topics())

        await eventually(deleted, timeout=60, interval=0.2)

        async def made() -> bool:
            try:
                await ensure_topics(admin, topics)
            except TopicMismatch:  # "marked for deletion" a moment longer
                return False
            return True

        await eventually(made, timeout=60, interval=0.5)
    finally:
        await admin.close()
    back = Mirror(
        tmp_path / "mirror-back",
        broker_b.bootstrap,
        broker_a.bootstrap,
        dep_a.settings.topic_prefix,
        app,
    )
    try:
        await back.start()
        async with running_worker(dep_a, tmp_path / "state-a-again", passive=True) as worker_a:

            async def caught_up() -> bool:
                lags = await mirror_lag(
                    dep_b.settings.connection, dep_a.settings.connection, topics
                )
                return worst(lags)[0] == 0

            await eventually(caught_up, timeout=120, interval=0.5)
            await stop_b()
            await eventually(caught_up, timeout=60, interval=0.5)
            await back.kill()
            assert worker_a.owned == [] and worker_a.promotion is None
            env_a = _env(broker_a.bootstrap, dep_a, keys)
            promote = (
                "region",
                "promote",
                "--by",
                "harness",
                "--region",
                "A",
                "--source",
                broker_b.bootstrap,
            )
            rc, _, err, _ = _cli(env_a, *promote)
            assert rc == 1 and "still answers" in err  # B's brokers are up: said, not done
            rc, out, err, _ = _cli(env_a, *promote, "--force")
            assert rc == 0 and out.startswith("region A promoted by harness"), err

            async def ready() -> bool:
                return worker_a.ready and sorted(worker_a.owned) == list(range(PARTITIONS))

            await eventually(ready, timeout=90, interval=0.05)
            async with AnswerPublisher(dep_a.settings, dep_a.verifier) as pub:
                sends = [(p, f"back-{p.pause.token_id}") for p in kept + resumed]
                assert all(await asyncio.gather(*(_publish(pub, p, a, 30) for p, a in sends)))
            await wait_until_consumed(broker_a.bootstrap, app, topics.answers, timeout=120)
    finally:
        with contextlib.suppress(BrokerControlError):
            await back.kill()
    resumes = [
        e
        for e in await committed_events(broker_a.bootstrap, topics.resumed)
        if isinstance(e, TurnResumed)
    ]
    refusals = {
        e.answer_id: e.reason
        for e in await committed_events(broker_a.bootstrap, topics.rejections)
        if isinstance(e, AnswerRejected)
    }
    by_token: dict[str, list[str]] = {}
    for e in resumes:
        by_token.setdefault(e.token_id, []).append(e.answer_id)
    for p in kept:  # answered for the first time, in A again: resumed once
        assert by_token.get(p.pause.token_id) == [f"back-{p.pause.token_id}"]
    for p in resumed:  # resumed before the failover, in A: refused as spent, not resumed again
        assert refusals.get(f"back-{p.pause.token_id}") == "already_consumed"
        assert f"back-{p.pause.token_id}" not in by_token.get(p.pause.token_id, [])
    # Everything B held is in the rebuilt A: nothing lost or doubled on the way back.
    report = await audit_regions(dep_b.settings.connection, dep_a.settings.connection, topics)
    assert report.clean and report.window is None, report.summary()


async def _judge(
    report: dict[str, Any],
    dep_a: Deployment,
    dep_b: Deployment,
    broker_a: OwnBroker,
    broker_b: OwnBroker,
    tried: dict[str, RecordedPause],
    acked: dict[str, float],
    recorded: dict[str, RecordedPause],
    replays: list[RecordedPause],
) -> None:
    """The audit against what the harness sent, read from both logs by the harness itself."""
    from turnlog.contracts.events import AnswerSubmitted, PauseRecorded

    topics = dep_a.topics
    logs = {}
    for region, broker in (("A", broker_a), ("B", broker_b)):
        logs[region] = {
            role: await committed_events(broker.bootstrap, name)
            for role, name in (
                ("pauses", topics.pauses), ("answers", topics.answers),
                ("resumed", topics.resumed), ("rejections", topics.rejections),
            )
        }  # fmt: skip
    pauses_b = {e.token_id for e in logs["B"]["pauses"] if isinstance(e, PauseRecorded)}
    answers_b = {e.answer_id for e in logs["B"]["answers"] if isinstance(e, AnswerSubmitted)}
    missing = {x["token_id"] for x in report["pauses_missing"]}
    lost = {x["answer_id"] for x in report["answers_lost"]}
    # Every pause A acknowledged is in B or named missing; every answer A acknowledged is in B
    # or named lost; nothing is named that the harness did not send.
    # A single-node A SIGKILLed can lose a committed transaction's marker at its restart
    # (KAFKA-20734, docs/guarantees.md): the partition stays blocked behind it, and the audit
    # names that partition as not read to its end instead of the records behind it.
    blocked = set(report["unsettled"].get(broker_a.bootstrap, []))

    def unread(topic: str, pause: RecordedPause) -> bool:
        return f"{topic}[{pause.partition}]" in blocked

    for t in recorded:
        if t not in pauses_b and t not in missing:
            assert unread(topics.pauses, recorded[t]), (t, report["unsettled"])
    for a in acked:
        if a not in answers_b and a not in lost:
            assert unread(topics.answers, tried[a]), (a, report["unsettled"])
    assert lost <= set(tried) and not lost & answers_b
    # Every token resumed in both regions is named, and only those: resumes told apart by
    # event id and occurred_at (a mirrored copy keeps both).
    seen: dict[str, set[tuple[str, Any]]] = {}
    for region in ("A", "B"):
        for e in logs[region]["resumed"]:
            if isinstance(e, TurnResumed):
                seen.setdefault(e.token_id, set()).add((e.event_id, e.occurred_at))
    doubled = {t for t, resumes in seen.items() if len(resumes) > 1}
    named = {d["token_id"]: d for d in report["tokens_resumed_in_both"]}
    assert doubled == set(named), (doubled, named)
    for token, d in named.items():
        assert d["same_event"] == (len({ev for ev, _ in seen[token]}) == 1)
    # Turns A resumed and B had mirrored, answered again in B: refused, never resumed again.
    refusals_b = {
        e.answer_id: e.reason for e in logs["B"]["rejections"] if isinstance(e, AnswerRejected)
    }
    # (Those A resumed: on a loaded machine A's worker has refused a phase-1 answer
    # no_recorded_turn_state, its catch-up read ending before the pause's commit marker.)
    resumed_a = {e.token_id for e in logs["A"]["resumed"] if isinstance(e, TurnResumed)}
    spent = [p for p in replays if p.pause.token_id in resumed_a]
    assert len(spent) >= len(replays) // 2, (len(spent), len(replays))
    for p in spent:
        assert refusals_b.get(f"again-{p.pause.token_id}") == "already_consumed"
        assert p.pause.token_id not in doubled
    # An answer in B to a pause never mirrored: refused by name, and counted in the window.
    for answer_id, reason in refusals_b.items():
        token = answer_id.split("-", 1)[1] if "-" in answer_id else ""
        if token in missing:
            assert reason == "no_recorded_turn_state", (answer_id, reason)
            assert answer_id in report["refused_unmirrored_pause"]
