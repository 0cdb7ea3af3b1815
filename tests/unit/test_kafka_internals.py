"""aiokafka's private attributes that turnlog.kafka.internals uses still have the shape it uses.

No broker: the clients are built, not started. An upgrade of aiokafka that renames or reshapes
one of them fails here, naming it, instead of failing in a worker.
"""

from __future__ import annotations

import inspect

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.protocol.metadata import MetadataRequest

from turnlog.kafka.internals import died_of_fence


async def test_a_consumer_has_the_client_and_fetcher_used() -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
    client = consumer._client
    assert callable(client.force_metadata_update)  # returns an awaitable of bool
    assert inspect.iscoroutinefunction(client.close)
    # The fetcher exists only once started; its class is what close_after_cancelled_stop reads.
    assert "_pending_tasks" in inspect.getsource(Fetcher.__init__)
    # What topic_unauthorized uses: a node to ask, send, and a metadata request that can turn
    # auto-creation off; a response's topics are (error_code, name, ...) from version 1 on.
    assert callable(client.get_random_node)
    assert inspect.iscoroutinefunction(client.send)
    assert "allow_auto_topic_creation" in inspect.signature(MetadataRequest).parameters
    assert "error_code, topic, is_internal, partitions = topic_data" in inspect.getsource(
        ClusterMetadata.update_metadata
    )
    await consumer.stop()


async def test_a_producer_has_the_sender_task_used() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="t")
    assert hasattr(producer._sender, "sender_task")
    assert producer._sender.sender_task is None  # not started
    assert died_of_fence(producer) is False
    await producer.stop()
