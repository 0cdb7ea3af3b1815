"""``turnlog audit --heal`` against a real broker and a real worker: what a lost transaction
marker leaves -- a spent token never resumed, a resume without its consumption, an answer
skipped -- is mended by the partition's owner, once, and the audit holds afterwards.

Each log is made the way the broker fault leaves it: a real pause and a real answer, then only
part of the worker's transaction (written here as raw records) and the answers offset committed
past the answer, as the worker group would have.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, make_deployment, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.worker_support import running_worker
from tests.kafka_helpers import read_to_end, wait_until_consumed
from turnlog.audit import Auditor, Kind
from turnlog.clock import utc_now
from turnlog.consumers.handler import resumed_event_id
from turnlog.consumers.screening import event_meta
from turnlog.contracts.events import AnswerRejected, AnswerSubmitted, TokenConsumed, TurnResumed
from turnlog.kafka.partitioning import consumption_key, partition_for
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.wire.codec import decode, encode

PARTITIONS = 3


async def _commit_answers(dep: Deployment) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=dep.settings.bootstrap_servers,
        group_id=dep.settings.application_id,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(dep.topics.answers, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.commit({tp: OffsetAndMetadata(ends[tp], "") for tp in tps})
    finally:
        await consumer.stop()


async def _paused_and_answered(
    dep: Deployment, thread: str
) -> tuple[RecordedPause, AnswerSubmitted]:
    cp = sample_checkpoint(thread)
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST)
    async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
        sent = await publisher.publish(pause.token, ANSWER, **axes(cp))
    [record] = [
        r
        for r in await read_to_end(dep.settings.bootstrap_servers, dep.topics.answers)
        if decode(r.value, AnswerSubmitted).answer_id == sent.answer_id
    ]
    return pause, decode(record.value, AnswerSubmitted)


async def _write(dep: Deployment, topic: str, thread: str, key: bytes, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=dep.settings.bootstrap_servers, acks="all")
    await producer.start()
    try:
        p = partition_for(thread, PARTITIONS)
        await producer.send_and_wait(topic, value, key=key, partition=p)
    finally:
        await producer.stop()


def _consumed(pause: RecordedPause, answer: AnswerSubmitted) -> bytes:
    return encode(
        TokenConsumed(
            **event_meta(utc_now()), token_id=pause.token_id, answer_id=answer.answer_id,
            thread_id=answer.thread_id, checkpoint_id="cp-1", outcome="resumed",
        )
    )  # fmt: skip


def _resumed(pause: RecordedPause, answer: AnswerSubmitted) -> bytes:
    return encode(
        TurnResumed(
            **event_meta(utc_now(), resumed_event_id(pause.token_id, answer)),
            token_id=pause.token_id, answer_id=answer.answer_id, run_id="r", session_id="s",
            thread_id=answer.thread_id, checkpoint_id="cp-1", interrupt_id="i",
            tool_call_id="call-1", name="ask_user", prompt="go on", response_json="{}",
        )
    )  # fmt: skip


async def _heal(dep: Deployment, bootstrap: str, names: Names, tmp_path: Path) -> dict[str, object]:
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    # In a thread: the worker under test runs on this event loop and must go on meanwhile.
    args = ("audit", "--heal", "--heal-timeout", "60", "--settle", "0.5")
    ran = await asyncio.to_thread(cli, *args, check=0, timeout=180)
    assert "asked the owners for 1 repair(s)" in ran.stdout, ran.stdout
    assert "exactly once holds" in ran.stdout, ran.stdout
    again = await asyncio.to_thread(cli, "audit", "--json", "--settle", "0.5", check=0)
    data = json.loads(again.stdout)
    assert isinstance(data, dict)
    return data


async def _turns(dep: Deployment) -> list[TurnResumed]:
    records = await read_to_end(dep.settings.bootstrap_servers, dep.topics.resumed)
    return [decode(r.value, TurnResumed) for r in records]


async def test_a_spent_token_never_resumed_is_resumed_by_its_owner(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    pause, answer = await _paused_and_answered(dep, "thread-lost")
    key = consumption_key(answer.thread_id, pause.token_id)
    await _write(dep, dep.topics.consumptions, answer.thread_id, key, _consumed(pause, answer))
    await _commit_answers(dep)
    async with Auditor(dep.settings, settle_seconds=0.5) as auditor:
        before = await auditor.audit()
    assert [v.kind for v in before.violations] == [Kind.CONSUMED_WITHOUT_RESUME]
    async with running_worker(dep, tmp_path / "worker") as worker:
        data = await _heal(dep, bootstrap, names, tmp_path)
        assert worker.stats.repaired == 1
    assert data["holds"] is True and data["resumed"] == 1
    [turn] = await _turns(dep)
    assert (turn.token_id, turn.answer_id) == (pause.token_id, answer.answer_id)
    # The identity the lost turn would have had, and the history with the answer folded in.
    assert turn.event_id == resumed_event_id(pause.token_id, answer)
    assert "eu" in turn.history[len(sample_checkpoint("x").messages)]["content"]
    consumed = await read_to_end(bootstrap, dep.topics.consumptions)
    assert len(consumed) == 1  # the token was not spent a second time


async def test_a_resume_without_its_consumption_gets_it_and_the_token_stays_spent(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    pause, answer = await _paused_and_answered(dep, "thread-half")
    thread = answer.thread_id
    await _write(dep, dep.topics.resumed, thread, thread.encode(), _resumed(pause, answer))
    await _commit_answers(dep)
    async with running_worker(dep, tmp_path / "worker") as worker:
        data = await _heal(dep, bootstrap, names, tmp_path)
        assert worker.stats.repaired == 1
        # A second answer for the same token must now be refused, not resume it again.
        async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
            cp = sample_checkpoint("thread-half")
            late = AnswerSubmitted(
                **event_meta(utc_now()), answer_id="second-answer", token=pause.token,
                thread_id=thread, response_json=json.dumps(ANSWER), submitted_at=utc_now(),
                **axes(cp),
            )  # fmt: skip
            await publisher.publish_unchecked(late)
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
    assert data["holds"] is True
    consumed = [
        decode(r.value, TokenConsumed)
        for r in await read_to_end(bootstrap, dep.topics.consumptions)
    ]
    assert [(c.token_id, c.answer_id) for c in consumed] == [(pause.token_id, answer.answer_id)]
    assert len(await _turns(dep)) == 1
    rejected = [
        decode(r.value, AnswerRejected) for r in await read_to_end(bootstrap, dep.topics.rejections)
    ]
    assert [(r.answer_id, r.reason) for r in rejected] == [("second-answer", "already_consumed")]


async def test_an_answer_skipped_by_a_lost_commit_is_handled(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    pause, answer = await _paused_and_answered(dep, "thread-skipped")
    await _commit_answers(dep)
    async with running_worker(dep, tmp_path / "worker"):
        data = await _heal(dep, bootstrap, names, tmp_path)
    assert data["holds"] is True and data["resumed"] == 1
    [turn] = await _turns(dep)
    assert (turn.token_id, turn.answer_id) == (pause.token_id, answer.answer_id)


async def test_a_repair_request_for_a_whole_outcome_writes_nothing(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Asking again (or a forged request) for an answer whose outcome is whole: nothing new."""
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    await _paused_and_answered(dep, "thread-whole")
    async with running_worker(dep, tmp_path / "worker") as worker:
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
        [record] = await read_to_end(bootstrap, dep.topics.answers)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(
                dep.topics.answers, record.value, key=record.key, partition=record.partition,
                headers=[("turnlog-repair", b"audit")],
            )  # fmt: skip
        finally:
            await producer.stop()
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
        assert worker.stats.repaired == 0
    assert len(await _turns(dep)) == 1
    assert len(await read_to_end(bootstrap, dep.topics.consumptions)) == 1
    assert await read_to_end(bootstrap, dep.topics.rejections) == []
