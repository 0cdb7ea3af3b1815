"""AnswerPublisher without a broker: one producer for concurrent starts, answers refused before
Kafka (too large, nested too deeply), and an unreachable broker ridden out for the budget.

The Kafka producer is replaced by a fake that records what it was asked to do, so each test
says exactly which calls reached "Kafka" -- for a refusal, none.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, MessageSizeTooLargeError

from tests.deployment import ANSWER, REQUEST, Deployment, axes, make_deployment, sample_checkpoint
from turnlog.clock import utc_now
from turnlog.contracts.refusals import RefusalReason, Refused
from turnlog.contracts.resume import request_hash
from turnlog.errors import BrokerUnavailable
from turnlog.kafka import clients
from turnlog.producers import answers as answers_module
from turnlog.producers.answers import AnswerPublisher
from turnlog.tokens import PauseClaims

OUTAGE_LOGGER = "turnlog.kafka.outage"


class FakeProducer:
    """Stands in for AIOKafkaProducer. ``script`` (class-level, per test) decides each call."""

    made: list[FakeProducer] = []
    gate: asyncio.Event | None = None
    start_failures = 0
    send_failures: list[BaseException] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.started = False
        self.stopped = False
        self.sent: list[tuple[str, bytes, bytes, int]] = []
        type(self).made.append(self)

    async def start(self) -> None:
        cls = type(self)
        if cls.gate is not None:
            await cls.gate.wait()
        if cls.start_failures > 0:
            cls.start_failures -= 1
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]")
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2}

    async def send_and_wait(
        self, topic: str, value: bytes, *, key: bytes, partition: int, headers: Any = None
    ) -> Any:
        cls = type(self)
        if cls.send_failures:
            raise cls.send_failures.pop(0)
        self.sent.append((topic, value, key, partition))

        class Metadata:
            offset = len(self.sent) - 1

        return Metadata()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeProducer]]:
    class Fake(FakeProducer):
        made: list[FakeProducer] = []
        gate = None
        start_failures = 0
        send_failures: list[BaseException] = []

    monkeypatch.setattr(clients, "AIOKafkaProducer", Fake)
    yield Fake


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    # Nothing listens on port 1; every test here must stay off the network anyway.
    return make_deployment("127.0.0.1:1", "unit.", "unit-app", tmp_path, partitions=3)


def _token(dep: Deployment) -> tuple[str, dict[str, str]]:
    cp = sample_checkpoint(f"thread-{uuid.uuid4().hex[:6]}")
    now = utc_now()
    claims = PauseClaims(
        token_id=uuid.uuid4().hex,
        scope_hash=cp.scope_hash,
        session_id=cp.session_id,
        run_id=cp.run_id,
        tool_call_id=cp.tool_call_id,
        interrupt_id=cp.interrupt_id,
        thread_id=cp.thread_id,
        checkpoint_id=cp.checkpoint_id,
        interaction="ask_user",
        request_hash=request_hash(REQUEST),
        issued_at=now,
        not_before=now,
        expires_at=now + timedelta(hours=1),
    )
    return dep.issuer.issue(claims), axes(cp)


# -- item 3: one producer for concurrent first starts --------------------------------------------


async def test_concurrent_first_starts_create_one_producer(
    fake: type[FakeProducer], dep: Deployment
) -> None:
    fake.gate = asyncio.Event()
    publisher = AnswerPublisher(dep.settings, dep.verifier)

    async def open_the_gate() -> None:
        # Let both start() calls run up to the producer's start before it may finish.
        for _ in range(20):
            await asyncio.sleep(0)
        assert fake.gate is not None
        fake.gate.set()

    await asyncio.gather(publisher.start(), publisher.start(), open_the_gate())
    assert len(fake.made) == 1 and fake.made[0].started
    await publisher.start()  # and later calls reuse it
    assert len(fake.made) == 1
    await publisher.stop()
    assert fake.made[0].stopped


async def test_a_publish_racing_the_first_start_uses_the_same_producer(
    fake: type[FakeProducer], dep: Deployment
) -> None:
    fake.gate = asyncio.Event()
    publisher = AnswerPublisher(dep.settings, dep.verifier)
    token, stated = _token(dep)

    async def open_the_gate() -> None:
        for _ in range(20):
            await asyncio.sleep(0)
        assert fake.gate is not None
        fake.gate.set()

    _, sent, _ = await asyncio.gather(
        publisher.start(), publisher.publish(token, ANSWER, **stated), open_the_gate()
    )
    assert len(fake.made) == 1 and len(fake.made[0].sent) == 1
    assert sent.partition in {0, 1, 2}
    await publisher.stop()


# -- item 4: refused before Kafka ----------------------------------------------------------------


async def test_an_answer_over_the_size_limit_is_refused_before_kafka(
    fake: type[FakeProducer], dep: Deployment
) -> None:
    limit = 4096
    publisher = AnswerPublisher(dep.settings.with_(max_answer_bytes=limit), dep.verifier)
    token, stated = _token(dep)
    big = {"answers": [{"selections": ["eu"], "other": "x" * 5000}]}
    size = len(answers_module.encode(publisher.build(token, big, **stated, answer_id="a")))
    assert size > limit
    with pytest.raises(Refused) as refused:
        await publisher.publish(token, big, **stated, answer_id="a")
    assert refused.value.reason is RefusalReason.ANSWER_TOO_LARGE
    assert refused.value.reason.value == "answer_too_large"
    assert str(size) in refused.value.detail and str(limit) in refused.value.detail
    assert fake.made == []  # nothing reached Kafka

    # The same answer under the limit goes through; the limit is on the encoded value.
    roomy = AnswerPublisher(dep.settings.with_(max_answer_bytes=size), dep.verifier)
    await roomy.publish(token, big, **stated, answer_id="a")
    assert len(fake.made) == 1 and len(fake.made[0].sent) == 1
    await roomy.stop()


async def test_the_default_limit_refuses_a_300_kb_answer(
    fake: type[FakeProducer], dep: Deployment
) -> None:
    publisher = AnswerPublisher(dep.settings, dep.verifier)
    token, stated = _token(dep)
    big = {"answers": [{"selections": ["eu"], "other": "y" * 300_000}]}
    with pytest.raises(Refused) as refused:
        publisher.precheck(publisher.build(token, big, **stated))
    assert refused.value.reason is RefusalReason.ANSWER_TOO_LARGE
    assert fake.made == []


@pytest.mark.parametrize("response", ["[" * 50_000, "[" * 50_000 + "]" * 50_000])
async def test_a_response_nested_too_deeply_is_refused_not_raised(
    fake: type[FakeProducer], dep: Deployment, response: str
) -> None:
    publisher = AnswerPublisher(dep.settings, dep.verifier)
    token, stated = _token(dep)
    with pytest.raises(Refused) as refused:
        await publisher.publish(token, response, **stated)
    assert refused.value.reason is RefusalReason.RESPONSE_INVALID
    assert fake.made == []


async def test_a_token_nested_too_deeply_is_refused_not_raised(
    fake: type[FakeProducer], dep: Deployment
) -> None:
    publisher = AnswerPublisher(dep.settings, dep.verifier)
    _, stated = _token(dep)
    deep = base64.urlsafe_b64encode(b"[" * 50_000).decode().rstrip("=")
    header = base64.urlsafe_b64encode(b'{"alg":"EdDSA","kid":"test-key"}').decode().rstrip("=")
    for token in (f"{header}.{deep}.c2ln", f"{deep}.{deep}.c2ln"):
        answer = publisher.build(token, ANSWER, **stated)  # must not raise either
        assert answer.thread_id == ""
        with pytest.raises(Refused) as refused:
            publisher.precheck(answer)
        assert refused.value.reason.value.startswith("token_")
    assert fake.made == []


# -- item 6: an unreachable broker is ridden out ----------------------------------------------


async def test_an_unreachable_broker_is_retried_until_it_answers(
    fake: type[FakeProducer], dep: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    fake.start_failures = 3
    publisher = AnswerPublisher(dep.settings.with_(broker_timeout_seconds=30), dep.verifier)
    await publisher.start()
    assert [p.started for p in fake.made] == [False, False, False, True]
    assert all(p.stopped for p in fake.made[:3]), "a failed start left a client open"
    lines = [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]
    assert len(lines) == 2, lines  # one when it went, one when it came back; none per retry
    assert "broker unreachable" in lines[0] and "KafkaConnectionError" in lines[0]
    assert "broker reachable again" in lines[1]
    await publisher.stop()


async def test_an_unreachable_broker_is_given_up_on_after_the_budget(
    fake: type[FakeProducer], dep: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    fake.start_failures = 10**6
    budget = 1.5
    publisher = AnswerPublisher(dep.settings.with_(broker_timeout_seconds=budget), dep.verifier)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as gave_up:
        await publisher.start()
    took = time.monotonic() - started
    assert budget <= took < budget + 2.0, took
    assert "127.0.0.1:1" in str(gave_up.value) and "KafkaConnectionError" in str(gave_up.value)
    assert 2 < len(fake.made) < 40, "no backoff between attempts"
    assert all(p.stopped for p in fake.made)
    lines = [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]
    assert len(lines) == 1 and "broker unreachable" in lines[0]


async def test_a_send_that_fails_on_an_outage_is_sent_again_on_a_new_producer(
    fake: type[FakeProducer], dep: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    publisher = AnswerPublisher(dep.settings.with_(broker_timeout_seconds=30), dep.verifier)
    token, stated = _token(dep)
    await publisher.start()
    fake.send_failures = [KafkaTimeoutError(), KafkaConnectionError("connection lost")]
    sent = await publisher.publish(token, ANSWER, **stated, answer_id="same-answer")
    assert sent.answer_id == "same-answer"
    assert len(fake.made) == 3 and [p.stopped for p in fake.made] == [True, True, False]
    [(topic, _, key, partition)] = fake.made[-1].sent
    assert topic == publisher.topics.answers and key.endswith(b"\x00same-answer")
    assert partition == sent.partition
    lines = [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]
    assert len(lines) == 2, lines
    await publisher.stop()


async def test_a_send_refused_by_the_broker_is_not_retried(
    fake: type[FakeProducer], dep: Deployment
) -> None:
    publisher = AnswerPublisher(dep.settings.with_(broker_timeout_seconds=30), dep.verifier)
    token, stated = _token(dep)
    fake.send_failures = [MessageSizeTooLargeError()]
    with pytest.raises(MessageSizeTooLargeError):
        await publisher.publish(token, ANSWER, **stated)
    assert len(fake.made) == 1 and fake.made[0].sent == []
    await publisher.stop()


async def test_a_send_that_never_returns_is_given_up_and_sent_again_on_a_new_producer(
    fake: type[FakeProducer],
    dep: Deployment,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka's idempotent producer never expires a batch while the broker is away: the send
    just waits. The publisher bounds each attempt, drops that producer and sends again."""
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    monkeypatch.setattr(answers_module, "attempt_timeout", lambda settings: 0.3)
    hangs = asyncio.Event()  # never set: the broker does not come back for this producer

    class Hanging(fake):  # type: ignore[valid-type, misc]
        async def send_and_wait(self, *args: Any, **kwargs: Any) -> Any:
            if len(fake.made) == 1:
                await hangs.wait()
            return await super().send_and_wait(*args, **kwargs)

    monkeypatch.setattr(clients, "AIOKafkaProducer", Hanging)
    publisher = AnswerPublisher(dep.settings.with_(broker_timeout_seconds=30), dep.verifier)
    token, stated = _token(dep)
    sent = await publisher.publish(token, ANSWER, **stated, answer_id="once")
    assert sent.answer_id == "once"
    assert len(fake.made) == 2 and fake.made[0].stopped and not fake.made[0].sent
    assert len(fake.made[1].sent) == 1
    lines = [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]
    assert len(lines) == 2 and "no answer within" in lines[0], lines
    await publisher.stop()
