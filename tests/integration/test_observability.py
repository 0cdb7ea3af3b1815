"""Metrics and health over real HTTP while a worker handles answers on the real broker.

One worker with its own registry and health server: ``/readyz`` is 503 while its take is held
in the restore and 200 once it owns every partition; ``/metrics`` counts the answers by outcome
and reason as the topics show them; the lag gauge reads 0 once everything is committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, axes, sample_checkpoint
from tests.integration.worker_support import (
    Follower,
    keyed_deployment,
    running_worker,
    wait_owned,
)
from tests.kafka_helpers import eventually, wait_until_consumed
from turnlog.observability.health import HealthServer
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder


async def http_get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10.0)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_and_health_of_a_running_worker(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path, partitions=3)
    registry = CollectorRegistry()
    cps = [sample_checkpoint(f"obs-thread-{i}") for i in range(3)]
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pauses = [await recorder.record(cp, request_json=REQUEST) for cp in cps]
    gate = asyncio.Event()
    follower = Follower(bootstrap, dep.topics)
    await follower.start()
    try:
        async with running_worker(dep, tmp_path / "worker", registry=registry) as worker:
            # Hold the take inside its restore: the worker is assigned but owns nothing yet.
            original = worker._take_state

            async def held_take(partitions: list[int]) -> None:
                await gate.wait()
                await original(partitions)

            worker._owners._restore = held_take
            health = HealthServer(
                0, host="127.0.0.1", registry=registry, ready=lambda: worker.ready
            )
            async with health:
                assert (await http_get(health.port, "/healthz"))[0] == 200

                async def joined() -> bool:
                    return worker._joined

                await eventually(joined, timeout=30.0)
                assert (await http_get(health.port, "/readyz"))[0] == 503
                gate.set()
                await wait_owned([worker], 3)

                async def ready() -> bool:
                    return (await http_get(health.port, "/readyz"))[0] == 200

                await eventually(ready, timeout=10.0)

                async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
                    for i, (cp, pause) in enumerate(zip(cps, pauses, strict=True)):
                        await publisher.publish(
                            pause.token, ANSWER, **axes(cp), answer_id=f"ok-{i}"
                        )
                    # The same answer again: a duplicate; a wrong session: a named refusal.
                    await publisher.publish(
                        pauses[0].token, ANSWER, **axes(cps[0]), answer_id="ok-0"
                    )
                    built = publisher.build(pauses[1].token, ANSWER, **axes(cps[1]))
                    bad = dataclasses.replace(built, answer_id="bad-1", session_id="elsewhere")
                    await publisher.publish_unchecked(bad)
                rejected = await follower.wait_for(lambda: follower.rejections("bad-1"))
                await wait_until_consumed(
                    bootstrap, dep.settings.application_id, dep.topics.answers
                )
                reason = rejected[0].reason

                async def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
                    got = samples((await http_get(health.port, "/metrics"))[1])
                    total = sum(
                        v for (n, _), v in got.items() if n == "turnlog_worker_answers_total"
                    )
                    return got if total == 5 else {}

                got = await eventually(counted, timeout=30.0)
    finally:
        await follower.stop()
    answers = "turnlog_worker_answers_total"
    assert got[(answers, (("outcome", "resumed"), ("reason", "")))] == 3
    assert got[(answers, (("outcome", "duplicate"), ("reason", "")))] == 1
    assert got[(answers, (("outcome", "rejected"), ("reason", reason)))] == 1
    assert got[("turnlog_worker_resume_latency_seconds_count", ())] == 3
    assert got[("turnlog_worker_owned_partitions", ())] == 3
    assert got[("turnlog_worker_restore_duration_seconds_count", ())] >= 1
    assert got[("turnlog_worker_restored_records_total", ())] >= 3
    assert got[("turnlog_worker_batch_duration_seconds_count", ())] >= 1
    assert got[("turnlog_worker_transaction_duration_seconds_count", ())] >= 1
    lags = {k: v for k, v in got.items() if k[0] == "turnlog_worker_consumer_lag"}
    assert lags and set(lags.values()) == {0.0}
