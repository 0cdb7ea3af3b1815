"""Readiness of the checkpoint service against real brokers (seed 001): created once under a
race, not latched by a failure, and refusing a topic set it would have to "fix"."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import turnlog.kafka.topics as topics_module
import turnlog.producers.pauses as pauses_module
from tests.conftest import KAFKA_SCRIPT, REPO, Names
from tests.deployment import REQUEST, make_deployment, sample_checkpoint
from turnlog.errors import BrokerUnavailable, TopicMismatch
from turnlog.kafka.topics import TopicSet, TopicState, admin_client, describe, wait_for_leaders
from turnlog.producers.pauses import PauseRecorder
from turnlog.projections.service import CheckpointService


@asynccontextmanager
async def admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    client = admin_client(bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def topic_states(bootstrap: str, topics: TopicSet) -> dict[str, TopicState]:
    async with admin(bootstrap) as client:
        return await describe(client, [spec.name for spec in topics.specs()])


async def create_topic(bootstrap: str, name: str, partitions: int, policy: str) -> None:
    async with admin(bootstrap) as client:
        response = await client.create_topics(
            [NewTopic(name, partitions, 1, topic_configs={"cleanup.policy": policy})]
        )
        assert [code for _, code, _ in response.topic_errors] == [0]
        await wait_for_leaders(client, [name])


# --- two at once --------------------------------------------------------------------------------


async def test_concurrent_readiness_creates_each_topic_once(
    bootstrap: str, names: Names, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    created: list[list[str]] = []
    real_ensure, real_describe = pauses_module.ensure_topics, topics_module.describe

    async def recording_ensure(
        client: AIOKafkaAdminClient, topics: TopicSet, **options: bool
    ) -> list[str]:
        names_created = await real_ensure(client, topics, **options)
        created.append(names_created)
        return names_created

    # Both recorders finish their first look before either creates: a real race, every time.
    first_looks = 0
    both_looked = asyncio.Event()

    async def describe_together(
        client: AIOKafkaAdminClient, wanted: list[str]
    ) -> dict[str, TopicState]:
        nonlocal first_looks
        found = await real_describe(client, wanted)
        first_looks += 1
        if first_looks <= 2:
            if first_looks == 2:
                both_looked.set()
            await asyncio.wait_for(both_looked.wait(), 30)
        return found

    monkeypatch.setattr(pauses_module, "ensure_topics", recording_ensure)
    monkeypatch.setattr(topics_module, "describe", describe_together)
    one = CheckpointService(PauseRecorder(dep.settings, dep.issuer))
    two = CheckpointService(PauseRecorder(dep.settings, dep.issuer))
    try:
        # Each service is asked twice at once too: its lock makes that one readiness.
        await asyncio.gather(
            one.ensure_ready(), two.ensure_ready(), one.ensure_ready(), two.ensure_ready()
        )
        assert one.ready and two.ready
        assert len(created) == 2
        all_names = sorted(spec.name for spec in dep.topics.specs())
        assert sorted(itertools.chain.from_iterable(created)) == all_names
        assert first_looks >= 3  # the loser looked again and verified what the winner made
        monkeypatch.undo()
        states = await topic_states(bootstrap, dep.topics)
        assert sorted(states) == all_names
        assert {state.partitions for state in states.values()} == {3}
    finally:
        await one.close()
        await two.close()


# --- a broker that is down, then up -----------------------------------------------------------


def free_port_pair() -> int:
    """A free client port whose successor (the controller port kafka.sh uses) is free too."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        with socket.socket() as successor:
            try:
                successor.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports")


class LocalBroker:
    """A second single-node Kafka from compose/kafka-local, in its own home and ports."""

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        home.mkdir(parents=True)
        # Reuse the jars the session's broker already has, if any; kafka.sh fetches otherwise.
        jars = Path(os.environ.get("KAFKA_LOCAL_HOME", REPO / ".kafka"))
        for lib in jars.glob("lib-*"):
            if (lib / ".complete").is_file():
                (home / lib.name).symlink_to(lib.resolve(), target_is_directory=True)

    async def run(self, verb: str) -> None:
        env = {
            **os.environ,
            "KAFKA_LOCAL_HOME": str(self.home),
            "KAFKA_LOCAL_HOST": "127.0.0.1",
            "KAFKA_LOCAL_PORT": str(self.port),
            "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m",
        }
        done = await asyncio.to_thread(
            subprocess.run,
            [str(KAFKA_SCRIPT), verb],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"kafka.sh {verb} failed:\n{done.stderr}")


async def test_failed_readiness_does_not_latch_and_succeeds_once_the_broker_is_up(
    names: Names, tmp_path: Path
) -> None:
    broker = LocalBroker(tmp_path / "kafka", free_port_pair())
    dep = make_deployment(
        broker.bootstrap, names.prefix, names.app, tmp_path / "state", partitions=2
    )
    # A short outage budget: the first readiness must give up (and not latch) while the
    # broker is still down, rather than wait the default five minutes for it.
    recorder = PauseRecorder(dep.settings.with_(broker_timeout_seconds=2), dep.issuer)
    service = CheckpointService(recorder)
    try:
        with pytest.raises(BrokerUnavailable):
            await service.ensure_ready()
        assert not service.ready  # the failure is not remembered as readiness ...

        await broker.run("start")
        await service.ensure_ready()  # ... nor as failure: this call retries, and succeeds
        assert service.ready
        states = await topic_states(broker.bootstrap, dep.topics)
        assert sorted(states) == sorted(spec.name for spec in dep.topics.specs())
        recorded = await recorder.record(sample_checkpoint("thread-1"), request_json=REQUEST)
        assert recorded.offset >= 0
    finally:
        await service.close()
        await broker.run("stop")


# --- a topic set readiness must not "fix" -----------------------------------------------------


@pytest.mark.parametrize(("role", "policy"), [("pauses", "delete"), ("resumed", "compact")])
async def test_topic_with_the_wrong_cleanup_policy_is_refused_by_name(
    bootstrap: str, names: Names, tmp_path: Path, role: str, policy: str
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    wrong = names.topic(role)
    await create_topic(bootstrap, wrong, 3, policy)
    service = CheckpointService(PauseRecorder(dep.settings, dep.issuer))
    try:
        for _ in range(2):  # refused again on retry: a mismatch is not transient
            with pytest.raises(TopicMismatch) as refused:
                await service.ensure_ready()
            assert refused.value.reason == "cleanup_policy_mismatch"
            assert wrong in str(refused.value)
            assert not service.ready
    finally:
        await service.close()
    states = await topic_states(bootstrap, dep.topics)
    assert list(states) == [wrong]  # nothing else was created, and the topic was not altered
    assert states[wrong].configs["cleanup.policy"] == policy


async def test_topic_with_another_partition_count_is_refused_by_name(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    wrong = dep.topics.pauses
    await create_topic(bootstrap, wrong, 4, "compact")
    service = CheckpointService(PauseRecorder(dep.settings, dep.issuer))
    try:
        with pytest.raises(TopicMismatch) as refused:
            await service.ensure_ready()
        assert refused.value.reason == "partition_count_mismatch"
        assert wrong in str(refused.value)
        assert not service.ready
    finally:
        await service.close()
    states = await topic_states(bootstrap, dep.topics)
    assert list(states) == [wrong]
    assert states[wrong].partitions == 4
