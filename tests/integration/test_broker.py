"""The broker under the suite is a real Kafka with working transactions and compaction."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer
from aiokafka.admin import NewTopic

from tests.conftest import Names
from tests.kafka_helpers import read_to_end
from turnlog.kafka.topics import admin_client, describe, wait_for_leaders


async def _create(bootstrap: str, *topics: NewTopic) -> None:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(list(topics))
        assert [code for _, code, _ in response.topic_errors] == [0] * len(topics)
        await wait_for_leaders(admin, [t.name for t in topics])
    finally:
        await admin.close()


async def test_committed_transaction_is_read_by_read_committed(
    bootstrap: str, names: Names
) -> None:
    topic = names.topic("tx")
    await _create(bootstrap, NewTopic(topic, 1, 1))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=names.app)
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(topic, b"one", key=b"k")
            await producer.send(topic, b"two", key=b"k")
    finally:
        await producer.stop()
    records = await read_to_end(bootstrap, topic, isolation_level="read_committed")
    assert [r.value for r in records] == [b"one", b"two"]


async def test_aborted_transaction_is_hidden_from_read_committed_only(
    bootstrap: str, names: Names
) -> None:
    topic = names.topic("abort")
    await _create(bootstrap, NewTopic(topic, 1, 1))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=names.app)
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted", key=b"k")
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"kept", key=b"k")
    finally:
        await producer.stop()
    committed = await read_to_end(bootstrap, topic, isolation_level="read_committed")
    uncommitted = await read_to_end(bootstrap, topic, isolation_level="read_uncommitted")
    assert [r.value for r in committed] == [b"kept"]
    assert [r.value for r in uncommitted] == [b"aborted", b"kept"]


async def test_compacted_topic_reads_back_as_compact(bootstrap: str, names: Names) -> None:
    topic = names.topic("compact")
    await _create(bootstrap, NewTopic(topic, 3, 1, topic_configs={"cleanup.policy": "compact"}))
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        state = (await describe(admin, [topic]))[topic]
    finally:
        await admin.close()
    assert state.partitions == 3
    assert state.configs["cleanup.policy"] == "compact"
