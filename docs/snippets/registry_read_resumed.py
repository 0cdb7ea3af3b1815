"""Read turnlog's resumed turns from the registry wire with confluent-kafka alone.

Usage: python docs/snippets/registry_read_resumed.py BOOTSTRAP REGISTRY_URL [TOPIC]

The worker writes with TURNLOG_WIRE=registry; this reader knows nothing of turnlog: the schema
id in each record's first five bytes is resolved through the registry by the deserializer.
"""

from __future__ import annotations

import sys
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def read(deserialize: AvroDeserializer, topic: str, value: bytes) -> dict[str, Any] | None:
    """The record as a dict, or None for one written before the switch (single-object: it
    opens with C3 01, not the registry's 00; turnlog's own readers read both)."""
    if value[:1] != b"\x00":
        return None
    return deserialize(value, SerializationContext(topic, MessageField.VALUE))


def main(bootstrap: str, registry_url: str, topic: str = "turnlog.resumed") -> None:
    registry = SchemaRegistryClient({"url": registry_url})
    deserialize = AvroDeserializer(registry)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "resumed-reader",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        while True:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                raise SystemExit(str(message.error()))
            turn = read(deserialize, message.topic(), message.value())
            if turn is not None and "history" in turn:  # a TurnResumed; a PauseExpired has none
                print(
                    f"resumed thread {turn['thread_id']} answer {turn['answer_id']}: "
                    f"{len(turn['history'])} messages"
                )
    finally:
        consumer.close()
        registry.__exit__()


if __name__ == "__main__":
    main(*sys.argv[1:])
