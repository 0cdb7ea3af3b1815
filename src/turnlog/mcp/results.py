"""The recorded results of MCP tools that ran under a continuation claim.

One compacted topic, ``<prefix>mcp-results``, with the topic set's partition count: a result is
keyed by its pause (thread and token, the consumption ledger's key) and written to the
thread's partition, so it survives restarts, is found by any replica, and compaction keeps one
record per pause. The value is the protocol's own JSON -- the ``CallToolResult`` as MCP puts it
on the wire -- beside who ran it under which claim: it is an MCP object, read only by this door,
not one of turnlog's Avro events.

The result is written before the claim is said done, so a finished claim always has one; a
holder that died after running the tool and before writing leaves a claim taken and no result,
which a retry reports by name (``already_continued``) rather than running anything.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from turnlog.clock import utc_now
from turnlog.contracts.events import TokenConsumed
from turnlog.errors import DecodeError, TopicMismatch
from turnlog.kafka import clients
from turnlog.kafka.partitioning import consumption_key, partition_for
from turnlog.kafka.reader import close_consumer
from turnlog.kafka.topics import TopicSet, TopicSpec, check, describe, wait_for_leaders
from turnlog.settings import Settings
from turnlog.wire.codec import decode

_TOPIC_ALREADY_EXISTS = 36
RESULT_VERSION = 1


def results_topic(settings: Settings) -> TopicSpec:
    """The door's topic: compacted, beside the deployment's own (same prefix and partitions)."""
    configs = {"min.insync.replicas": str(settings.min_insync_replicas)}
    return TopicSpec(
        f"{settings.topic_prefix}mcp-results",
        "mcp-results",
        True,
        configs if settings.min_insync_replicas else {},
    )


@dataclass(frozen=True, slots=True)
class RecordedResult:
    """A tool's result as recorded: the ``CallToolResult`` (wire JSON) and who ran it."""

    thread_id: str
    token_id: str
    tool: str
    result: Mapping[str, Any]
    claim_id: str
    claimant: str
    recorded_at: str

    def encode(self) -> bytes:
        body = {
            "version": RESULT_VERSION,
            "thread_id": self.thread_id,
            "token_id": self.token_id,
            "tool": self.tool,
            "result": dict(self.result),
            "claim_id": self.claim_id,
            "claimant": self.claimant,
            "recorded_at": self.recorded_at,
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> RecordedResult | None:
        """The record, or ``None`` for bytes this build cannot read (never guessed at)."""
        try:
            body = json.loads(raw)
            if body.get("version") != RESULT_VERSION or not isinstance(body.get("result"), dict):
                return None
            return cls(
                str(body["thread_id"]), str(body["token_id"]), str(body["tool"]),
                body["result"], str(body["claim_id"]), str(body["claimant"]),
                str(body["recorded_at"]),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


class ResultLog:
    """Writes and finds recorded results; ``close()`` stops its producer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.spec = results_topic(settings)
        self._producer: AIOKafkaProducer | None = None
        self._ready = asyncio.Lock()
        self._partitions = 0

    async def ensure_ready(self) -> None:
        """Create (or check) the topic and start the producer, once."""
        async with self._ready:
            if self._producer is not None:
                return
            await self._ensure_topic()
            producer = clients.producer(
                self.settings, client_id="turnlog-mcp-results", acks="all", enable_idempotence=True
            )
            self._partitions = await clients.started(producer, self.spec.name)
            self._producer = producer

    async def _ensure_topic(self) -> None:
        s = self.settings
        admin = clients.admin(s)
        await admin.start()
        try:
            found = await describe(admin, [self.spec.name])
            if self.spec.name not in found:
                if not s.create_topics:
                    raise TopicMismatch(
                        "topic_missing",
                        f"{self.spec.name} missing, and this process does not create topics "
                        "(TURNLOG_CREATE_TOPICS=false): create it compacted, with the "
                        "deployment's partition count",
                    )
                response = await admin.create_topics(
                    [
                        NewTopic(
                            self.spec.name,
                            s.partitions,
                            s.replication_factor,
                            topic_configs=self.spec.all_configs(),
                        )
                    ]
                )
                for name, code, message in response.topic_errors:
                    if code not in (0, _TOPIC_ALREADY_EXISTS):
                        raise TopicMismatch(
                            "topic_creation_failed", f"{name}: error {code} {message or ''}"
                        )
                found = await describe(admin, [self.spec.name])
            if self.spec.name in found:
                check(self.spec, found[self.spec.name], s.partitions, s.replication_factor)
            await wait_for_leaders(admin, [self.spec.name])
        finally:
            await admin.close()

    async def record(self, result: RecordedResult) -> None:
        """Write ``result`` and wait until the broker has it (acks=all)."""
        await self.ensure_ready()
        if self._producer is None:  # started above
            raise RuntimeError("no results producer")
        await self._producer.send_and_wait(
            self.spec.name,
            result.encode(),
            key=consumption_key(result.thread_id, result.token_id),
            partition=partition_for(result.thread_id, self._partitions),
        )

    async def find(
        self, thread_id: str, token_id: str, *, since: datetime, wait: float = 0.0
    ) -> RecordedResult | None:
        """The pause's recorded result (``since``: the pause's issue time, where the read
        starts); with ``wait``, a result written meanwhile is waited for that long (a retry
        waiting on another's run)."""
        await self.ensure_ready()
        key = consumption_key(thread_id, token_id)
        tp = TopicPartition(self.spec.name, partition_for(thread_id, self._partitions))
        raw = await last_value(self.settings, tp, key, since=since, wait=wait)
        return RecordedResult.decode(raw) if raw is not None else None

    async def resumed(self, thread_id: str, token_id: str, *, since: datetime) -> bool:
        """Whether the token's ledger row says an answer resumed its turn (here, the inbox, the
        CLI). Read to the partition's end, no timeout to guess: the row and the resumed turn are
        committed in one transaction, so a turn it names is there to claim."""
        topics = TopicSet.from_settings(self.settings)
        tp = TopicPartition(topics.consumptions, partition_for(thread_id, self.settings.partitions))
        raw = await last_value(self.settings, tp, consumption_key(thread_id, token_id), since=since)
        if raw is None:
            return False
        try:
            row = decode(raw)
        except DecodeError:
            return False
        return isinstance(row, TokenConsumed) and row.outcome == "resumed"

    async def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()


async def last_value(
    settings: Settings, tp: TopicPartition, key: bytes, *, since: datetime, wait: float = 0.0
) -> bytes | None:
    """The last value of ``key`` on ``tp`` (``None``: absent or a tombstone), read
    ``read_committed`` from the first record written at ``since`` (less the clock leeway) to
    the partition's end -- then, with ``wait``, on for that long until one arrives."""
    consumer = clients.consumer(
        settings,
        client_id="turnlog-mcp-read",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
    )
    loop = asyncio.get_running_loop()
    found: bytes | None = None
    try:
        await consumer.start()
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        at_ms = max(0, int((since.timestamp() - settings.token_leeway_seconds) * 1000))
        start = (await consumer.offsets_for_times({tp: at_ms}))[tp]
        consumer.seek(tp, min(start.offset, end) if start is not None else end)
        deadline = loop.time() + wait
        while True:
            batch = await consumer.getmany(tp, timeout_ms=100)
            for record in batch.get(tp, []):
                if record.key == key:
                    found = record.value
            reached = await consumer.position(tp) >= end
            if reached and (found is not None or loop.time() >= deadline):
                return found
    finally:
        await close_consumer(consumer)


def now_text() -> str:
    return utc_now().isoformat()


__all__ = ["RecordedResult", "ResultLog", "last_value", "now_text", "results_topic"]
