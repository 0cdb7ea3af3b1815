"""The publisher, the pause recorder and the CLI ride out an unreachable broker (issue 11).

Before: an unreachable broker failed every verb at once (exit 4 within a second) and a publish
during a broker restart failed with aiokafka's own error. Now each retries with backoff for the
outage budget (``--broker-timeout`` / ``TURNLOG_BROKER_TIMEOUT``), says once that the broker
went and once that it came back, and only then gives up: the CLI with exit 4 and one line.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.brokers import OwnBroker, free_ports
from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, make_deployment, sample_checkpoint
from tests.integration.cli_support import EXIT_BROKER, Cli, cli_env, local_token
from tests.kafka_helpers import eventually, read_to_end
from turnlog.contracts.events import AnswerSubmitted, PauseRecorded
from turnlog.errors import BrokerUnavailable
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.wire.codec import decode

pytest_plugins = ["tests.brokers"]

OUTAGE_LOGGER = "turnlog.kafka.outage"
BUDGET = 3.0
#: How long past the budget a verb may take to say it gave up: process start, one last attempt
#: and a loaded 2-core machine -- far less than the five-minute default it would otherwise wait.
SLACK = 20.0


def _outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]


# -- the CLI: exit 4 with one line, only once the budget is spent --------------------------------


def test_every_kafka_verb_waits_for_the_budget_then_exits_4_with_one_line(
    names: Names, tmp_path: Path
) -> None:
    env = cli_env(f"127.0.0.1:{free_ports(1)}", names.prefix, names.app, tmp_path)
    cli = Cli(env)
    cli("keys", "new", "--kid", "k1")
    token, stated = local_token(tmp_path / "keys", "outage-thread")
    checkpoint = tmp_path / "checkpoint.json"
    checkpoint.write_text(sample_checkpoint("outage-thread").encode())
    response = '{"answers":[{"selections":["eu"],"other":null}]}'
    budget = str(int(BUDGET))
    verbs: list[tuple[tuple[str, ...], dict[str, str]]] = [
        (("answer", token, "--response", response, *stated, "--broker-timeout", budget), {}),
        (("pending", "--broker-timeout", budget), {}),
        (("--broker-timeout", budget, "topics", "ensure"), {}),
        (("pause", str(checkpoint)), {"TURNLOG_BROKER_TIMEOUT": budget}),
        (("show", "outage-thread", "--broker-timeout", budget), {}),
        (("forget", "outage-thread", "--yes", "--broker-timeout", budget), {}),
    ]
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "turnlog", *args],
            env={**env, **extra, "TURNLOG_STATE_DIR": str(tmp_path / f"state-{n}")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, (args, extra) in enumerate(verbs)
    ]
    results = []
    try:
        for proc in procs:
            _, stderr = proc.communicate(timeout=BUDGET + SLACK + 30)
            results.append((proc.returncode, stderr, time.monotonic() - started))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    for (args, _), (returncode, stderr, took) in zip(verbs, results, strict=True):
        lines = stderr.splitlines()
        assert returncode == EXIT_BROKER, (args, returncode, stderr)
        assert len(lines) == 1, (args, lines)
        assert lines[0].startswith("error: Kafka at 127.0.0.1:") and "not reachable" in lines[0]
        # It waited the budget out (the exit is not the first refused connection) ...
        assert took >= BUDGET, (args, took)
    # ... and did not hang long after it.
    assert max(took for _, _, took in results) < BUDGET + SLACK


# -- the publisher and the recorder across a real broker restart ----------------------------------


@pytest.fixture
async def dep(own_broker: OwnBroker, names: Names, tmp_path: Path) -> Deployment:
    return make_deployment(own_broker.bootstrap, names.prefix, names.app, tmp_path, partitions=3)


async def test_a_publish_during_a_broker_restart_waits_and_lands(
    own_broker: OwnBroker, dep: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        first, second = [
            await recorder.record(sample_checkpoint(f"restart-{i}"), request_json=REQUEST)
            for i in range(2)
        ]
    async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
        await publisher.publish(first.token, ANSWER, **axes(first.pause.checkpoint))
        await own_broker.stop()
        publishing = asyncio.create_task(
            publisher.publish(
                second.token, ANSWER, **axes(second.pause.checkpoint), answer_id="during"
            )
        )

        async def said_it_went() -> bool:
            return any("broker unreachable" in line for line in _outage_lines(caplog))

        await eventually(said_it_went, timeout=60)
        assert not publishing.done(), "the publish gave up while the broker was away"
        await own_broker.start()
        sent = await asyncio.wait_for(publishing, timeout=90)
    assert sent.answer_id == "during"
    lines = _outage_lines(caplog)
    assert len(lines) == 2, lines
    assert "broker unreachable" in lines[0] and "broker reachable" in lines[1]
    answers = [decode(r.value, AnswerSubmitted) for r in await read_to_end(
        own_broker.bootstrap, dep.topics.answers
    ) if r.value is not None]  # fmt: skip
    # A resend after a lost acknowledgement is the same fact (same key and answer id).
    assert {a.answer_id for a in answers if a.thread_id == "restart-1"} == {"during"}


async def test_a_pause_recorded_during_a_broker_restart_is_on_the_log_where_its_token_says(
    own_broker: OwnBroker, dep: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        await recorder.record(sample_checkpoint("before"), request_json=REQUEST)
        await own_broker.stop()
        recording = asyncio.create_task(
            recorder.record(sample_checkpoint("during"), request_json=REQUEST)
        )

        async def said_it_went() -> bool:
            return any("broker unreachable" in line for line in _outage_lines(caplog))

        await eventually(said_it_went, timeout=60)
        assert not recording.done(), "the pause gave up while the broker was away"
        await own_broker.start()
        recorded = await asyncio.wait_for(recording, timeout=90)
    lines = _outage_lines(caplog)
    assert len(lines) == 2 and "broker reachable again" in lines[1], lines
    records = await read_to_end(own_broker.bootstrap, dep.topics.pauses)
    at = [r for r in records if (r.partition, r.offset) == (recorded.partition, recorded.offset)]
    assert len(at) == 1 and at[0].value is not None
    assert decode(at[0].value, PauseRecorded).token_id == recorded.token_id


async def test_a_broker_gone_for_longer_than_the_budget_is_broker_unavailable(
    own_broker: OwnBroker, dep: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    settings = dep.settings.with_(broker_timeout_seconds=BUDGET)
    async with PauseRecorder(settings, dep.issuer) as recorder:
        pause = await recorder.record(sample_checkpoint("budget"), request_json=REQUEST)
    publisher = AnswerPublisher(settings, dep.verifier)
    await publisher.start()
    try:
        await own_broker.stop()
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable) as gave_up:
            await publisher.publish(pause.token, ANSWER, **axes(pause.pause.checkpoint))
        took = time.monotonic() - started
    finally:
        await publisher.stop()
    assert BUDGET <= took < BUDGET + SLACK + 30, took  # + one request timeout (30 s at most)
    assert own_broker.bootstrap in str(gave_up.value)
    lines = _outage_lines(caplog)
    assert len(lines) == 1 and "broker unreachable" in lines[0], lines
