"""Publish an answer the way any Kafka client can: nothing from turnlog is imported, only a
Kafka client (aiokafka) and an Avro library (fastavro), so each step below has its twin in
Java, Go, TypeScript or any other language with those two.

    python docs/snippets/any_client_answer.py pause.json

pause.json holds the pause's token and the four axes (what the first tutorial's agent side
wrote). The answer goes to the answers topic, on the partition of its thread, keyed by thread and
answer id, as an Avro single-object-encoded AnswerSubmitted; a resume worker decides it.
"""

import asyncio
import base64
import io
import json
import os
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
from aiokafka import AIOKafkaProducer

SCHEMA = fastavro.parse_schema(json.loads(Path("schemas/AnswerSubmitted.avsc").read_text()))
# C3 01, then the CRC-64-AVRO fingerprint of the schema's parsing canonical form, as on the wire.
HEADER = bytes.fromhex("c301") + bytes.fromhex("2cb003916fd4561e")


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (the Java default partitioner's hash), as a signed 32-bit int."""
    m, r, length = 0x5BD1E995, 24, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[length - length % 4 :]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def token_claims(token: str) -> dict[str, Any]:
    """The JWT's payload, read for routing only: the worker verifies the signature."""
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


async def publish(pause: dict[str, Any]) -> None:
    token, axes = pause["token"], pause["axes"]
    thread_id = str(token_claims(token)["thread_id"])
    answer_id = uuid.uuid4().hex  # reuse it on a retry: the retry is then the same fact
    now = datetime.now(UTC)
    answer = {
        "event_id": uuid.uuid4().hex,
        "occurred_at": now,
        "submitted_at": now,
        "package_version": "any-client-1",
        "answer_id": answer_id,
        "token": token,  # passed through unchanged
        "thread_id": thread_id,
        "scope_hash": axes["scope_hash"],  # the four axes: each one stated, never left out
        "session_id": axes["session_id"],
        "run_id": axes["run_id"],
        "call_id": axes["call_id"],
        "response_json": json.dumps({"answers": [{"selections": ["eu"], "other": None}]}),
    }
    body = io.BytesIO()
    fastavro.schemaless_writer(body, SCHEMA, answer)
    topic = os.environ.get("TURNLOG_TOPIC_PREFIX", "turnlog.") + "answers"
    producer = AIOKafkaProducer(
        bootstrap_servers=os.environ.get("TURNLOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        acks="all",
        enable_idempotence=True,
    )
    await producer.start()
    try:
        partitions = await producer.partitions_for(topic)
        # The partition of the thread alone; the key below is composite, so it is set explicitly.
        partition = (murmur2(thread_id.encode()) & 0x7FFFFFFF) % len(partitions)
        key = thread_id.encode() + b"\x00" + answer_id.encode()
        sent = await producer.send_and_wait(
            topic, HEADER + body.getvalue(), key=key, partition=partition
        )
    finally:
        await producer.stop()
    print(f"published answer {answer_id} to partition {sent.partition} @ {sent.offset}")


if __name__ == "__main__":
    asyncio.run(publish(json.loads(Path(sys.argv[1]).read_text())))
