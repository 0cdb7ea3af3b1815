"""Recording a pause: the fact first, the token after.

The ``PauseRecorded`` record is committed in a Kafka transaction (acks=all, idempotent) before
the token exists, so nobody can hold a token for a pause the log does not have. The token then
carries the partition and offset where the pause was written: the owner that receives the answer
catches up at least that far before it would ever call the pause missing, so an answer published
milliseconds after its pause cannot lose the race.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from turnlog import __version__
from turnlog.clock import utc_now
from turnlog.codec import encode
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.resume import request_hash
from turnlog.errors import BrokerUnavailable, ConfigurationError
from turnlog.partitioning import check_thread_id, partition_for, pause_key
from turnlog.settings import Settings
from turnlog.tokens import PauseClaims, TokenIssuer
from turnlog.topics import TopicSet, admin_client, ensure_topics


@dataclass(frozen=True, slots=True)
class RecordedPause:
    """A durable pause and the token that may resume it."""

    token: str
    pause: PauseRecorded
    partition: int
    offset: int

    @property
    def token_id(self) -> str:
        return self.pause.token_id

    @property
    def thread_id(self) -> str:
        return self.pause.checkpoint.thread_id


class PauseRecorder:
    """The agent runtime's writer. Also a checkpoint-service driver (ensure_ready/flush/close)."""

    def __init__(
        self,
        settings: Settings,
        issuer: TokenIssuer,
        *,
        topics: TopicSet | None = None,
        create_topics: bool = True,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.topics = topics or TopicSet.from_settings(settings)
        self._issuer = issuer
        self._create_topics = create_topics
        self._clock = clock
        self._producer: AIOKafkaProducer | None = None
        self._partitions: int | None = None
        self._lock = asyncio.Lock()

    async def ensure_ready(self) -> None:
        """Create or verify the topics, then start the transactional producer. Idempotent.

        A broker that cannot be reached is :class:`BrokerUnavailable` (a ``TurnlogError``), not
        aiokafka's own exception: callers retry readiness on it, and must be able to tell it
        from a bug without importing the client library.
        """
        try:
            await self._ensure_ready()
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            raise BrokerUnavailable(
                f"Kafka at {self.settings.bootstrap_servers} is unreachable: {exc}"
            ) from exc

    async def _ensure_ready(self) -> None:
        async with self._lock:
            if self._producer is not None:
                return
            if self._create_topics:
                admin = admin_client(self.settings.bootstrap_servers)
                try:
                    await admin.start()
                    await ensure_topics(admin, self.topics)
                finally:
                    await admin.close()
            producer = AIOKafkaProducer(
                bootstrap_servers=self.settings.bootstrap_servers,
                transactional_id=f"{self.settings.application_id}.pauses.{uuid.uuid4().hex}",
                client_id="turnlog-pause-recorder",
            )
            try:
                await producer.start()
                partitions = await producer.partitions_for(self.topics.pauses)
            except BaseException:
                await producer.stop()
                raise
            self._partitions = len(partitions)
            self._producer = producer

    start = ensure_ready

    async def flush(self) -> None:
        if self._producer is not None:
            await self._producer.flush()

    async def close(self) -> None:
        async with self._lock:
            producer, self._producer = self._producer, None
            if producer is not None:
                await producer.stop()

    stop = close

    async def __aenter__(self) -> PauseRecorder:
        await self.ensure_ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def record(
        self,
        checkpoint: TurnCheckpoint,
        *,
        request_json: str,
        interaction: str | None = None,
        ttl: timedelta | None = None,
    ) -> RecordedPause:
        """Write the pause, wait for its commit, and return its signed token."""
        check_thread_id(checkpoint.thread_id)
        if not checkpoint.checkpoint_id:
            raise ConfigurationError("a checkpoint to pause on needs a checkpoint_id")
        await self.ensure_ready()
        producer, partitions = self._producer, self._partitions
        if producer is None or partitions is None:
            raise ConfigurationError("the pause recorder was closed")
        now = self._clock()
        window = ttl if ttl is not None else timedelta(seconds=self.settings.token_ttl_seconds)
        # Tokens carry whole seconds; the recorded window must be the token's own.
        issued_at = now.replace(microsecond=0)
        pause = PauseRecorded(
            event_id=uuid.uuid4().hex,
            occurred_at=issued_at,
            package_version=__version__,
            checkpoint=checkpoint,
            token_id=uuid.uuid4().hex,
            request_json=request_json,
            request_hash=request_hash(request_json),
            response_schema=interaction or checkpoint.name,
            expires_at=issued_at + window,
        )
        partition = partition_for(checkpoint.thread_id, partitions)
        async with producer.transaction():
            sent = await producer.send(
                self.topics.pauses,
                encode(pause),
                key=pause_key(checkpoint.thread_id, checkpoint.checkpoint_id),
                partition=partition,
            )
        metadata = await sent
        claims = PauseClaims.for_pause(
            pause, pause_partition=partition, pause_offset=metadata.offset
        )
        return RecordedPause(self._issuer.issue(claims), pause, partition, metadata.offset)
