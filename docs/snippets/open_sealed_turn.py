"""Open a sealed resumed turn (TURNLOG_SEAL) without turnlog: a Kafka client, an Avro reader and
AES-GCM, as a reader in any language would.

Usage: python docs/snippets/open_sealed_turn.py BOOTSTRAP PREFIX THREAD_ID

Every record on <prefix>resumed is a TurnResumed (schemas/standalone/TurnResumed.avsc). A sealed
one has its content fields empty and `sealed` set: a 12-byte nonce, then the AES-256-GCM
ciphertext and tag of the whole record as it was before sealing. Its key is the value of the
record keyed `thread_id NUL event_id` on <prefix>keys (32 bytes; the same bytes are the associated
data); `turnlog forget` writes a tombstone under that key, and from then on the turn opens for no
one.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka import Consumer, TopicPartition
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "standalone" / "TurnResumed.avsc"
PARSED = fastavro.parse_schema(json.loads(SCHEMA.read_text("utf-8")))


def fingerprint() -> bytes:
    """The schema's CRC-64-AVRO fingerprint, little-endian: bytes 2..10 of each record."""
    canonical = fastavro.schema.to_parsing_canonical_form(PARSED)
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))


def read_record(value: bytes) -> dict[str, Any]:
    """A single-object encoded TurnResumed of today's schema version as a dict."""
    if value[:2] != b"\xc3\x01" or value[2:10] != fingerprint():
        raise ValueError("not a TurnResumed of this schema version (another one, or PauseExpired)")
    return fastavro.schemaless_reader(io.BytesIO(value[10:]), PARSED, PARSED)  # type: ignore[return-value]


def open_turn(value: bytes, keys: dict[bytes, bytes | None]) -> dict[str, Any] | None:
    """The turn with its content; None when its key is gone (the thread was forgotten)."""
    record = read_record(value)
    sealed = record.get("sealed")
    if sealed is None:
        return record  # written by a worker that does not seal
    name = record["thread_id"].encode() + b"\x00" + record["event_id"].encode()
    key = keys.get(name)
    if key is None:
        return None
    inner = AESGCM(key).decrypt(sealed[:12], sealed[12:], name)
    return read_record(inner)


def read_partition(bootstrap: str, topic: str, partition: int) -> list[tuple[bytes, bytes | None]]:
    """Every committed (key, value) of one partition, oldest first."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sealed-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, low)])
        found: list[tuple[bytes, bytes | None]] = []
        while True:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                found.append((message.key(), message.value()))
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= high or (message is None and position < 0 and high == low):
                return found
    finally:
        consumer.close()


def keys_of(records: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    """The latest value of each key (a tombstone: None), as compaction keeps it."""
    return dict(records)


def main(bootstrap: str, prefix: str, thread_id: str, partition: str) -> None:
    keys = keys_of(read_partition(bootstrap, f"{prefix}keys", int(partition)))
    for key, value in read_partition(bootstrap, f"{prefix}resumed", int(partition)):
        if key != thread_id.encode() or value is None:
            continue
        try:
            turn = open_turn(value, keys)
        except ValueError:
            continue  # an expiry, or a turn of an older schema version
        if turn is None:
            print("sealed, and its key is gone: the thread was forgotten")
        else:
            print(f"answer {turn['answer_id']}: {len(turn['history'])} messages")


if __name__ == "__main__":
    main(*sys.argv[1:])
