"""The checkpoint projection against a real broker: another process, a SIGKILL, rebuild, bad
bytes, and forgetting a thread through compaction."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from tests.conftest import REPO, Names
from tests.deployment import ANSWER, REQUEST, axes, make_deployment, sample_checkpoint
from tests.kafka_helpers import eventually, read_to_end
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import AnswerSubmitted, PauseRecorded, TokenConsumed
from turnlog.kafka.partitioning import answer_key, consumption_key, partition_for, pause_key
from turnlog.kafka.topics import TopicSet, admin_client, ensure_topics
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.forget import forget_thread
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.projections.projector import CheckpointProjector, rebuild
from turnlog.projections.store import Store
from turnlog.wire.codec import decode as decode_value
from turnlog.wire.codec import encode

MOMENT = datetime(2026, 1, 1, tzinfo=UTC)

# --- helpers ----------------------------------------------------------------------------------


def decode_pause(value: bytes | None) -> PauseRecorded:
    if value is None:
        raise AssertionError("no checkpoint stored")
    return decode_value(value, PauseRecorded)


def sequences(store: Store, thread_id: str) -> list[int]:
    return [decode_pause(v).checkpoint.sequence for v in store.list_checkpoints(thread_id)]


def consumed(pause: PauseRecorded, answer_id: str = "answer-1") -> TokenConsumed:
    """The consumption a resume worker commits for ``pause`` (written directly here)."""
    return TokenConsumed(
        event_id=uuid.uuid4().hex,
        occurred_at=MOMENT,
        package_version="test",
        token_id=pause.token_id,
        answer_id=answer_id,
        thread_id=pause.checkpoint.thread_id,
        checkpoint_id=pause.checkpoint.checkpoint_id,
        outcome="resumed",
    )


async def create_topic_set(bootstrap: str, topics: TopicSet) -> None:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        await ensure_topics(admin, topics)
    finally:
        await admin.close()


@asynccontextmanager
async def plain_producer(bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=20,
        max_batch_size=256 * 1024,
    )
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


async def send_consumption(
    producer: AIOKafkaProducer, topics: TopicSet, event: TokenConsumed
) -> tuple[int, int]:
    partition = partition_for(event.thread_id, topics.partitions)
    meta = await producer.send_and_wait(
        topics.consumptions,
        encode(event),
        key=consumption_key(event.thread_id, event.token_id),
        partition=partition,
    )
    return meta.partition, meta.offset


class ProjectorProcess:
    """``tests.integration.projector_proc`` running in a child process; reads its JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log

    async def next_event(self, timeout: float = 60.0) -> dict[str, Any]:
        if self.proc.stdout is None:
            raise AssertionError("the projector process has no stdout pipe")
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not line:
            await self.proc.wait()
            raise AssertionError(
                f"projector process ended (rc {self.proc.returncode}):\n{self.log.read_text()}"
            )
        event: dict[str, Any] = json.loads(line)
        return event

    async def until(
        self, accept: Callable[[dict[str, Any]], bool], timeout: float = 60.0
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = await self.next_event(timeout=max(0.1, deadline - loop.time()))
            if accept(event):
                return event

    async def wait(self, timeout: float = 30.0) -> int:
        return await asyncio.wait_for(self.proc.wait(), timeout)


@asynccontextmanager
async def projector_process(
    bootstrap: str, topics: TopicSet, state: Path, *, follow: bool, log: Path
) -> AsyncIterator[ProjectorProcess]:
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.projector_proc",
            "--bootstrap",
            bootstrap,
            "--prefix",
            topics.prefix,
            "--partitions",
            str(topics.partitions),
            "--state",
            str(state),
            "--follow" if follow else "--catch-up",
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        yield ProjectorProcess(proc, log)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


@asynccontextmanager
async def following(projector: CheckpointProjector) -> AsyncIterator[asyncio.Task[None]]:
    """``projector.follow()`` as a task, stopped (and its outcome raised) on leaving."""
    task = asyncio.create_task(projector.follow(poll_ms=100))
    try:
        yield task
    finally:
        projector.request_stop()
        await task


async def open_secondary(state: Path, secondary: Path) -> Store:
    """A read-only follower of another process's store, once that process has created it."""

    async def attempt() -> Store | None:
        if not (state / "CURRENT").is_file():
            return None
        return Store.open_secondary(state, secondary)

    store: Store = await eventually(attempt, timeout=30)
    return store


# --- another process --------------------------------------------------------------------------


async def test_pause_is_visible_in_a_projector_in_another_process(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    state = tmp_path / "projector"
    async with (
        PauseRecorder(dep.settings, dep.issuer) as recorder,  # creates the topics first
        projector_process(
            bootstrap, dep.topics, state, follow=True, log=tmp_path / "projector.log"
        ) as child,
    ):
        await child.until(lambda e: e["event"] == "started")
        # Written with sequences 1, 3, 2: the store keeps the log's order, not the sequence's
        # (a caller's own field, issue 39).
        recorded: dict[int, RecordedPause] = {}
        for seq in (1, 3, 2):
            cp = sample_checkpoint("thread-a", checkpoint_id=f"cp-{seq}", sequence=seq)
            recorded[seq] = await recorder.record(cp, request_json=REQUEST)
        other = await recorder.record(sample_checkpoint("thread-b"), request_json=REQUEST)

        reader = await open_secondary(state, tmp_path / "secondary")
        try:

            async def projected() -> bool:
                reader.catch_up()
                return len(reader.list_checkpoints("thread-a")) == 3 and (
                    reader.latest("thread-b") is not None
                )

            await eventually(projected, timeout=30)
            latest = decode_pause(reader.latest("thread-a"))
            assert latest.checkpoint.sequence == 2  # the last written
            assert latest.token_id == recorded[2].token_id
            assert sequences(reader, "thread-a") == [1, 3, 2]
            assert [
                decode_pause(v).checkpoint.checkpoint_id
                for v in reader.list_checkpoints("thread-a")
            ] == ["cp-1", "cp-3", "cp-2"]
            assert decode_pause(reader.latest("thread-b")).token_id == other.token_id
            found = reader.pause_for_token(recorded[1].token_id)
            assert found is not None and found.thread_id == "thread-a"
            assert found.order == recorded[1].offset  # its place: the offset it was written at
            assert reader.latest("thread-c") is None
            assert reader.list_checkpoints("thread-c") == []

            child.proc.send_signal(signal.SIGTERM)
            done = await child.until(lambda e: e["event"] == "done")
            assert await child.wait() == 0
            reader.catch_up()
            assert done["skipped"] == 0 and done["stats_applied"] == 4
            assert reader.digest() == done["digest"]
        finally:
            reader.close()


# --- rebuild ----------------------------------------------------------------------------------


async def test_rebuild_after_deleting_the_state_directory_matches_the_live_store(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    topics = dep.topics
    state = tmp_path / "live"
    written: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset written

    def wrote(topic: str, partition: int, offset: int) -> None:
        written[(topic, partition)] = max(written.get((topic, partition), -1), offset)

    store = Store.open(state)
    try:
        async with (
            PauseRecorder(dep.settings, dep.issuer) as recorder,
            CheckpointProjector(bootstrap, store, topics) as live,
            plain_producer(bootstrap) as producer,
            AsyncExitStack() as stack,
        ):
            follower = await stack.enter_async_context(following(live))
            pauses: dict[tuple[str, int], PauseRecorded] = {}
            for thread in ("thread-a", "thread-b", "thread-c"):
                for seq in (1, 2):
                    cp = sample_checkpoint(thread, checkpoint_id=f"cp-{seq}", sequence=seq)
                    rec = await recorder.record(cp, request_json=REQUEST)
                    pauses[(thread, seq)] = rec.pause
                    wrote(topics.pauses, rec.partition, rec.offset)
            # Spend two tokens, then take one consumption back (a tombstone re-opens its pause).
            for key in (("thread-a", 1), ("thread-b", 2)):
                wrote(
                    topics.consumptions,
                    *await send_consumption(producer, topics, consumed(pauses[key])),
                )
            gone = pauses[("thread-b", 2)]
            meta = await producer.send_and_wait(
                topics.consumptions,
                None,
                key=consumption_key("thread-b", gone.token_id),
                partition=partition_for("thread-b", topics.partitions),
            )
            wrote(topics.consumptions, meta.partition, meta.offset)
            # Drop one checkpoint with a pauses tombstone.
            meta = await producer.send_and_wait(
                topics.pauses,
                None,
                key=pause_key("thread-c", "cp-1"),
                partition=partition_for("thread-c", topics.partitions),
            )
            wrote(topics.pauses, meta.partition, meta.offset)

            async def applied_all() -> bool:
                offsets = store.offsets()
                return all(offsets.get(tp, 0) > last for tp, last in written.items())

            await eventually(applied_all, timeout=30)
            assert not follower.done()
        assert live.stats.skipped == 0
        live_digest = store.digest()
        assert store.ledger(pauses[("thread-a", 1)].token_id) is not None
        assert store.ledger(gone.token_id) is None
        assert sequences(store, "thread-c") == [2]
    finally:
        store.close()

    shutil.rmtree(state)
    assert not state.exists()
    rebuilt_digest = await rebuild(bootstrap, state, topics)
    assert rebuilt_digest == live_digest
    with Store.open_read_only(state) as rebuilt:
        assert rebuilt.digest() == live_digest
        assert sequences(rebuilt, "thread-a") == [1, 2]
        assert sequences(rebuilt, "thread-c") == [2]
        assert rebuilt.ledger(pauses[("thread-a", 1)].token_id) is not None


# --- SIGKILL in the middle of a replay --------------------------------------------------------

THREADS = 250
PER_THREAD = 100


def small_pause(thread_id: str, seq: int) -> PauseRecorded:
    cp = TurnCheckpoint(
        thread_id=thread_id,
        checkpoint_id=f"cp-{seq}",
        sequence=seq,
        run_id="run",
        session_id="session",
        name="ask_user",
        tool_call_id="call-1",
        created_at=MOMENT,
        messages=({"role": "user", "content": f"{thread_id}/{seq}"},),
    )
    return PauseRecorded(
        event_id=f"{thread_id}/{seq}",
        occurred_at=MOMENT,
        package_version="test",
        checkpoint=cp,
        token_id=f"tok-{thread_id}-{seq}",
        request_json=REQUEST,
        request_hash="-",
        response_schema="ask_user",
        expires_at=MOMENT + timedelta(days=365 * 10),
    )


async def preload(bootstrap: str, topics: TopicSet) -> int:
    """THREADS x PER_THREAD pauses and one consumption per thread, fast (no transactions)."""
    sent = []
    async with plain_producer(bootstrap) as producer:
        for t in range(THREADS):
            thread = f"thread-{t:04d}"
            partition = partition_for(thread, topics.partitions)
            for seq in range(1, PER_THREAD + 1):
                pause = small_pause(thread, seq)
                sent.append(
                    await producer.send(
                        topics.pauses,
                        encode(pause),
                        key=pause_key(thread, pause.checkpoint.checkpoint_id),
                        partition=partition,
                    )
                )
            spend = consumed(small_pause(thread, 1))
            sent.append(
                await producer.send(
                    topics.consumptions,
                    encode(spend),
                    key=consumption_key(thread, spend.token_id),
                    partition=partition,
                )
            )
        await producer.flush()
        await asyncio.gather(*sent)
    return len(sent)


async def test_sigkill_mid_replay_then_restart_applies_each_record_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    topics = TopicSet(prefix=names.prefix, partitions=3)
    await create_topic_set(bootstrap, topics)
    total = await preload(bootstrap, topics)
    state = tmp_path / "projector"
    log = tmp_path / "projector.log"

    async with projector_process(bootstrap, topics, state, follow=False, log=log) as first:
        progress = await first.until(
            lambda e: e["event"] == "progress" and e["applied"] >= total // 4
        )
        first.proc.kill()
        assert await first.wait() == -signal.SIGKILL
    with Store.open_read_only(state) as killed:
        applied_before_kill = sum(killed.offsets().values())
    # The kill landed mid-replay: at least the reported batches are stored, not everything.
    assert progress["applied"] <= applied_before_kill < total

    async with projector_process(bootstrap, topics, state, follow=False, log=log) as second:
        started = await second.until(lambda e: e["event"] == "started")
        done = await second.until(lambda e: e["event"] == "done", timeout=90)
        assert await second.wait() == 0
    # The restart continued from the offsets stored with the data: the records before them are
    # not applied again, and every record after them exactly once.
    assert started["offsets"] == applied_before_kill
    assert done["applied"] == done["stats_applied"] == total - applied_before_kill
    assert done["skipped"] == 0

    uninterrupted = await rebuild(bootstrap, tmp_path / "uninterrupted", topics)
    assert done["digest"] == uninterrupted
    with Store.open_read_only(state) as resumed:
        assert sum(resumed.offsets().values()) == total
        for t in range(THREADS):
            thread = f"thread-{t:04d}"
            assert sequences(resumed, thread) == list(range(1, PER_THREAD + 1)), thread
            assert resumed.ledger(f"tok-{thread}-1") is not None
            assert resumed.ledger(f"tok-{thread}-2") is None


# --- bytes that are not a turnlog record ------------------------------------------------------


async def test_undecodable_records_are_skipped_counted_and_do_not_stop_the_projector(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=2)
    topics = dep.topics
    p = partition_for("thread-a", topics.partitions)
    store = Store.open(tmp_path / "store")
    try:
        async with (
            PauseRecorder(dep.settings, dep.issuer) as recorder,
            CheckpointProjector(bootstrap, store, topics) as projector,
            plain_producer(bootstrap) as raw,
            following(projector) as follower,
        ):
            first = await recorder.record(
                sample_checkpoint("thread-a", checkpoint_id="cp-1", sequence=1),
                request_json=REQUEST,
            )
            bad = [
                await raw.send_and_wait(
                    topics.pauses,
                    b"\x01not avro at all",  # not 00: the registry framing's first byte
                    key=pause_key("thread-a", "x"),
                    partition=p,
                ),
                # A single-object header with a fingerprint no turnlog schema has.
                await raw.send_and_wait(
                    topics.pauses, b"\xc3\x01" + bytes(8) + b"body", key=b"k", partition=p
                ),
                # A tombstone whose key is not "thread NUL id".
                await raw.send_and_wait(topics.pauses, None, key=b"no-separator", partition=p),
                await raw.send_and_wait(
                    topics.consumptions, b"garbage", key=b"thread-a\x00t", partition=p
                ),
            ]
            second = await recorder.record(
                sample_checkpoint("thread-a", checkpoint_id="cp-2", sequence=2),
                request_json=REQUEST,
            )

            async def caught_up() -> bool:
                return (store.offset(topics.pauses, p) or 0) > second.offset and (
                    store.offset(topics.consumptions, p) or 0
                ) > bad[3].offset

            await eventually(caught_up, timeout=30)
            assert not follower.done()  # still following after the bad records
        stats = projector.stats
        assert stats.skipped == len(bad)
        assert sorted((t, part, off) for t, part, off, _ in stats.skipped_at) == sorted(
            (m.topic, m.partition, m.offset) for m in bad
        )
        reasons = {(t, off): why for t, _, off, why in stats.skipped_at}
        assert reasons[(topics.pauses, bad[0].offset)].startswith("not_single_object")
        assert reasons[(topics.pauses, bad[1].offset)].startswith("unknown_fingerprint")
        assert reasons[(topics.pauses, bad[2].offset)].startswith("bad_key")
        assert reasons[(topics.consumptions, bad[3].offset)].startswith("not_single_object")
        assert stats.applied == 2
        assert sequences(store, "thread-a") == [1, 2]
        assert decode_pause(store.latest("thread-a")).token_id == second.token_id
        assert store.pause_for_token(first.token_id) is not None
    finally:
        store.close()


# --- forgetting a thread ----------------------------------------------------------------------

FAST_COMPACTION = {
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "100",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "100",
}


def filler_answer() -> AnswerSubmitted:
    return AnswerSubmitted(
        event_id=uuid.uuid4().hex,
        occurred_at=MOMENT,
        package_version="test",
        answer_id="filler",
        token="-",
        thread_id="filler",
        scope_hash=None,
        session_id=None,
        run_id=None,
        call_id=None,
        response_json="{}",
        submitted_at=MOMENT,
    )


async def test_forgotten_thread_is_gone_after_compaction_and_rebuild(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=1)
    topics = TopicSet(prefix=names.prefix, partitions=1, compacted_configs=FAST_COMPACTION)
    await create_topic_set(bootstrap, topics)
    compacted = (topics.pauses, topics.answers, topics.consumptions)
    live = Store.open(tmp_path / "live")
    try:
        async with (
            PauseRecorder(dep.settings, dep.issuer, topics=topics) as recorder,
            AnswerPublisher(dep.settings, dep.verifier, topics=topics) as publisher,
            plain_producer(bootstrap) as producer,
        ):
            kept: list[RecordedPause] = []
            gone: list[RecordedPause] = []
            for thread, into in (("thread-gone", gone), ("thread-kept", kept)):
                for seq in (1, 2):
                    cp = sample_checkpoint(thread, checkpoint_id=f"cp-{seq}", sequence=seq)
                    into.append(await recorder.record(cp, request_json=REQUEST))
                cp = into[-1].pause.checkpoint
                answer = await publisher.publish(into[-1].token, ANSWER, **axes(cp))
                await send_consumption(
                    producer, topics, consumed(into[-1].pause, answer_id=answer.answer_id)
                )
            async with CheckpointProjector(bootstrap, live, topics) as projector:
                await projector.catch_up()
            assert live.ledger(gone[-1].token_id) is not None  # the store knew the thread

            tombstones = await forget_thread(dep.settings, topics, "thread-gone")
            assert tombstones == {topics.pauses: 2, topics.answers: 1, topics.consumptions: 1}
            # A live store forgets by applying the tombstones -- it must read them before the
            # cleaner drops them (delete.retention.ms): a store offline for longer than that
            # keeps the thread until it is rebuilt.
            async with CheckpointProjector(bootstrap, live, topics) as projector:
                await projector.catch_up()
            assert live.latest("thread-gone") is None
            assert live.ledger(gone[-1].token_id) is None

            async def roll_segments() -> None:
                # One record per topic under one fixed key: rolls the segment (segment.ms has
                # passed) so the cleaner may compact the one holding the tombstones, then, once
                # delete.retention.ms has passed, drop the tombstones too.
                await recorder.record(sample_checkpoint("filler"), request_json=REQUEST)
                await producer.send_and_wait(
                    topics.answers,
                    encode(filler_answer()),
                    key=answer_key("filler", "a"),
                    partition=0,
                )
                spend = consumed(small_pause("filler", 1))
                await producer.send_and_wait(
                    topics.consumptions,
                    encode(spend),
                    key=consumption_key("filler", spend.token_id),
                    partition=0,
                )

            left: dict[tuple[str, str], int] = {}

            async def nothing_of_the_thread_left() -> bool:
                await roll_segments()
                for topic in compacted:
                    records = await read_to_end(
                        bootstrap, topic, isolation_level="read_uncommitted"
                    )
                    for thread in ("thread-gone", "thread-kept"):
                        mark = thread.encode() + b"\x00"
                        left[(topic, thread)] = sum(
                            1 for r in records if r.key and r.key.startswith(mark)
                        )
                return not any(n for (_, thread), n in left.items() if thread == "thread-gone")

            # Tombstones included: a full read shows no record under the thread's keys.
            try:
                await eventually(nothing_of_the_thread_left, timeout=60, interval=0.3)
            except AssertionError as exc:
                raise AssertionError(f"records of the forgotten thread remain: {left}") from exc
            assert {t: left[(t, "thread-kept")] for t in compacted} == {
                topics.pauses: 2,
                topics.answers: 1,
                topics.consumptions: 1,
            }

        # The live store, caught up over the compacted log, equals a rebuild from it.
        async with CheckpointProjector(bootstrap, live, topics) as projector:
            await projector.catch_up()
            assert projector.stats.skipped == 0
        live_digest = live.digest()
    finally:
        live.close()

    state = tmp_path / "rebuilt"
    assert await rebuild(bootstrap, state, topics) == live_digest
    with Store.open_read_only(state) as store:
        assert store.latest("thread-gone") is None
        assert store.list_checkpoints("thread-gone") == []
        for pause in gone:
            assert store.pause_for_token(pause.token_id) is None
            assert store.ledger(pause.token_id) is None
        assert sequences(store, "thread-kept") == [1, 2]
        assert decode_pause(store.latest("thread-kept")).token_id == kept[-1].token_id
        assert store.pause_for_token(kept[0].token_id) is not None
        assert store.ledger(kept[-1].token_id) is not None
