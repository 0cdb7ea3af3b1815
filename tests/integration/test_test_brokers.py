"""The disposable brokers of ``tests.brokers`` do what outage tests rely on: data survives a stop
and a SIGKILL of the own broker, and a killed partition leader of the cluster is replaced and
comes back."""

from __future__ import annotations

import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.brokers import Cluster3, OwnBroker
from tests.kafka_helpers import read_to_end

pytest_plugins = ["tests.brokers"]


async def _send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def _create(bootstrap: str, topic: str, replication: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, replication)])
    finally:
        await admin.close()


async def test_own_broker_keeps_its_data_and_port_across_stop_and_kill(
    own_broker: OwnBroker,
) -> None:
    shared = "127.0.0.1:9092"
    assert own_broker.bootstrap != shared
    assert own_broker.port < 32768
    await _create(own_broker.bootstrap, "kept", 1)
    await _send(own_broker.bootstrap, "kept", [b"before-stop"])

    started = time.monotonic()
    await own_broker.stop()
    assert not own_broker.running
    await own_broker.start()
    restart = time.monotonic() - started
    await _send(own_broker.bootstrap, "kept", [b"before-kill"])

    started = time.monotonic()
    await own_broker.kill()
    await own_broker.start()
    after_kill = time.monotonic() - started
    await _send(own_broker.bootstrap, "kept", [b"after-kill"])

    values = [r.value for r in await read_to_end(own_broker.bootstrap, "kept")]
    assert values == [b"before-stop", b"before-kill", b"after-kill"]
    print(f"stop+start {restart:.1f}s, kill+start {after_kill:.1f}s")


async def test_cluster3_elects_a_new_leader_when_the_leader_is_killed(cluster3: Cluster3) -> None:
    await _create(cluster3.bootstrap, "led", 3)
    await _send(cluster3.bootstrap, "led", [b"one"])
    leader = await cluster3.leader_of("led", 0)
    assert leader in (1, 2, 3)

    await cluster3.kill_node(leader)
    assert leader not in cluster3.running_nodes
    successor = await cluster3.leader_of("led", 0)
    assert successor != leader
    await _send(cluster3.bootstrap, "led", [b"two"])

    await cluster3.start_node(leader)
    assert cluster3.running_nodes == {1, 2, 3}
    await cluster3.stop_node(successor)
    third = await cluster3.leader_of("led", 0)
    assert third != successor
    await _send(cluster3.bootstrap, "led", [b"three"])
    await cluster3.start_node(successor)

    values = [r.value for r in await read_to_end(cluster3.bootstrap, "led")]
    assert values == [b"one", b"two", b"three"]
