"""``turnlog audit`` against a real broker: a clean log holds, and every kind of violation,
written into the topics as raw records, is reported with its ids.

The injected logs are written with a plain producer (no worker involved): each case is the
shape a partly visible transaction, a zombie or a bug would leave, and the worker group's
committed offset is set by committing it as that group would.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, make_deployment, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.worker_support import running_worker
from tests.kafka_helpers import eventually, read_to_end, wait_until_consumed
from turnlog.audit import Auditor, Kind, Report
from turnlog.clock import utc_now
from turnlog.consumers.screening import event_meta
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    PauseExpired,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.kafka import clients
from turnlog.kafka.partitioning import answer_key, consumption_key, partition_for, pause_key
from turnlog.kafka.topics import ensure_topics
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.wire.codec import encode

PARTITIONS = 3


def _fake_token(token_id: str) -> str:
    """A compact JWT shape whose unverified payload names ``token_id`` (the audit only peeks)."""

    def part(obj: dict[str, str]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'EdDSA'})}.{part({'jti': token_id})}.c2ln"


class RawLog:
    """Writes turnlog's records straight onto a deployment's topics, as a worker would have."""

    def __init__(self, dep: Deployment, producer: AIOKafkaProducer) -> None:
        self.dep = dep
        self.topics = dep.topics
        self._producer = producer

    def partition(self, thread: str) -> int:
        return partition_for(thread, PARTITIONS)

    async def _send(self, topic: str, thread: str, key: bytes, value: bytes | None) -> int:
        meta = await self._producer.send_and_wait(
            topic, value, key=key, partition=self.partition(thread)
        )
        return int(meta.offset)

    async def pause(self, thread: str, token: str) -> None:
        cp = sample_checkpoint(thread)
        now = utc_now()
        pause = PauseRecorded(
            **event_meta(now), checkpoint=cp, token_id=token, request_json=REQUEST,
            request_hash="h", response_schema="ask_user", expires_at=now + timedelta(days=1),
        )  # fmt: skip
        await self._send(self.topics.pauses, thread, pause_key(thread, "cp-1"), encode(pause))

    async def forget_pause(self, thread: str) -> None:
        await self._send(self.topics.pauses, thread, pause_key(thread, "cp-1"), None)

    async def answer(self, thread: str, answer_id: str, token: str) -> int:
        answer = AnswerSubmitted(
            **event_meta(utc_now()), answer_id=answer_id, token=_fake_token(token),
            thread_id=thread, scope_hash="s", session_id="s", run_id="r", call_id="call-1",
            response_json=json.dumps(ANSWER), submitted_at=utc_now(),
        )  # fmt: skip
        key = answer_key(thread, answer_id)
        return await self._send(self.topics.answers, thread, key, encode(answer))

    async def consumed(self, thread: str, token: str, answer_id: str, outcome: str) -> None:
        row = TokenConsumed(
            **event_meta(utc_now()), token_id=token, answer_id=answer_id, thread_id=thread,
            checkpoint_id="cp-1", outcome=outcome,
        )  # fmt: skip
        key = consumption_key(thread, token)
        await self._send(self.topics.consumptions, thread, key, encode(row))

    async def resumed(
        self, thread: str, token: str, answer_id: str, event_id: str | None = None
    ) -> None:
        meta = event_meta(utc_now())
        if event_id is not None:
            meta["event_id"] = event_id
        turn = TurnResumed(
            **meta, token_id=token, answer_id=answer_id, run_id="r", session_id="s",
            thread_id=thread, checkpoint_id="cp-1", interrupt_id="i", tool_call_id="call-1",
            name="ask_user", prompt="go on", response_json="{}",
        )  # fmt: skip
        await self._send(self.topics.resumed, thread, thread.encode(), encode(turn))

    async def expired(self, thread: str, token: str) -> None:
        now = utc_now()
        event = PauseExpired(
            **event_meta(now), token_id=token, thread_id=thread, checkpoint_id="cp-1",
            run_id="r", session_id="s", tool_call_id="call-1", expires_at=now,
        )  # fmt: skip
        await self._send(self.topics.resumed, thread, thread.encode(), encode(event))

    async def rejected(self, thread: str, answer_id: str, token: str, reason: str) -> None:
        event = AnswerRejected(
            **event_meta(utc_now()), answer_id=answer_id, token_id=token, thread_id=thread,
            reason=reason, step=5, detail="injected",
        )  # fmt: skip
        await self._send(self.topics.rejections, thread, thread.encode(), encode(event))

    async def garbage(self, thread: str) -> None:
        await self._send(self.topics.resumed, thread, thread.encode(), os.urandom(40))

    async def commit_all_answers(self) -> None:
        """The worker group's committed offset at the end of every answers partition."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.dep.settings.bootstrap_servers,
            group_id=self.dep.settings.application_id,
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            tps = [TopicPartition(self.topics.answers, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            await consumer.commit({tp: OffsetAndMetadata(ends[tp], "") for tp in tps})
        finally:
            await consumer.stop()


@pytest.fixture
async def raw(bootstrap: str, names: Names, tmp_path: Path) -> RawLog:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    admin = clients.admin(dep.settings.connection)
    await admin.start()
    try:
        await ensure_topics(admin, dep.topics)
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        yield RawLog(dep, producer)
    finally:
        await producer.stop()


async def _audit(log: RawLog) -> Report:
    async with Auditor(log.dep.settings, settle_seconds=0.5, timeout=60) as auditor:
        return await auditor.audit()


async def _resume(log: RawLog, thread: str, token: str, answer: str) -> None:
    """A correct resume: the answer, its consumption and its resumed turn."""
    await log.pause(thread, token)
    await log.answer(thread, answer, token)
    await log.consumed(thread, token, answer, "resumed")
    await log.resumed(thread, token, answer)


Case = Callable[[RawLog], Awaitable[None]]


async def _skipped(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.answer("t1", "ans-1", "tok-1")


async def _resumed_and_refused(log: RawLog) -> None:
    await _resume(log, "t1", "tok-1", "ans-1")
    await log.rejected("t1", "ans-1", "tok-1", "already_consumed")


async def _refused_twice(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.answer("t1", "ans-1", "tok-1")
    await log.rejected("t1", "ans-1", "tok-1", "session_mismatch")
    await log.rejected("t1", "ans-1", "tok-1", "session_mismatch")


async def _consumed_without_resume(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.answer("t1", "ans-1", "tok-1")
    await log.consumed("t1", "tok-1", "ans-1", "resumed")


async def _resumed_without_consumption(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.answer("t1", "ans-1", "tok-1")
    await log.resumed("t1", "tok-1", "ans-1")


async def _consumed_twice(log: RawLog) -> None:
    await _resume(log, "t1", "tok-1", "ans-1")
    await log.consumed("t1", "tok-1", "ans-1", "resumed")


async def _resumed_twice(log: RawLog) -> None:
    await _resume(log, "t1", "tok-1", "ans-1")
    await log.resumed("t1", "tok-1", "ans-1")


async def _expired_and_resumed(log: RawLog) -> None:
    await _resume(log, "t1", "tok-1", "ans-1")
    await log.expired("t1", "tok-1")
    await log.consumed("t1", "tok-1", "", "expired")


async def _expired_twice(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.consumed("t1", "tok-1", "", "expired")
    await log.expired("t1", "tok-1")
    await log.expired("t1", "tok-1")


async def _expiry_without_consumption(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.expired("t1", "tok-1")


async def _expiry_consumed_without_event(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.consumed("t1", "tok-1", "", "expired")


async def _resumed_after_forget(log: RawLog) -> None:
    await log.pause("t1", "tok-1")
    await log.answer("t1", "ans-1", "tok-1")
    await log.forget_pause("t1")
    await log.consumed("t1", "tok-1", "ans-1", "resumed")
    await log.resumed("t1", "tok-1", "ans-1")


async def _undecodable_output(log: RawLog) -> None:
    await _resume(log, "t1", "tok-1", "ans-1")
    await log.garbage("t1")


CASES: dict[str, tuple[Case, set[Kind]]] = {
    "skipped answer": (_skipped, {Kind.ANSWER_WITHOUT_OUTCOME}),
    "resumed and refused": (_resumed_and_refused, {Kind.ANSWER_RESUMED_AND_REFUSED}),
    "refused twice": (_refused_twice, {Kind.REFUSED_TWICE}),
    "lost resume": (_consumed_without_resume, {Kind.CONSUMED_WITHOUT_RESUME}),
    "resume without consumption": (
        _resumed_without_consumption,
        {Kind.RESUMED_WITHOUT_CONSUMPTION},
    ),
    "consumed twice": (_consumed_twice, {Kind.TOKEN_CONSUMED_TWICE}),
    "resumed twice": (_resumed_twice, {Kind.RESUMED_TWICE}),
    "expired and resumed": (
        _expired_and_resumed,
        {Kind.EXPIRED_AND_RESUMED, Kind.TOKEN_CONSUMED_TWICE},
    ),
    "expired twice": (_expired_twice, {Kind.EXPIRED_TWICE}),
    "expiry without consumption": (_expiry_without_consumption, {Kind.EXPIRY_INCOMPLETE}),
    "expiry consumed without event": (_expiry_consumed_without_event, {Kind.EXPIRY_INCOMPLETE}),
    "resumed after forget": (_resumed_after_forget, {Kind.RESUMED_AFTER_FORGET}),
    "undecodable output": (_undecodable_output, {Kind.OUTPUT_UNDECODABLE}),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_each_kind_of_violation_written_into_the_topics_is_reported(
    raw: RawLog, case: str
) -> None:
    write, expected = CASES[case]
    # A correct resume on another thread beside it: the audit must not blame it.
    await _resume(raw, "other-thread", "tok-other", "ans-other")
    await write(raw)
    await raw.commit_all_answers()
    report = await _audit(raw)
    assert {v.kind for v in report.violations} == expected, report.as_dict()
    assert not report.holds
    for v in report.violations:
        assert v.partition == raw.partition("t1"), v
        assert "tok-other" not in json.dumps(v.as_dict())
        assert v.ids.get("token_id") in (None, "tok-1") or v.kind is Kind.OUTPUT_UNDECODABLE


async def test_an_answer_not_yet_handled_is_not_a_violation(raw: RawLog) -> None:
    """Above the committed offset, an answer is work still to do, not a lost one."""
    await _resume(raw, "t1", "tok-1", "ans-1")
    await raw.commit_all_answers()
    await raw.pause("t2", "tok-2")
    await raw.answer("t2", "ans-2", "tok-2")
    report = await _audit(raw)
    assert report.holds, report.as_dict()
    assert (report.answers_judged, report.not_yet_handled) == (1, 1)


async def test_a_retry_of_an_answer_is_judged_once(raw: RawLog) -> None:
    await _resume(raw, "t1", "tok-1", "ans-1")
    await raw.answer("t1", "ans-1", "tok-1")  # the publisher's retry: nothing of its own
    await raw.commit_all_answers()
    report = await _audit(raw)
    assert report.holds, report.as_dict()
    assert report.answers_judged == 1


async def test_the_audit_command_reports_a_violation_and_exits_1(
    raw: RawLog, bootstrap: str, names: Names, tmp_path: Path
) -> None:
    await _consumed_without_resume(raw)
    await raw.commit_all_answers()
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    ran = cli("audit", "--settle", "0.5", check=1)
    assert "exactly once VIOLATED" in ran.stdout
    assert "consumed_without_resume partition" in ran.stdout
    assert "token_id=tok-1" in ran.stdout and "answer_id=ans-1" in ran.stdout
    data = json.loads(cli("audit", "--json", "--settle", "0.5", check=1).stdout)
    assert data["holds"] is False
    assert data["violations_by_kind"]["consumed_without_resume"] == 1
    [violation] = data["violation_list"]
    assert violation["token_id"] == "tok-1" and violation["answer_id"] == "ans-1"


async def test_a_real_flow_holds_under_the_audit(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Pause three turns; answer one right (and publish it again), one with a wrong session,
    leave one to expire; with the worker done, ``turnlog audit`` exits 0 and counts each."""
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state")
    right, wrong, left = (sample_checkpoint(f"thread-{n}") for n in ("a", "b", "c"))
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        paused = [await recorder.record(cp, request_json=REQUEST) for cp in (right, wrong)]
        await recorder.record(left, request_json=REQUEST, ttl=timedelta(seconds=1))
    async with (
        running_worker(dep, tmp_path / "worker", expiry_interval=0.2),
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        sent = await publisher.publish(paused[0].token, ANSWER, **axes(right))
        await publisher.publish(paused[0].token, ANSWER, **axes(right), answer_id=sent.answer_id)
        bad = AnswerSubmitted(
            **event_meta(utc_now()), answer_id="wrong-session", token=paused[1].token,
            thread_id=wrong.thread_id, response_json=json.dumps(ANSWER),
            submitted_at=utc_now(), **{**axes(wrong), "session_id": "not-this-one"},
        )  # fmt: skip
        await publisher.publish_unchecked(bad)

        async def outputs_written() -> bool | None:
            resumed = await read_to_end(bootstrap, dep.topics.resumed)
            return True if len(resumed) >= 2 else None  # the resume and the expiry

        await eventually(outputs_written, timeout=60)
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    ran = cli("audit", check=0)
    assert ran.stdout.startswith("exactly once holds: 2 answers judged"), ran.stdout
    data = json.loads(cli("audit", "--json", check=0).stdout)
    assert (data["resumed"], data["refused"], data["expired"]) == (1, 1, 1), data
    assert data["violations"] == 0 and data["violation_list"] == []
