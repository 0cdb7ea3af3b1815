"""The resume worker: every valid answer resumes its turn exactly once.

One consumer group over the answers topic. For each answers partition it owns, the worker holds
a transactional producer under that partition's stable transactional id (so a new owner fences a
zombie), restores the partition's pauses and consumptions into its store -- fence first, then
restore, then read answers -- and then, per fetched batch, writes in ONE transaction:
``TokenConsumed`` + ``TurnResumed`` for each accepted answer, ``AnswerRejected`` for each refused
one, and the batch's input offset. The store learns of the consumptions only after the commit;
an abort discards them and the batch is read again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from turnlog import __version__
from turnlog.clock import utc_now
from turnlog.codec import decode, encode
from turnlog.consumers.ownership import PartitionOwner
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    PauseExpired,
    PauseRecorded,
    TokenConsumed,
)
from turnlog.contracts.interactions import InteractionRegistry
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.contracts.resume import PreparedResume, is_replay, prepare_resume
from turnlog.errors import DecodeError
from turnlog.partitioning import consumption_key, partition_for, split_key
from turnlog.projections.projector import Spent, StoreApplier
from turnlog.projections.reader import LogReader, Record
from turnlog.projections.store import LedgerEntry, Store
from turnlog.settings import Settings
from turnlog.tokens import TokenVerifier, peek_claims
from turnlog.topics import TopicSet

log = logging.getLogger(__name__)

Output = tuple[str, bytes, bytes]  # topic, key, value


@dataclass
class WorkerStats:
    resumed: int = 0
    rejected: int = 0
    duplicates: int = 0
    expired: int = 0
    aborted_batches: int = 0
    fenced: int = 0
    restored_records: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: ResumeWorker) -> None:
        self._worker = worker

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._worker._release([tp.partition for tp in revoked])

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self._worker._acquire([tp.partition for tp in assigned])


class ResumeWorker:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        verifier: TokenVerifier,
        interactions: InteractionRegistry,
        topics: TopicSet | None = None,
        clock: Callable[[], datetime] = utc_now,
        expiry_interval: float = 1.0,
        max_batch: int = 2000,
        session_timeout_ms: int = 10000,
    ) -> None:
        self.settings = settings
        self.topics = topics or TopicSet.from_settings(settings)
        self.store = store
        self.verifier = verifier
        self.interactions = interactions
        self.clock = clock
        self.stats = WorkerStats()
        self.group_id = settings.application_id
        self._expiry_interval = expiry_interval
        self._owners: dict[int, PartitionOwner] = {}
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._applier = StoreApplier(store, self.topics)
        self._partitions = settings.partitions
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=self.group_id,
            client_id=f"turnlog-worker-{uuid.uuid4().hex[:8]}",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=max_batch,
            # A member that dies without leaving keeps its partitions this long.
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=min(1000, session_timeout_ms // 3),
            rebalance_timeout_ms=60000,
            max_poll_interval_ms=120000,
        )
        self._started = False

    @property
    def owned(self) -> list[int]:
        return sorted(self._owners)

    async def start(self) -> None:
        if self._started:
            return
        await self._consumer.start()
        self._started = True
        self._partitions = len(await self._reader_partitions())
        self._consumer.subscribe([self.topics.answers], listener=_Rebalance(self))

    async def _reader_partitions(self) -> list[int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            found = self._consumer.partitions_for_topic(self.topics.answers)
            if found:
                return sorted(found)
            if loop.time() > deadline:
                raise KafkaError(f"no metadata for {self.topics.answers}")
            await self._consumer._client.force_metadata_update()
            await asyncio.sleep(0.1)

    def request_stop(self) -> None:
        """Ask the run loop to finish its batch, commit and leave (safe from a signal handler)."""
        self._stopping.set()

    async def run(self) -> None:
        """Process answers until :meth:`request_stop`; then commit, leave the group, close."""
        await self.start()
        loop = asyncio.get_running_loop()
        next_expiry = loop.time()
        try:
            while not self._stopping.is_set():
                batch = await self._consumer.getmany(timeout_ms=self.settings.commit_interval_ms)
                async with self._lock:
                    for tp, records in batch.items():
                        if records and tp.partition in self._owners:
                            await self._process(tp, records)
                    if loop.time() >= next_expiry:
                        await self._expire()
                        next_expiry = loop.time() + self._expiry_interval
        finally:
            await self.stop()

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        async with self._lock:
            owners, self._owners = self._owners, {}
            for owner in owners.values():
                await owner.close()
        # Leaving the group lets the partitions move now, not after a session timeout.
        await self._consumer.stop()

    async def __aenter__(self) -> ResumeWorker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- ownership -------------------------------------------------------------------------

    async def _acquire(self, partitions: list[int]) -> None:
        async with self._lock:
            for p in sorted(partitions):
                if p in self._owners:
                    continue
                owner = PartitionOwner(
                    self.settings.bootstrap_servers,
                    self.settings.application_id,
                    self.topics.answers,
                    p,
                )
                try:
                    await owner.fence()
                    await self._restore(p)
                except Exception:
                    await owner.close()
                    log.exception("taking partition %d failed", p)
                    raise
                self._owners[p] = owner
                log.info("owning answers partition %d", p)

    async def _release(self, partitions: list[int]) -> None:
        # Taking the lock waits for the in-flight batch to commit or abort before the
        # partitions move, so the next owner starts from a committed position.
        async with self._lock:
            for p in partitions:
                owner = self._owners.pop(p, None)
                if owner is not None:
                    await owner.close()
                    log.info("released answers partition %d", p)

    async def _restore(self, partition: int, timeout: float = 300.0) -> int:
        """Apply pauses[p] and consumptions[p] up to their committed end."""
        tps = [
            TopicPartition(self.topics.pauses, partition),
            TopicPartition(self.topics.consumptions, partition),
        ]
        offsets = self.store.offsets()
        async with LogReader(
            self.settings.bootstrap_servers, client_id=f"turnlog-restore-{partition}"
        ) as reader:
            await reader.assign({tp: offsets.get((tp.topic, tp.partition)) for tp in tps})
            count = await reader.read_to_end(self._applier.apply, timeout=timeout)
        self.stats.restored_records += count
        return count

    # -- answers ---------------------------------------------------------------------------

    async def _process(self, tp: TopicPartition, records: Sequence[Record]) -> None:
        owner = self._owners[tp.partition]
        pending: dict[str, Spent] = {}
        outputs: list[Output] = []
        counts = WorkerStats()
        for record in records:
            outputs.extend(await self._handle(record, pending, counts))
        producer = owner.producer
        try:
            await producer.begin_transaction()
            for topic, key, value in outputs:
                await producer.send(topic, value, key=key, partition=tp.partition)
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, self.group_id)
            await producer.commit_transaction()
        except ProducerFenced:
            # Another owner holds this partition now; nothing of this batch happened.
            self.stats.fenced += 1
            log.warning("fenced on answers partition %d; giving it up", tp.partition)
            self._owners.pop(tp.partition, None)
            await owner.close()
            return
        except KafkaError as exc:
            self.stats.aborted_batches += 1
            log.warning(
                "batch on partition %d aborted (%s); it will be read again", tp.partition, exc
            )
            try:
                await producer.abort_transaction()
            except KafkaError:
                self._owners.pop(tp.partition, None)
                await owner.close()
            self._consumer.seek(tp, records[0].offset)
            return
        # Committed: only now does the store learn of the consumptions.
        self._applier.record_consumptions(pending)
        self.stats.resumed += counts.resumed
        self.stats.rejected += counts.rejected
        self.stats.duplicates += counts.duplicates
        for reason, n in counts.rejected_by_reason.items():
            self.stats.rejected_by_reason[reason] = self.stats.rejected_by_reason.get(reason, 0) + n

    async def _handle(
        self, record: Record, pending: dict[str, Spent], counts: WorkerStats
    ) -> list[Output]:
        if record.value is None:
            return []  # a tombstone: the thread was forgotten
        now = self.clock()
        thread_id = _thread_from_key(record.key)
        try:
            answer = decode(record.value, AnswerSubmitted)
        except DecodeError as exc:
            answer_id = f"{record.topic}:{record.partition}:{record.offset}"
            refusal = Refusal(RefusalReason.ANSWER_UNDECODABLE, f"{exc.reason}: {exc.detail}")
            return [self._rejection(answer_id, None, thread_id, refusal, now, counts)]
        token_id = _token_id(answer.token)
        ledger: Spent | LedgerEntry | None = pending.get(token_id) if token_id else None
        if ledger is None and token_id:
            ledger = self._applier.ledger(token_id)
        if is_replay(answer, ledger):
            counts.duplicates += 1  # a retry of the answer that already resumed: nothing new
            return []
        pause = await self._pause_for(token_id, answer.token) if token_id else None
        outcome = prepare_resume(
            answer,
            verifier=self.verifier,
            interactions=self.interactions,
            pause=pause,
            ledger=ledger,
            now=now,
        )
        if isinstance(outcome, Refusal):
            return [
                self._rejection(
                    answer.answer_id, token_id, answer.thread_id or thread_id, outcome, now, counts
                )
            ]
        return self._accept(outcome, pending, now, counts)

    async def _pause_for(self, token_id: str, token: str) -> PauseRecorded | None:
        pause = self._applier.pause(token_id)
        if pause is not None:
            return pause
        # The answer may have overtaken our view of its own pause: catch pauses[p] up to at least
        # where the token says the pause was written before calling it missing.
        try:
            claims = peek_claims(token)
        except Refused:
            return None
        partition, offset = claims.get("pause_partition"), claims.get("pause_offset")
        if not isinstance(partition, int) or not isinstance(offset, int):
            return None
        applied = self.store.offset(self.topics.pauses, partition)
        if applied is None or applied <= offset:
            await self._restore(partition)
        return self._applier.pause(token_id)

    def _accept(
        self,
        prepared: PreparedResume,
        pending: dict[str, Spent],
        now: datetime,
        counts: WorkerStats,
    ) -> list[Output]:
        claims = prepared.claims
        consumed = prepared.token_consumed(
            event_id=uuid.uuid4().hex, occurred_at=now, package_version=__version__
        )
        resumed = prepared.turn_resumed(
            event_id=uuid.uuid4().hex, occurred_at=now, package_version=__version__
        )
        pending[claims.token_id] = Spent(claims.thread_id, "resumed", prepared.answer.answer_id)
        counts.resumed += 1
        thread_key = claims.thread_id.encode()
        return [
            (
                self.topics.consumptions,
                consumption_key(claims.thread_id, claims.token_id),
                encode(consumed),
            ),
            (self.topics.resumed, thread_key, encode(resumed)),
        ]

    def _rejection(
        self,
        answer_id: str,
        token_id: str | None,
        thread_id: str | None,
        refusal: Refusal,
        now: datetime,
        counts: WorkerStats,
    ) -> Output:
        counts.rejected += 1
        reason = refusal.reason.value
        counts.rejected_by_reason[reason] = counts.rejected_by_reason.get(reason, 0) + 1
        log.info("answer %s refused: %s", answer_id, refusal)
        event = AnswerRejected(
            event_id=uuid.uuid4().hex,
            occurred_at=now,
            package_version=__version__,
            answer_id=answer_id,
            token_id=token_id,
            thread_id=thread_id,
            reason=reason,
            step=refusal.step,
            detail=refusal.detail,
        )
        return (self.topics.rejections, (thread_id or "").encode(), encode(event))

    # -- expiry ----------------------------------------------------------------------------

    async def _expire(self) -> None:
        """Close the pauses whose window ended, so nothing waits silently forever."""
        now = self.clock()
        due: dict[int, list[PauseRecorded]] = {}
        for pause in self._applier.expired(now):
            p = partition_for(pause.checkpoint.thread_id, self._partitions)
            if p in self._owners:
                due.setdefault(p, []).append(pause)
        for p, pauses in due.items():
            owner = self._owners[p]
            pending: dict[str, Spent] = {}
            try:
                async with owner.producer.transaction():
                    for pause in pauses:
                        cp = pause.checkpoint
                        consumed = TokenConsumed(
                            event_id=uuid.uuid4().hex,
                            occurred_at=now,
                            package_version=__version__,
                            token_id=pause.token_id,
                            answer_id="",
                            thread_id=cp.thread_id,
                            checkpoint_id=cp.checkpoint_id,
                            outcome="expired",
                        )
                        expired = PauseExpired(
                            event_id=uuid.uuid4().hex,
                            occurred_at=now,
                            package_version=__version__,
                            token_id=pause.token_id,
                            thread_id=cp.thread_id,
                            checkpoint_id=cp.checkpoint_id,
                            run_id=cp.run_id,
                            session_id=cp.session_id,
                            tool_call_id=cp.tool_call_id,
                            expires_at=pause.expires_at,
                        )
                        await owner.producer.send(
                            self.topics.consumptions,
                            encode(consumed),
                            key=consumption_key(cp.thread_id, pause.token_id),
                            partition=p,
                        )
                        await owner.producer.send(
                            self.topics.resumed,
                            encode(expired),
                            key=cp.thread_id.encode(),
                            partition=p,
                        )
                        pending[pause.token_id] = Spent(cp.thread_id, "expired", "")
            except ProducerFenced:
                self.stats.fenced += 1
                self._owners.pop(p, None)
                await owner.close()
                continue
            except KafkaError as exc:
                log.warning("expiry on partition %d aborted (%s); will retry", p, exc)
                continue
            self._applier.record_consumptions(pending)
            self.stats.expired += len(pending)


def _thread_from_key(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        return split_key(key)[0]
    except DecodeError:
        try:
            return key.decode()
        except UnicodeDecodeError:
            return None


def _token_id(token: str) -> str | None:
    try:
        jti = peek_claims(token).get("jti")
    except Refused:
        return None
    return jti if isinstance(jti, str) and jti else None
