"""Pause a turn the way any Kafka client can: nothing from turnlog is imported, only a Kafka
client (aiokafka), an Avro library (fastavro) and a JWT library (PyJWT, with cryptography for
Ed25519), so each step below has its twin in Java, Go, TypeScript or any other language.

    python docs/snippets/any_client_pause.py thread-7

It writes the PauseRecorded of a turn stopped on an ask_user call to the pauses topic, on the
partition of its thread, keyed by thread and checkpoint, then signs the pause's token with the
deployment's signing key (what turnlog does after its own write) and writes pause.json -- the
token and the four axes, what docs/snippets/any_client_answer.py reads. A resume worker then
decides the answer exactly as it decides one to a pause turnlog wrote.
"""

import asyncio
import hashlib
import io
import json
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import jwt
from aiokafka import AIOKafkaProducer

# The standalone schema holds every named type it uses (the checkpoint, its messages).
SCHEMA = fastavro.parse_schema(
    json.loads(Path("schemas/standalone/PauseRecorded.avsc").read_text())
)
# C3 01, then the CRC-64-AVRO fingerprint of the schema's parsing canonical form, as on the wire.
HEADER = bytes.fromhex("c301") + bytes.fromhex("ecf1a9d028d08279")


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


def canonical_json(value: Any) -> str:
    """The request's canonical JSON text: keys sorted, no whitespace, non-ASCII as itself."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(request_json: str) -> str:
    """SHA-256 (lowercase hex) of the UTF-8 bytes of the request's canonical JSON text."""
    return hashlib.sha256(canonical_json(json.loads(request_json)).encode("utf-8")).hexdigest()


def signing_key() -> tuple[str, bytes]:
    """The deployment's signing key (kid, PEM): TURNLOG_SIGNING_KID and TURNLOG_SIGNING_KEY_PEM,
    or the one <kid>.private.pem that `turnlog keys new` wrote into TURNLOG_KEYS_DIR."""
    if os.environ.get("TURNLOG_SIGNING_KEY_PEM"):
        return os.environ["TURNLOG_SIGNING_KID"], os.environ["TURNLOG_SIGNING_KEY_PEM"].encode()
    keys = Path(os.environ.get("TURNLOG_KEYS_DIR", ".turnlog/keys"))
    kid = os.environ.get("TURNLOG_SIGNING_KID")
    if kid is None:
        (only,) = keys.glob("*.private.pem")  # several keys: name the signing one
        kid = only.name.removesuffix(".private.pem")
    return kid, (keys / f"{kid}.private.pem").read_bytes()


def pause_record(thread_id: str, now: datetime) -> dict[str, Any]:
    """The PauseRecorded of a turn of ``thread_id`` stopped on an ask_user call at ``now``."""
    n = thread_id.rsplit("-", 1)[-1]
    question = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
    request_json = canonical_json(question)  # recorded canonical: its hash is its own bytes'
    checkpoint = {
        "run_id": f"run-{n}",
        "session_id": f"session-{n}",
        "thread_id": thread_id,
        "checkpoint_id": "cp-1",
        "scope_hash": "tenant-a",
        "tool_call_id": "call-1",  # the call the turn stopped on
        "interrupt_id": "",
        "name": "ask_user",
        "prompt": "",
        "messages": [  # the turn so far, ending with the asking round (the call, not run)
            {"role": "system", "content": "You deploy services.", "tool_calls": []},
            {"role": "user", "content": "Deploy the billing service.", "tool_calls": []},
            {
                "role": "assistant",
                "content": "Which region?",
                "tool_calls": [{"id": "call-1", "name": "ask_user", "arguments": request_json}],
            },
        ],
        "sequence": 1,
        "tenant_id": "tenant-a",
        "created_at": now,
        "package_version": "any-client-1",
        "safe_boundary": False,
        "version": 1,
    }
    return {
        "event_id": uuid.uuid4().hex,
        "occurred_at": now,  # the token's iat and nbf
        "package_version": "any-client-1",
        "checkpoint": checkpoint,
        "token_id": uuid.uuid4().hex,  # the token's jti
        "request_json": request_json,
        "request_hash": request_hash(request_json),  # the token's request_hash claim
        "response_schema": "ask_user",  # the interaction the answer must satisfy
        "expires_at": now + timedelta(hours=1),  # the token's exp
        "group": [],
    }


def encoded(recorded: dict[str, Any]) -> bytes:
    """The record's value: the single-object header, then the Avro binary body."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, SCHEMA, recorded)
    return HEADER + body.getvalue()


def token_for(recorded: dict[str, Any], partition: int, offset: int) -> str:
    """The pause's token: a compact JWT signed with the deployment's key, claims from the
    pause and where it was written."""
    cp = recorded["checkpoint"]
    claims = {
        "iss": os.environ.get("TURNLOG_ISSUER", "turnlog"),
        "aud": os.environ.get("TURNLOG_AUDIENCE", "turnlog-answers"),
        "jti": recorded["token_id"],
        "iat": int(recorded["occurred_at"].timestamp()),
        "nbf": int(recorded["occurred_at"].timestamp()),
        "exp": int(recorded["expires_at"].timestamp()),
        "scope_hash": cp["scope_hash"],
        "session_id": cp["session_id"],
        "run_id": cp["run_id"],
        "tool_call_id": cp["tool_call_id"],
        "interrupt_id": cp["interrupt_id"],
        "thread_id": cp["thread_id"],
        "checkpoint_id": cp["checkpoint_id"],
        "interaction": recorded["response_schema"],
        "request_hash": recorded["request_hash"],
        "pause_partition": partition,  # where the pause is: its owner reads up to it
        "pause_offset": offset,
    }
    kid, pem = signing_key()
    return jwt.encode(claims, pem, algorithm="EdDSA", headers={"kid": kid})


async def write(recorded: dict[str, Any]) -> tuple[int, int]:
    """Write the pause to its thread's partition of the pauses topic: (partition, offset)."""
    cp = recorded["checkpoint"]
    thread_id = cp["thread_id"]
    topic = os.environ.get("TURNLOG_TOPIC_PREFIX", "turnlog.") + "pauses"
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
        key = thread_id.encode() + b"\x00" + cp["checkpoint_id"].encode()
        sent = await producer.send_and_wait(topic, encoded(recorded), key=key, partition=partition)
    finally:
        await producer.stop()
    return sent.partition, sent.offset


def main(thread_id: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)  # the token carries whole seconds
    recorded = pause_record(thread_id, now)
    partition, offset = asyncio.run(write(recorded))
    token = token_for(recorded, partition, offset)  # handed out once the pause is written
    cp = recorded["checkpoint"]
    axes = {
        "scope_hash": cp["scope_hash"],
        "session_id": cp["session_id"],
        "run_id": cp["run_id"],
        "call_id": cp["tool_call_id"],
    }
    Path("pause.json").write_text(json.dumps({"token": token, "axes": axes}))
    print(f"paused {thread_id} on partition {partition} @ {offset}: token {recorded['token_id']}")


if __name__ == "__main__":
    main(sys.argv[1])
