"""One W3C traceparent followed from a pause, through its answer, to the resumed turn."""

from __future__ import annotations

from pathlib import Path

from aiokafka import AIOKafkaProducer

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, axes, make_deployment, sample_checkpoint
from tests.integration.worker_support import running_worker
from tests.kafka_helpers import eventually, read_to_end, wait_until_consumed
from turnlog.consumers.resumed import ResumedTurns
from turnlog.contracts.events import TurnResumed
from turnlog.kafka.partitioning import answer_key, partition_for
from turnlog.observability import tracing
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.wire.codec import decode, encode

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _traceparent(record: object) -> tracing.TraceParent | None:
    return tracing.from_headers(getattr(record, "headers", None))


async def test_one_trace_runs_from_the_pause_to_its_resumed_turn(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state")
    cp = sample_checkpoint("thread-traced")
    parent = tracing.parse(PARENT)
    assert parent is not None
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST, traceparent=PARENT)
    assert pause.traceparent == PARENT
    [paused] = await read_to_end(bootstrap, dep.topics.pauses)
    assert _traceparent(paused) == parent

    async with (
        running_worker(dep, tmp_path / "worker"),
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        sent = await publisher.publish(
            pause.token, ANSWER, **axes(cp), traceparent=pause.traceparent
        )
        resumed = await eventually(lambda: read_to_end(bootstrap, dep.topics.resumed))
    answered = tracing.parse(sent.traceparent)
    [answer_record] = await read_to_end(bootstrap, dep.topics.answers)
    [consumed] = await read_to_end(bootstrap, dep.topics.consumptions)
    assert answered is not None and _traceparent(answer_record) == answered
    assert answered.trace_id == parent.trace_id and answered.span_id != parent.span_id

    [record] = resumed
    assert isinstance(decode(record.value), TurnResumed)
    continued = _traceparent(record)
    assert continued is not None
    assert continued.trace_id == parent.trace_id
    assert continued.span_id not in (parent.span_id, answered.span_id)
    assert _traceparent(consumed) == continued  # one span: the worker's handling of the answer

    async with ResumedTurns(dep.settings, group_id=names.group) as turns:
        delivery = await anext(aiter(turns.deliveries()))
    assert isinstance(delivery.event, TurnResumed) and delivery.traceparent == str(continued)


async def test_a_malformed_traceparent_on_an_answer_is_ignored(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state")
    cp = sample_checkpoint("thread-garbled")
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST)
    async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
        answer = publisher.build(pause.token, ANSWER, **axes(cp))
    # Written by some other Kafka client, with a header that is no traceparent.
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        partitions = len(await producer.partitions_for(dep.topics.answers))
        await producer.send_and_wait(
            dep.topics.answers,
            encode(answer),
            key=answer_key(cp.thread_id, answer.answer_id),
            partition=partition_for(cp.thread_id, partitions),
            headers=[("traceparent", b"00-not-a-trace\xff")],
        )
    finally:
        await producer.stop()
    async with running_worker(dep, tmp_path / "worker"):
        resumed = await eventually(lambda: read_to_end(bootstrap, dep.topics.resumed))
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
    [record] = resumed
    turn = decode(record.value, TurnResumed)
    assert turn.token_id == pause.token_id
    assert _traceparent(record) is None
    assert await read_to_end(bootstrap, dep.topics.rejections) == []
