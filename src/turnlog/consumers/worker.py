"""The resume worker: every valid answer resumes its turn exactly once.

One consumer group over the answers topic. For each answers partition it owns, the worker holds
a transactional producer under that partition's stable transactional id (so a new owner fences a
zombie), restores the partition's pauses and consumptions into its store -- fence first, then
restore, then read answers -- and then, per fetched batch, writes in ONE transaction:
``TokenConsumed`` + ``TurnResumed`` for each accepted answer, ``AnswerRejected`` for each refused
one, and the batch's input offset. The store learns of the consumptions only after the commit;
an abort discards them and the batch is read again. A partition whose take failed, or whose
producer was lost, stays assigned but unowned: its records are put back (seek) and the take is
retried, so nothing of it is skipped and nothing is processed without a fenced producer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from turnlog import __version__
from turnlog.clock import utc_now
from turnlog.codec import decode, encode
from turnlog.consumers.ownership import Ownership
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
        self._owners = Ownership(
            settings.bootstrap_servers,
            settings.application_id,
            self.topics.answers,
            restore=self._restore,
            refence_after=session_timeout_ms / 1000,
        )
        self._assigned: set[int] = set()
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
        return self._owners.owned

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
                    # Each owned partition has its own producer, so their transactions commit
                    # side by side rather than one after another (bench/: p50 ~280 -> ~100 ms).
                    # Every batch runs to its own commit or abort before an error is raised.
                    work = []
                    for tp, records in batch.items():
                        if records and tp.partition in self._owners:
                            work.append(self._process(tp, records))
                        elif records:
                            self._put_back(tp, records[0].offset)
                    for outcome in await asyncio.gather(*work, return_exceptions=True):
                        if isinstance(outcome, BaseException):
                            raise outcome
                    await self._retake()
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
            await self._owners.close()
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
            self._assigned.update(partitions)
            await self._owners.take(partitions, now=True)

    async def _release(self, partitions: list[int]) -> None:
        # Taking the lock waits for the in-flight batch to commit or abort before the
        # partitions move, so the next owner starts from a committed position.
        async with self._lock:
            self._assigned.difference_update(partitions)
            await self._owners.release(partitions)

    async def _retake(self) -> None:
        """Take the assigned partitions left unowned by a failed take or a lost producer (an
        exception in a rebalance listener is swallowed by aiokafka: it would stay unowned).
        Assigned means by the listener: between a revocation and the next assignment the
        consumer's ``assignment()`` still lists the revoked partitions."""
        due = self._owners.due(self._assigned)
        if due:
            await self._owners.take(due)
        owned = [tp for tp in self._consumer.paused() if tp.partition in self._owners]
        if owned:
            self._consumer.resume(*owned)

    def _put_back(self, tp: TopicPartition, offset: int) -> None:
        """Read these records again once owned: fetched, but not (durably) handled."""
        if tp in self._consumer.assignment():
            self._consumer.seek(tp, offset)
            self._consumer.pause(tp)

    async def _restore(self, partitions: list[int], timeout: float = 300.0) -> int:
        """Apply pauses[p] and consumptions[p] of ``partitions`` up to their committed end."""
        tps = [
            TopicPartition(topic, p)
            for p in partitions
            for topic in (self.topics.pauses, self.topics.consumptions)
        ]
        offsets = self.store.offsets()
        async with LogReader(
            self.settings.bootstrap_servers, client_id="turnlog-restore"
        ) as reader:
            await reader.assign({tp: offsets.get((tp.topic, tp.partition)) for tp in tps})
            count = await reader.read_to_end(self._applier.apply, timeout=timeout)
        self.stats.restored_records += count
        return count

    # -- answers ---------------------------------------------------------------------------

    async def _process(self, tp: TopicPartition, records: Sequence[Record]) -> None:
        pending: dict[str, Spent] = {}
        outputs: list[Output] = []
        counts = WorkerStats()
        for record in records:
            outputs.extend(await self._handle(record, pending, counts))
        if not await self._commit(tp.partition, outputs, {tp: records[-1].offset + 1}):
            self._put_back(tp, records[0].offset)
            return
        # Committed: only now does the store learn of the consumptions.
        self._applier.record_consumptions(pending)
        self.stats.resumed += counts.resumed
        self.stats.rejected += counts.rejected
        self.stats.duplicates += counts.duplicates
        for reason, n in counts.rejected_by_reason.items():
            self.stats.rejected_by_reason[reason] = self.stats.rejected_by_reason.get(reason, 0) + n

    async def _commit(
        self, partition: int, outputs: list[Output], offsets: dict[TopicPartition, int]
    ) -> bool:
        """Write ``outputs`` (and the input ``offsets``) in one transaction of the partition's
        producer. False: nothing of it happened -- aborted, or fenced by a newer owner."""
        producer = self._owners.producer(partition)
        try:
            await producer.begin_transaction()
            sent = [
                await producer.send(topic, value, key=key, partition=partition)
                for topic, key, value in outputs
            ]
            # aiokafka commits even if one of the transaction's records failed to be written;
            # all or nothing means waiting for every delivery and aborting on any failure.
            await asyncio.gather(*sent)
            if offsets:
                await producer.send_offsets_to_transaction(offsets, self.group_id)
            await producer.commit_transaction()
            return True
        except Exception as exc:  # noqa: BLE001 - aiokafka also raises non-Kafka state errors
            if isinstance(exc, ProducerFenced) or self._owners.was_fenced(partition):
                self.stats.fenced += 1
                log.warning("fenced on answers partition %d; giving it up", partition)
                await self._owners.lose(partition, fenced=True)
                return False
            self.stats.aborted_batches += 1
            log.warning("transaction on partition %d aborted (%s); will redo", partition, exc)
            try:
                await producer.abort_transaction()
            except Exception:  # noqa: BLE001 - a producer that cannot abort is replaced
                await self._owners.lose(partition)
        return False

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
            await self._restore([partition])
        return self._applier.pause(token_id)

    def _accept(
        self,
        prepared: PreparedResume,
        pending: dict[str, Spent],
        now: datetime,
        counts: WorkerStats,
    ) -> list[Output]:
        claims = prepared.claims
        consumed = prepared.token_consumed(**_meta(now))
        resumed = prepared.turn_resumed(**_meta(now))
        pending[claims.token_id] = Spent(claims.thread_id, "resumed", prepared.answer.answer_id)
        counts.resumed += 1
        key = consumption_key(claims.thread_id, claims.token_id)
        return [
            (self.topics.consumptions, key, encode(consumed)),
            (self.topics.resumed, claims.thread_id.encode(), encode(resumed)),
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
            **_meta(now),
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
        if not self._owners.owned:
            return
        # Learn of the pauses recorded since the take first: they are only read on demand.
        await self._restore(self.owned)
        now = self.clock()
        due: dict[int, list[PauseRecorded]] = {}
        for pause in self._applier.expired(now):
            p = partition_for(pause.checkpoint.thread_id, self._partitions)
            if p in self._owners:
                due.setdefault(p, []).append(pause)
        for p, pauses in due.items():
            outputs = [out for pause in pauses for out in self._expiry(pause, now)]
            if await self._commit(p, outputs, {}):
                self._applier.record_consumptions(
                    {
                        pause.token_id: Spent(pause.checkpoint.thread_id, "expired", "")
                        for pause in pauses
                    }
                )
                self.stats.expired += len(pauses)

    def _expiry(self, pause: PauseRecorded, now: datetime) -> list[Output]:
        cp, token_id = pause.checkpoint, pause.token_id
        consumed = TokenConsumed(
            **_meta(now), token_id=token_id, answer_id="", thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id, outcome="expired",
        )  # fmt: skip
        expired = PauseExpired(
            **_meta(now), token_id=token_id, thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id, run_id=cp.run_id, session_id=cp.session_id,
            tool_call_id=cp.tool_call_id, expires_at=pause.expires_at,
        )  # fmt: skip
        return [
            (self.topics.consumptions, consumption_key(cp.thread_id, token_id), encode(consumed)),
            (self.topics.resumed, cp.thread_id.encode(), encode(expired)),
        ]


def _meta(now: datetime) -> dict[str, Any]:
    """The fields every event written here starts with."""
    return {"event_id": uuid.uuid4().hex, "occurred_at": now, "package_version": __version__}


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
