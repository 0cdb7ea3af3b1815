"""What every scenario shares: a deployment, the sample turn, topics, preloading, statistics.

The sample turn is the shape the targets talk about: a 20-message checkpoint (system, user, eight
tool rounds, a follow-up and the asking round with three reserved calls), about 3 KB as Avro.
Preloading writes ``PauseRecorded`` records with :func:`turnlog.wire.codec.encode` through a plain
transactional producer, so a scenario measures the worker, not the pause recorder's round trips.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic

from turnlog.clock import utc_now
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import AnswerSubmitted, PauseRecorded
from turnlog.contracts.resume import request_hash
from turnlog.kafka import clients
from turnlog.kafka.partitioning import answer_key, partition_for, pause_key
from turnlog.kafka.registry import prepare_wire
from turnlog.kafka.topics import TopicSet, admin_client, ensure_topics, wait_for_leaders
from turnlog.settings import Settings
from turnlog.tokens import Keyring, PauseClaims, TokenIssuer, TokenVerifier, generate_ed25519
from turnlog.wire.codec import encode

KID = "bench-key"
ANSWER_JSON = json.dumps({"answers": [{"selections": ["eu"], "other": None}]})
REQUEST_JSON = json.dumps({"questions": [{"question": "Which region?", "options": ["eu", "us"]}]})
TOKEN_TTL = timedelta(days=1)


# --- a deployment --------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    settings: Settings
    topics: TopicSet
    private_pem: str
    issuer: TokenIssuer
    verifier: TokenVerifier

    @property
    def prefix(self) -> str:
        return self.settings.topic_prefix


def wire_options() -> dict[str, str]:
    """The wire a run writes and reads, from ``TURNLOG_WIRE`` and ``TURNLOG_SCHEMA_REGISTRY_URL``
    as turnlog's own settings take them (single-object when unset): the same in the harness,
    which preloads, and in the worker processes it starts, which inherit its environment."""
    wire = os.environ.get("TURNLOG_WIRE", "").strip()
    url = os.environ.get("TURNLOG_SCHEMA_REGISTRY_URL", "").strip()
    return {
        **({"wire": wire} if wire else {}),
        **({"schema_registry_url": url} if url else {}),
    }


def group_options() -> dict[str, int]:
    """The worker group's timings from ``TURNLOG_SESSION_TIMEOUT_MS`` and
    ``TURNLOG_HEARTBEAT_INTERVAL_MS``, read and checked by turnlog's own settings -- what
    ``turnlog worker`` reads, so a takeover measured here is one an operator can set."""
    names = ("TURNLOG_SESSION_TIMEOUT_MS", "TURNLOG_HEARTBEAT_INTERVAL_MS")
    settings = Settings.from_env({n: os.environ[n] for n in names if n in os.environ})
    return {
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": settings.heartbeat_interval_ms,
    }


def seal_options() -> dict[str, bool]:
    """``TURNLOG_SEAL`` as ``turnlog worker`` reads it: the worker seals every resumed turn
    under a key of its own (``docs/operations/forgetting.md``), so its cost is measured with
    the setting a user sets."""
    settings = Settings.from_env({n: os.environ[n] for n in ("TURNLOG_SEAL",) if n in os.environ})
    return {"seal": settings.seal}


def make_deployment(
    bootstrap: str,
    prefix: str,
    *,
    partitions: int = 6,
    commit_interval_ms: int = 100,
    state_dir: Path | None = None,
    replication_factor: int = 1,
) -> Deployment:
    """Settings, a fresh Ed25519 key and the topic set of one benchmark deployment (on a
    cluster, ``replication_factor`` 3 makes the topics as production does: min.insync 2)."""
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=prefix,
        application_id=f"{prefix}app",
        state_dir=state_dir or Path(".turnlog/bench-unused"),
        partitions=partitions,
        commit_interval_ms=commit_interval_ms,
        replication_factor=replication_factor,
        min_insync_replicas=min(2, replication_factor),
        **wire_options(),  # type: ignore[arg-type]
    )
    private_pem, _ = generate_ed25519(KID)
    keyring = Keyring.ed25519(KID, private_pem)
    return Deployment(
        settings=settings,
        topics=TopicSet.from_settings(settings),
        private_pem=private_pem.decode(),
        issuer=TokenIssuer(keyring, issuer=settings.issuer, audience=settings.audience),
        verifier=TokenVerifier(
            keyring,
            issuer=settings.issuer,
            audience=settings.audience,
            leeway=timedelta(seconds=settings.token_leeway_seconds),
        ),
    )


def unique_prefix(run_id: str, scenario: str, n: int = 0) -> str:
    return f"bench.{run_id}.{scenario}{n}."


# --- the sample turn ------------------------------------------------------------------------


@functools.cache
def _messages(count: int) -> tuple[dict[str, Any], ...]:
    """``count`` messages (at least 4) ending with an asking round that reserved three calls."""
    transcript: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a deployment assistant for the platform team. " * 4},
        {
            "role": "user",
            "content": "Deploy the billing service once its dependencies are healthy.",
        },
    ]
    rounds, odd = divmod(max(count, 4) - 4, 2)
    for i in range(rounds):
        transcript.append(
            {
                "role": "assistant",
                "content": f"Checking dependency {i} first.",
                "tool_calls": [
                    {"id": f"c{i}", "name": "health", "arguments": {"service": f"dep-{i}"}}
                ],
            }
        )
        status = {"service": f"dep-{i}", "status": "healthy", "p99_ms": 12 + i}
        transcript.append(
            {
                "role": "tool",
                "content": json.dumps({**status, "notes": "all replicas ready; " * 4}),
                "tool_call_id": f"c{i}",
                "name": "health",
            }
        )
    if odd:
        transcript.append({"role": "user", "content": "Also check the queue depth."})
    transcript.append({"role": "user", "content": "Good. Go ahead with the rollout."})
    calls = [
        ReservedCall("call-1", "ask_user", {"question": "Which region?"}),
        ReservedCall("call-2", "search", {"q": "region capacity"}),
        ReservedCall("call-3", "search", {"q": "change freeze"}),
    ]
    return captured_messages(transcript, "I need to know the region first.", calls)


def checkpoint(
    thread_id: str, *, messages: int = 20, now: datetime | None = None
) -> TurnCheckpoint:
    return TurnCheckpoint(
        run_id=f"run-{thread_id}",
        session_id=f"session-{thread_id}",
        thread_id=thread_id,
        checkpoint_id="cp-1",
        scope_hash="tenant-a",
        tool_call_id="call-1",
        interrupt_id=f"int-{thread_id}",
        name="ask_user",
        prompt="Continue with the person's answer.",
        messages=_messages(messages),
        sequence=1,
        tenant_id="tenant-a",
        created_at=now or utc_now(),
        package_version="bench",
    )


def pause_for(thread_id: str, *, messages: int = 20, now: datetime | None = None) -> PauseRecorded:
    # Tokens carry whole seconds; the recorded window must be the token's own.
    moment = (now or utc_now()).replace(microsecond=0)
    return PauseRecorded(
        event_id=uuid.uuid4().hex,
        occurred_at=moment,
        package_version="bench",
        checkpoint=checkpoint(thread_id, messages=messages, now=moment),
        token_id=uuid.uuid4().hex,
        request_json=REQUEST_JSON,
        request_hash=request_hash(REQUEST_JSON),
        response_schema="ask_user",
        expires_at=moment + TOKEN_TTL,
    )


def answer_for(pause: PauseRecorded, token: str, now: datetime | None = None) -> AnswerSubmitted:
    cp = pause.checkpoint
    moment = now or utc_now()
    return AnswerSubmitted(
        event_id=uuid.uuid4().hex,
        occurred_at=moment,
        package_version="bench",
        answer_id=uuid.uuid4().hex,
        token=token,
        thread_id=cp.thread_id,
        scope_hash=cp.scope_hash,
        session_id=cp.session_id,
        run_id=cp.run_id,
        call_id=cp.tool_call_id,
        response_json=ANSWER_JSON,
        submitted_at=moment,
    )


Out = tuple[int, bytes, bytes]  # partition, key, value


@dataclass(frozen=True)
class Turn:
    """One paused turn as it travels: its pauses record and (when asked for) its answer."""

    thread_id: str
    pause: Out
    answer: Out | None


def turns(
    dep: Deployment,
    count: int,
    *,
    messages: int = 20,
    answers: bool = True,
    tag: str = "",
) -> Iterator[Turn]:
    """``count`` distinct paused turns, encoded; with ``answers`` each has a valid answer."""
    partitions = dep.settings.partitions
    now = utc_now()
    for i in range(count):
        thread_id = f"thread-{tag}{i}"
        pause = pause_for(thread_id, messages=messages, now=now)
        p = partition_for(thread_id, partitions)
        record = (p, pause_key(thread_id, "cp-1"), encode(pause))
        answer: Out | None = None
        if answers:
            token = dep.issuer.issue(PauseClaims.for_pause(pause))
            submitted = answer_for(pause, token, now)
            answer = (p, answer_key(thread_id, submitted.answer_id), encode(submitted))
        yield Turn(thread_id, record, answer)


# --- topics and producing -------------------------------------------------------------------


async def create_topics(dep: Deployment, *extra: str) -> None:
    """The deployment's five topics (turnlog's own readiness) and ``extra`` delete-policy ones."""
    admin = admin_client(dep.settings.bootstrap_servers)
    await admin.start()
    try:
        await ensure_topics(admin, dep.topics)
        if extra:
            partitions, rf = dep.settings.partitions, dep.settings.replication_factor
            await admin.create_topics([NewTopic(name, partitions, rf) for name in extra])
            await wait_for_leaders(admin, list(extra))
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, prefix: str) -> list[str]:
    """Delete every topic whose name starts with ``prefix``; a failure is reported, not raised."""
    admin = admin_client(bootstrap)
    try:
        await admin.start()
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
        return names
    except Exception as exc:
        print(f"  (could not delete topics {prefix}*: {exc})", file=sys.stderr)
        return []
    finally:
        await admin.close()


def dir_bytes(path: Path) -> int:
    """The bytes of every file below ``path`` (a store's RocksDB directory)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def log_bytes(log_dir: Path, topics: Iterable[str], partitions: int) -> int:
    """The ``.log`` segments of ``topics``' partitions in a broker's log directory (index
    files are preallocated, so they are left out)."""
    folders = (log_dir / f"{topic}-{p}" for topic in topics for p in range(partitions))
    return sum(f.stat().st_size for folder in folders for f in folder.glob("*.log"))


@asynccontextmanager
async def scenario_topics(bootstrap: str, prefixes: list[str]) -> AsyncIterator[list[str]]:
    """Yield a list the scenario appends its prefixes to; their topics go when it ends."""
    try:
        yield prefixes
    finally:
        for prefix in prefixes:
            await delete_topics(bootstrap, prefix)


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Out],
    *,
    transactional: bool,
    transaction_size: int = 5000,
) -> int:
    """Write ``records`` fast: big batches, one transaction per ``transaction_size`` records."""
    producer = clients.producer(
        bootstrap,
        client_id="bench-preload",
        linger_ms=10,
        max_batch_size=1024 * 1024,
        max_request_size=8 * 1024 * 1024,
        acks="all",
        enable_idempotence=True,
        transactional_id=f"bench-preload-{uuid.uuid4().hex}" if transactional else None,
    )
    await producer.start()
    count = 0
    try:
        if transactional:
            await producer.begin_transaction()
        for partition, key, value in records:
            await producer.send(topic, value, key=key, partition=partition)
            count += 1
            if transactional and count % transaction_size == 0:
                await producer.commit_transaction()
                await producer.begin_transaction()
        if transactional:
            await producer.commit_transaction()
        await producer.flush()
    finally:
        await producer.stop()
    return count


async def preload(
    dep: Deployment, count: int, *, messages: int = 20, answers: bool = True, tag: str = ""
) -> list[Out]:
    """Write ``count`` pauses to the pauses topic; return their answers (not yet published)."""
    pending: list[Out] = []

    def pauses() -> Iterator[Out]:
        for turn in turns(dep, count, messages=messages, answers=answers, tag=tag):
            if turn.answer is not None:
                pending.append(turn.answer)
            yield turn.pause

    await produce(dep.settings.bootstrap_servers, dep.topics.pauses, pauses(), transactional=True)
    return pending


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = clients.consumer(bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in await _partitions(consumer, topic)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: end for tp, end in ends.items()}
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    for _ in range(100):
        found = consumer.partitions_for_topic(topic)
        if found:
            return sorted(found)
        await consumer._client.force_metadata_update()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"no metadata for {topic}")


def reader_consumer(bootstrap: str, client_id: str) -> AIOKafkaConsumer:
    """A raw consumer configured like turnlog's LogReader (read_committed, same fetch sizes)."""
    return clients.consumer(
        bootstrap,
        client_id=client_id,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        max_poll_records=2000,
        fetch_max_bytes=32 * 1024 * 1024,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )


async def raw_read_to_end(
    consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition], *, from_beginning: bool = True
) -> int:
    """Read ``tps`` to their end offsets as of now with a started raw consumer; the count."""
    consumer.assign(list(tps))
    if from_beginning:
        await consumer.seek_to_beginning(*tps)
    else:
        await consumer.seek_to_end(*tps)
    ends = await consumer.end_offsets(list(tps))
    count = 0
    while True:
        behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
        if not behind:
            return count
        batch = await consumer.getmany(*behind, timeout_ms=200)
        for records in batch.values():
            count += len(records)


#: Records per store batch in a rebuild (``projector._REBUILD_BATCH``): consume + write's batch.
WRITE_BATCH = 10_000


async def consume_and_write(
    bootstrap: str, tps: Sequence[TopicPartition], path: Path, batch_size: int = WRITE_BATCH
) -> int:
    """The least a rebuild must do: read ``tps`` to their ends (the LogReader's settings, the
    rebuild's fetch size) and put each record's key and value into a new RocksDB at ``path``
    (rocksdict, raw mode), one write batch per fetch of up to ``batch_size`` records, without
    the write-ahead log (as the rebuild's bulk store); then flush. The count of records."""
    import rocksdict

    consumer = clients.consumer(
        bootstrap,
        client_id="bench-consume-write",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        max_poll_records=batch_size,
        fetch_max_bytes=32 * 1024 * 1024,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(path), options)
    write_options = rocksdict.WriteOptions()
    write_options.disable_wal = True  # type: ignore[method-assign, assignment]
    await consumer.start()
    count = 0
    try:
        consumer.assign(list(tps))
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(list(tps))
        while True:
            behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
            if not behind:
                break
            fetched = await consumer.getmany(*behind, timeout_ms=200, max_records=batch_size)
            batch = rocksdict.WriteBatch(raw_mode=True)
            for records in fetched.values():
                for record in records:
                    batch.put(record.key, record.value)
                count += len(records)
            if not batch.is_empty():
                db.write(batch, write_options)
        db.flush()
    finally:
        await consumer.stop()
        db.close()
    return count


async def answer_load(
    bootstrap: str, prefix: str, n: int, *, partitions: int, commit_interval_ms: int, messages: int
) -> tuple[Deployment, tuple[str, str]]:
    """A deployment with ``n`` pauses and ``n`` valid answers on its topics, and the two output
    topics of the raw loop (its consumptions and resumed)."""
    dep = make_deployment(
        bootstrap, prefix, partitions=partitions, commit_interval_ms=commit_interval_ms
    )
    raw_topics = (f"{prefix}raw.consumptions", f"{prefix}raw.resumed")
    await create_topics(dep, *raw_topics)
    await prepare_wire(dep.settings, dep.topics)  # the registry wire: preloaded records framed so
    answers = await preload(dep, n, messages=messages)
    await produce(bootstrap, dep.topics.answers, answers, transactional=False)
    return dep, raw_topics
