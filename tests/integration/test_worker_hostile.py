"""The guarantee against misrouted, forged and oversized records (issue 11), on the real broker.

Each test was written against the worker that acted on unverified token claims and on whatever
partition a record arrived: there, a misrouted answer resumed a token a second time, a forged
locator stopped the worker for good, and an answer whose resumed turn was over the producer's
limit aborted its transaction forever. Here each is refused by name, committed with its offset,
and the valid answers behind it still resume exactly once.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, axes, sample_checkpoint
from tests.integration.worker_support import (
    Follower,
    keyed_deployment,
    run_task,
    running_worker,
    wait_owned,
)
from tests.kafka_helpers import wait_until_consumed
from turnlog.contracts.events import AnswerSubmitted
from turnlog.kafka.partitioning import answer_key, murmur2, partition_for
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.wire.codec import encode

PARTITIONS = 6


async def _raw_producer(bootstrap: str) -> AIOKafkaProducer:
    """A plain client that can write anything anywhere, as any Kafka client can."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_request_size=2 * 1024 * 1024
    )
    await producer.start()
    return producer


def _forged(payload: dict[str, Any] | str, header: dict[str, Any] | str | None = None) -> str:
    def part(obj: dict[str, Any] | str) -> str:
        raw = obj if isinstance(obj, str) else json.dumps(obj)
        return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode().rstrip("=")

    head = header if header is not None else {"alg": "EdDSA", "kid": "shared-key"}
    return f"{part(head)}.{part(payload)}.c2lnbmF0dXJl"


async def test_a_misrouted_answer_never_resumes_a_token_a_second_time(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Two workers; for each pause one answer published the way a Java client that hashes the
    whole composite key would, and one routed right. Only the second may resume."""
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    # Threads whose composite-key partition differs from their thread partition.
    pauses: list[RecordedPause] = []
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        n = 0
        while len(pauses) < 8:
            cp = sample_checkpoint(f"misroute-{names.app}-{n}")
            n += 1
            key = answer_key(cp.thread_id, f"wrong-{cp.thread_id}")
            if (murmur2(key) & 0x7FFFFFFF) % PARTITIONS == partition_for(cp.thread_id, PARTITIONS):
                continue
            pauses.append(await recorder.record(cp, request_json=REQUEST))
    follower = Follower(bootstrap, dep.topics)
    await follower.start()
    producer = await _raw_producer(bootstrap)
    try:
        async with (
            running_worker(dep, tmp_path / "w1") as w1,
            running_worker(dep, tmp_path / "w2") as w2,
            AnswerPublisher(dep.settings, dep.verifier) as publisher,
        ):
            await wait_owned([w1, w2], PARTITIONS)
            for pause in pauses:
                wrong = publisher.build(
                    pause.token, ANSWER, **axes(pause.pause.checkpoint),
                    answer_id=f"wrong-{pause.thread_id}",
                )  # fmt: skip
                key = answer_key(wrong.thread_id, wrong.answer_id)
                # No partition given: aiokafka's default partitioner hashes the key, as Java's.
                await producer.send_and_wait(dep.topics.answers, encode(wrong), key=key)
                await publisher.publish(
                    pause.token, ANSWER, **axes(pause.pause.checkpoint),
                    answer_id=f"right-{pause.thread_id}",
                )  # fmt: skip
            await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
            for pause in pauses:
                await follower.wait_for(lambda p=pause: follower.resumed(p.token_id))
                await follower.wait_for(lambda p=pause: follower.rejections(f"wrong-{p.thread_id}"))
    finally:
        await producer.stop()
        await follower.stop()
    for pause in pauses:
        assert [t.answer_id for t in follower.resumed(pause.token_id)] == [
            f"right-{pause.thread_id}"
        ]
        assert len(follower.consumed(pause.token_id)) == 1
        [rejected] = follower.rejections(f"wrong-{pause.thread_id}")
        assert rejected.reason == "misrouted"
        assert f"maps to partition {pause.partition}" in rejected.detail


async def test_a_corpus_of_hostile_records_never_stops_the_worker(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Forged claims of every type and range, huge values, wrong keys, tombstones and random
    bytes, on every partition; then valid answers behind them, which resume exactly once."""
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pauses = [
            await recorder.record(
                sample_checkpoint(f"hostile-{names.app}-{i}"), request_json=REQUEST
            )
            for i in range(12)
        ]
    partitions_hit = {p.partition for p in pauses}
    follower = Follower(bootstrap, dep.topics)
    await follower.start()
    producer = await _raw_producer(bootstrap)
    expected: dict[str, str] = {}  # answer id (as the rejection names it) -> reason
    try:
        async with (
            running_worker(dep, tmp_path / "w") as worker,
            AnswerPublisher(dep.settings, dep.verifier) as publisher,
        ):
            await wait_owned([worker], PARTITIONS)
            task = run_task(worker)

            async def send(
                pause: RecordedPause, answer: AnswerSubmitted, reason: str, **kw: Any
            ) -> None:
                key = kw.pop("key", answer_key(answer.thread_id, answer.answer_id))
                partition = kw.pop("partition", partition_for(answer.thread_id, PARTITIONS))
                await producer.send_and_wait(
                    dep.topics.answers, encode(answer), key=key, partition=partition
                )
                expected[answer.answer_id[:256]] = reason

            for i, pause in enumerate(pauses):
                cp = pause.pause.checkpoint

                def build(token: str, i: int = i, cp: Any = cp) -> AnswerSubmitted:
                    answer = publisher.build(
                        token, ANSWER, **axes(cp), answer_id=f"bad-{i}-{uuid.uuid4().hex[:6]}"
                    )
                    return _replace(answer, thread_id=cp.thread_id)

                thread = pause.thread_id
                locators = [
                    {"pause_partition": -1, "pause_offset": 0},
                    {"pause_partition": 999, "pause_offset": 0},
                    {"pause_partition": "0", "pause_offset": None},
                    {"pause_partition": 2**80, "pause_offset": -5},
                    {"pause_partition": [pause.partition], "pause_offset": {"a": 1}},
                ]
                for locator in locators:
                    token = _forged({"jti": pause.token_id, "thread_id": thread, **locator})
                    await send(pause, build(token), "token_invalid")
                await send(pause, build(_forged('{"jti": "\\ud800"}')), "token_invalid")
                await send(pause, build(_forged("[" * 50_000)), "token_invalid")
                await send(pause, build(_forged({"jti": "x"}, "[" * 50_000)), "token_invalid")
                await send(
                    pause,
                    build(_forged({"jti": "x"}, {"alg": "EdDSA", "kid": "k" * 700_000})),
                    "token_unknown_key",
                )
                # A key naming another thread than the value.
                other = build(pause.token)
                await send(
                    pause, other, "misrouted", key=answer_key("someone-else", other.answer_id)
                )
            # A 400 KB thread id (key and value: as much as the topic takes), and records that
            # are no answer at all.
            huge_thread = "t" * 400_000
            huge = _replace(
                publisher.build(_forged({"jti": "j", "thread_id": "t"}), ANSWER, **axes(cp)),
                thread_id=huge_thread,
            )
            await send(pauses[0], huge, "token_invalid")
            for p in sorted(partitions_hit):
                await producer.send_and_wait(
                    dep.topics.answers, None, key=b"x\x00tombstone", partition=p
                )
                meta = await producer.send_and_wait(
                    dep.topics.answers, os.urandom(100), key=os.urandom(20), partition=p
                )
                expected[f"{dep.topics.answers}:{p}:{meta.offset}"] = "answer_undecodable"
            # The valid answers, behind all of it on the same partitions.
            good = {
                pause.token_id: await publisher.publish(
                    pause.token, ANSWER, **axes(pause.pause.checkpoint)
                )
                for pause in pauses
            }
            await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
            assert not task.done(), "the worker stopped"
            await follower.wait_for(
                lambda: [1] if len(follower.rejections()) >= len(expected) else []
            )
            for pause in pauses:
                await follower.wait_for(lambda p=pause: follower.resumed(p.token_id))
    finally:
        await producer.stop()
        await follower.stop()
    for pause in pauses:
        assert [t.answer_id for t in follower.resumed(pause.token_id)] == [
            good[pause.token_id].answer_id
        ]
        assert len(follower.consumed(pause.token_id)) == 1
    seen = Counter(r.answer_id for r in follower.rejections())
    assert all(n == 1 for n in seen.values()), [a for a, n in seen.items() if n > 1]
    reasons = {r.answer_id: r.reason for r in follower.rejections()}
    assert {a: reasons.get(a) for a in expected} == expected
    for record in follower.raw:
        assert len(record.value or b"") + len(record.key or b"") < 1_000_000


async def test_an_answer_too_large_to_resume_is_refused_and_the_partition_goes_on(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(sample_checkpoint(f"big-{names.app}"), request_json=REQUEST)
    follower = Follower(bootstrap, dep.topics)
    await follower.start()
    try:
        async with (
            running_worker(dep, tmp_path / "w") as worker,
            AnswerPublisher(dep.settings, dep.verifier) as publisher,
        ):
            await wait_owned([worker], PARTITIONS)
            cp = pause.pause.checkpoint
            text = "x" * 600_000  # passes the topic; its resumed turn holds it twice
            big = publisher.build(
                pause.token, {"answers": [{"selections": [], "other": text}]}, **axes(cp)
            )
            await publisher.publish_unchecked(big)
            [rejected] = await follower.wait_for(lambda: follower.rejections(big.answer_id))
            good = await publisher.publish(pause.token, ANSWER, **axes(cp))
            turns = await follower.wait_for(lambda: follower.resumed(pause.token_id))
            assert not run_task(worker).done()
    finally:
        await follower.stop()
    assert (rejected.reason, rejected.step) == ("answer_too_large", 4)
    assert str(dep.settings.max_record_bytes) in rejected.detail
    assert [t.answer_id for t in turns] == [good.answer_id]


def _replace(answer: AnswerSubmitted, **changes: Any) -> AnswerSubmitted:
    return dataclasses.replace(answer, **changes)
