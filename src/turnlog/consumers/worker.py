"""The resume worker: every valid answer resumes its turn exactly once.

One consumer group over the answers topic. For each answers partition it owns, the worker holds
a transactional producer under that partition's stable transactional id (so a new owner fences a
zombie), restores the partition's pauses and consumptions into its store, positions the partition
at its committed offset -- fence first, then restore and position, then read answers -- and then,
per fetched batch, writes in ONE transaction what :class:`~turnlog.consumers.handler.AnswerHandler`
makes of each record (``TokenConsumed`` + ``TurnResumed``, or ``AnswerRejected``) and the batch's
input offset. The store learns of the consumptions only after the commit; an abort discards them
and the batch is read again. A partition whose take failed, or whose producer was lost, stays
assigned but unowned: its records are put back (seek) and the take is retried, so nothing of it is
skipped and nothing is processed without a fenced producer.

Why the committed offset is fetched again after the fence: the consumer fetched its positions
before the rebalance listener ran, possibly before the previous owner's last transaction was
complete, so it may be behind that transaction's offsets -- the answers in between would be
handled twice (resumes are caught by the restored ledger, but rejections and expiries are not).
The fence is ``InitProducerId``, which the transaction coordinator answers only once the previous
producer's transaction is complete (aiokafka retries ``CONCURRENT_TRANSACTIONS`` until then), and
complete means its markers, the one on ``__consumer_offsets`` included, are written. An offset
fetched after the fence therefore includes the previous owner's last commit.

The worker rides out its broker: a failure of the loop's own Kafka calls is logged once, retried
with backoff, and given up (``BrokerUnavailable``) only after ``broker_timeout_seconds`` without
one good round. Answers are never lost on the way: nothing is committed that was not written.

It is one module, over the usual length, because the run loop, the rebalance callbacks, the
transaction and the expiry sweep share one lock and one set of fenced producers: the order in
which they take that lock is the guarantee, and it reads best in one place. What each answer
produces is :mod:`turnlog.consumers.handler`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import (
    IllegalStateError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    KafkaError,
    ProducerFenced,
)
from prometheus_client import CollectorRegistry

from turnlog.clock import utc_now
from turnlog.consumers.content_keys import ensure_keys_topic, seal_outputs
from turnlog.consumers.handler import AnswerHandler, Handled, Output, StartedBatch, event_meta
from turnlog.consumers.ownership import Ownership
from turnlog.consumers.placement import MOST_STANDBYS, Holding, assignor_for
from turnlog.consumers.repair import is_repair, resumes_on_log
from turnlog.consumers.screening import derived_event_id
from turnlog.contracts.events import PauseExpired, PauseRecorded, TokenConsumed
from turnlog.contracts.interactions import InteractionRegistry
from turnlog.contracts.ledger import LedgerEntry, Outcome, retire_before_ms
from turnlog.errors import BrokerUnavailable, ConfigurationError, StoreError
from turnlog.kafka import clients
from turnlog.kafka.finalization import UNFINALIZED_REASON, WINDOW_REASON
from turnlog.kafka.lifecycle import Lifecycle
from turnlog.kafka.partitioning import consumption_key, partition_for
from turnlog.kafka.reader import BrokerOutage, LogReader, Record, close_consumer
from turnlog.kafka.registry import prepare_wire
from turnlog.kafka.topics import TopicSet
from turnlog.observability import tracing
from turnlog.observability.metrics import worker_metrics
from turnlog.projections.projector import StoreApplier
from turnlog.projections.store import Store
from turnlog.region.control import Promotion, PromotionWatch, control_topic
from turnlog.settings import Settings
from turnlog.tokens import TokenVerifier
from turnlog.wire.codec import encode
from turnlog.wire.skim import SkimmedPause, StoredPause, skim_pause

log = logging.getLogger(__name__)

#: A record a transaction writes; a ``None`` value is a tombstone (a retired ledger row).
_Write = tuple[str, bytes, bytes | None]
#: At most this many spent pauses are looked at per retirement pass (the rest wait a pass).
RETIRE_SCAN = 2000

#: What the loop treats as its broker being unwell (retried), rather than as a bug.
_BROKER_TROUBLE = (KafkaError, OSError, TimeoutError, BrokerUnavailable)
#: How long the expiry sweep's catch-up read may take before the broker counts as unreachable.
_PROBE_SECONDS = 10.0


@dataclass
class WorkerStats:
    resumed: int = 0
    #: answers to one call of a pause of several, held until its last call is answered
    held: int = 0
    rejected: int = 0
    duplicates: int = 0
    #: repair requests that wrote a lost half of an outcome (``turnlog audit --heal``)
    repaired: int = 0
    expired: int = 0
    #: ledger rows retired: their tokens' windows and the leeway had closed
    retired: int = 0
    aborted_batches: int = 0
    fenced: int = 0
    restored_records: int = 0
    #: records applied to standby copies (partitions kept warm for another owner)
    standby_records: int = 0
    #: per take: ``records``, what its restore read of each partition taken, ``seconds``, and
    #: ``warm``, the partitions taken that this worker had kept as standby copies
    takes: list[dict[str, Any]] = field(default_factory=list)
    broker_outages: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)


@dataclass
class _Prepared:
    """A partition batch handled and not yet committed: what its transaction writes."""

    tp: TopicPartition
    records: Sequence[Record]
    began: float
    pending: dict[str, LedgerEntry] = field(default_factory=dict)
    outputs: list[Output] = field(default_factory=list)
    headers: list[tracing.Headers | None] = field(default_factory=list)
    outcomes: list[tuple[Record, Handled]] = field(default_factory=list)
    counts: WorkerStats = field(default_factory=WorkerStats)
    #: the records handled as answers, and the repair requests among the batch (rare)
    answers: Sequence[Record] = ()
    repairs: list[Record] = field(default_factory=list)

    def split(self) -> None:
        """Repair requests apart from the answers; without any, no list is copied."""
        self.answers = self.records
        if any(is_repair(r) for r in self.records):
            self.repairs = [r for r in self.records if is_repair(r)]
            self.answers = [r for r in self.records if not is_repair(r)]


def _strategies(standbys: int, standby_assignor: type) -> tuple[type, ...]:
    """The one group protocol a worker offers: the standby placement if it keeps standby
    copies, round-robin if not (as every build before the standby copies).

    One, not both in order of preference: aiokafka 0.14 sends a JoinGroup per assignor offered
    (the first with the first protocol, the next with the first two, ...; aio-libs/aiokafka
    pull request 1168), so each join of a worker offering two protocols was two joins, the
    second one changing the member's protocols while the group completed its rebalance. With
    both offered by every worker, a group of three static members under SIGKILLs and a rolling
    restart of three brokers left partitions unowned for 25-70 s at a time (its first owners 26
    s after the workers started, against 2 s with one protocol), and the rolling-restart chaos
    test timed out draining. The price: a group whose workers disagree (some with
    ``--standby``, some without, or an older build) cannot form; the worker that joins a group
    of the other kind is refused at its join, by name (:meth:`ResumeWorker._mixed_group`).
    """
    if standbys:
        return (standby_assignor,)
    return (RoundRobinPartitionAssignor,)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: ResumeWorker) -> None:
        self._worker = worker

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._worker._release([tp.partition for tp in revoked])

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self._worker._acquire([tp.partition for tp in assigned])


class _View:
    """The handler's reads of the store: pauses skimmed, not decoded (the resumed turn is
    written around their encoded messages), and many tokens at once per batch."""

    def __init__(self, applier: StoreApplier, store: Store, pauses_topic: str) -> None:
        self._applier = applier
        self._store = store
        self._topic = pauses_topic

    def pause(self, token_id: str) -> SkimmedPause | None:
        info = self._store.pause_for_token(token_id)
        return None if info is None else skim_pause(info.value)

    def ledger(self, token_id: str) -> LedgerEntry | None:
        return self._applier.ledger(token_id)

    def ledgers(self, token_ids: Sequence[str]) -> list[LedgerEntry | None]:
        return self._store.ledgers(token_ids)

    def pause_values(self, token_ids: Sequence[str]) -> list[StoredPause | bytes | None]:
        return list(self._store.pause_values(token_ids))

    def superseding(self, thread_id: str, checkpoint_id: str, token_id: str) -> str | None:
        newer = self._store.token_of_checkpoint(thread_id, checkpoint_id)
        return newer if newer is not None and newer != token_id else None

    def pauses_applied(self, partition: int) -> int | None:
        return self._store.offset(self._topic, partition)

    def forgotten(self, thread_id: str, now_ms: int) -> bool:
        return self._store.forgotten(thread_id, now_ms)


async def _send_batched(
    producer: AIOKafkaProducer,
    partition: int,
    outputs: Sequence[_Write],
    headers: Sequence[tracing.Headers | None],
) -> list[asyncio.Future[Any]]:
    """Queue ``outputs`` as record batches built here, one ``send_batch`` per full batch and
    topic, instead of one awaited ``send`` per record (each of which looks the topic's metadata
    up, serialises and appends on its own). The futures resolve on delivery."""
    sent: list[asyncio.Future[Any]] = []
    open_batches: dict[str, Any] = {}
    for i, (topic, key, value) in enumerate(outputs):
        record_headers = (headers[i] if i < len(headers) else None) or []
        batch = open_batches.get(topic)
        if batch is None:
            batch = open_batches[topic] = producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=record_headers) is None:
            # Full: queue it and start the next (a first record always fits an empty batch).
            sent.append(await producer.send_batch(batch, topic, partition=partition))
            batch = open_batches[topic] = producer.create_batch()
            batch.append(timestamp=None, key=key, value=value, headers=record_headers)
    for topic, batch in open_batches.items():
        # Closed, so the sender takes it at once instead of lingering for more records (the
        # transaction's commit would flush it anyway, after the linger): ``linger_ms`` is for
        # records sent one by one.
        batch.close()
        sent.append(await producer.send_batch(batch, topic, partition=partition))
    return sent


class ResumeWorker(Lifecycle):
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
        session_timeout_ms: int | None = None,
        instance_id: str | None = None,
        registry: CollectorRegistry | None = None,
        verify_threads: int = 2,
        standbys: int = 0,
        passive: bool = False,
    ) -> None:
        if not 0 <= standbys <= MOST_STANDBYS:
            raise ValueError(f"standbys must be 0..{MOST_STANDBYS}, not {standbys}")
        if session_timeout_ms is not None:  # a test's own; a deployment sets the settings'
            settings = settings.with_(session_timeout_ms=session_timeout_ms)
        self.settings = settings
        self.topics = topics or TopicSet.from_settings(settings)
        self.store = store
        self.verifier = verifier
        self.interactions = interactions
        self.clock = clock
        self.stats = WorkerStats()
        #: Prometheus collectors on ``registry`` (turnlog's own registry by default).
        self.metrics = worker_metrics(registry)
        #: Whether the group gave this worker its assignment at least once.
        self._joined = False
        self.group_id = settings.application_id
        self._expiry_interval = expiry_interval
        #: Threads checking a batch's token signatures side by side (fewer than 2: inline).
        self._verify_threads = verify_threads
        self._owners = Ownership(
            settings.connection,
            settings.application_id,
            self.topics.answers,
            restore=self._take_state,
            refence_after=settings.session_timeout_ms / 1000,
        )
        self._assigned: set[int] = set()
        #: Per taken partition, the committed offset the take positioned it at: nothing below
        #: it is handled again (see :meth:`_still_current`).
        self._floors: dict[int, int] = {}
        self._lock = asyncio.Lock()
        self._reader_lock = asyncio.Lock()
        #: The partitions the restore reader reads now, positioned where it stopped. The next
        #: read of the same set goes on from there instead of seeking back to the store's
        #: offsets: those stop at the last record applied, before a transaction's commit
        #: marker, so every sweep would otherwise wait on a fetch that can only skip markers.
        self._reader_reads: frozenset[TopicPartition] = frozenset()
        self._stopping = asyncio.Event()
        #: Standby copies per partition this worker offers to keep (``--standby``).
        self.standbys = standbys
        #: Whether the standby copies stood at the log's end at the standby reader's last look.
        self.standby_current = False
        #: The partitions the group's last assignment gave this worker to keep warm.
        self._standby: frozenset[int] = frozenset()
        #: The standby partitions before the last assignment: what a take now had kept warm.
        self._standby_before: frozenset[int] = frozenset()
        self._standby_changed = asyncio.Event()
        #: What the standby reader reads now (positioned where it stopped).
        self._standby_reads: frozenset[TopicPartition] = frozenset()
        #: Owned before the rebalance under way (the eager protocol revokes all first): told to
        #: the group's leader at the join, so the partitions come back here.
        self._previous: frozenset[int] = frozenset()
        self._applier = StoreApplier(store, self.topics, messages_hints=True, scrub_forgotten=True)
        self._partitions = settings.partitions
        self._handler = self._make_handler()
        self._reader = LogReader(settings.connection, client_id="turnlog-restore")
        self._standby_reader = LogReader(settings.connection, client_id="turnlog-standby")
        #: ``--passive`` (a region's standby, docs/operations/regions.md): warm copies of every
        #: partition, and no answers group until an operator's promotion is on the control topic.
        self.passive = passive
        #: Every resumed turn written sealed, its key beside it (``TURNLOG_SEAL``).
        self.seal = settings.seal
        #: The promotion this worker took over on (``None``: active from the start, or waiting).
        self.promotion: Promotion | None = None
        self._copies_all = passive
        self._watch = (
            PromotionWatch(settings.connection, control_topic(self.topics.prefix))
            if passive
            else None
        )
        assignor = assignor_for(self._holding, self._on_standby)
        self._consumer = clients.consumer(
            settings,
            group_id=self.group_id,
            # Static membership: a restarted worker with the same instance id takes its
            # partitions straight back instead of making the whole group rebalance.
            group_instance_id=instance_id,
            client_id=f"turnlog-worker-{uuid.uuid4().hex[:8]}",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=max_batch,
            # A member that dies without leaving keeps its partitions this long.
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_ms,
            rebalance_timeout_ms=60000,
            max_poll_interval_ms=120000,
            partition_assignment_strategy=_strategies(standbys, assignor),
        )
        self._started = False

    def _outage_watch(self) -> BrokerOutage:
        return BrokerOutage(self.settings.broker_timeout_seconds, "resume worker", log)

    def _make_handler(self) -> AnswerHandler:
        return AnswerHandler(
            topics=self.topics,
            partitions=self._partitions,
            verifier=self.verifier,
            interactions=self.interactions,
            view=_View(self._applier, self.store, self.topics.pauses),
            catch_up=self._catch_up,
            max_record_bytes=self.settings.max_record_bytes,
            verify_threads=self._verify_threads,
        )

    @property
    def owned(self) -> list[int]:
        return self._owners.owned

    @property
    def standby(self) -> list[int]:
        """The partitions this worker keeps warm for their owners (read-only copies)."""
        return sorted(self._standby_now())

    def _standby_now(self) -> frozenset[int]:
        if self.standbys == 0 and not self._copies_all:
            return frozenset()
        return self._standby - self._assigned - set(self._owners.owned)

    def _holding(self) -> Holding:
        """What this member tells the group's leader at a join (see consumers/placement.py)."""
        owned = self._previous | set(self._owners.owned) | self._assigned
        return Holding(frozenset(owned), self._standby_now(), self.standbys)

    def _on_standby(self, standby: Mapping[str, frozenset[int]]) -> None:
        """The assignment's standby partitions (before the partitions-assigned listener)."""
        self._previous = frozenset()
        self._standby_before = self._standby
        self._standby = (
            standby.get(self.topics.answers, frozenset()) if self.standbys else frozenset()
        )
        self.metrics.standby.set(len(self._standby))
        self._standby_changed.set()

    @property
    def ready(self) -> bool:
        """Joined the group, and owns (fenced and restored) every partition assigned to it."""
        return self._started and self._joined and self._assigned <= set(self._owners.owned)

    async def start(self) -> None:
        if self._started:
            return
        await prepare_wire(self.settings, self.topics)  # the registry wire's ids, if set
        if self.seal:
            await ensure_keys_topic(self.settings, self.topics)
        outage = self._outage_watch()
        consumer_started = False
        while True:
            try:
                # Started once: a retry after the broker went between the two starts must not
                # start the answers consumer again (aiokafka refuses a second start).
                if not consumer_started:
                    await self._consumer.start()
                    consumer_started = True
                await self._reader.start()
                if self.standbys or self.passive:
                    await self._standby_reader.start()
                if self._watch is not None:
                    await self._watch.start()
                self._partitions = len(await self._reader.partitions_of(self.topics.answers))
                break
            except _BROKER_TROUBLE as exc:
                await self._pause_for(outage.failed(exc))
                if self._stopping.is_set():
                    raise BrokerUnavailable("stopped while waiting for the broker") from exc
        outage.ok()
        self._handler = self._make_handler()
        self._started = True
        if self._copies_all:
            self._standby = frozenset(range(self._partitions))
            self.metrics.standby.set(self._partitions)
            return  # the answers group waits for the promotion (run)
        self._consumer.subscribe([self.topics.answers], listener=_Rebalance(self))

    def request_stop(self) -> None:
        """Ask the run loop to finish its batch, commit and leave (safe from a signal handler)."""
        self._stopping.set()

    async def _pause_for(self, seconds: float) -> None:
        """Wait ``seconds``, or less if a stop is requested."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def run(self) -> None:
        """Process answers until :meth:`request_stop`; then commit, leave the group, close."""
        try:
            await self.start()
            sweeper = asyncio.create_task(self._sweep())
            tasks = [sweeper]
            if self.standbys or self.passive:
                tasks.append(asyncio.create_task(self._stand_by()))
            outage = self._outage_watch()
            try:
                if self._copies_all and not await self._until_promoted():
                    return  # stopped while passive
                while not self._stopping.is_set():
                    try:
                        await self._round()
                    except InconsistentGroupProtocolError as exc:
                        raise ConfigurationError(self._mixed_group()) from exc
                    except InvalidSessionTimeoutError as exc:  # not an outage: never waited out
                        raise ConfigurationError(self._session_refused()) from exc
                    except _BROKER_TROUBLE as exc:
                        self._outage_began(outage.down)
                        await self._pause_for(outage.failed(exc))
                        continue
                    outage.ok()
                    for task in tasks:
                        if task.done():
                            task.result()  # raises what ended it (an outage over budget)
            finally:
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        finally:
            await self.stop()

    async def _until_promoted(self) -> bool:
        """A passive worker's wait: its copies kept warm (:meth:`_stand_by`) until the control
        topic holds a promotion; then it joins the answers group, and its takes read only what
        came after the copies. False: stopped first. Nothing but the promotion ends the wait --
        not the other region's silence, which a network blip looks like."""
        if self._watch is None:
            return True
        outage = self._outage_watch()
        while not self._stopping.is_set():
            try:
                found = await self._watch.wait(self._stopping)
            except _BROKER_TROUBLE as exc:
                await self._pause_for(outage.failed(exc))
                continue
            if found is None:
                return False
            self.promotion = found
            log.info(
                "%s: taking over the answers group %s from warm copies of partitions %s",
                found.line(), self.group_id, sorted(self._standby),
                extra={"event": "promoted", "by": found.by, "region": found.region},
            )  # fmt: skip
            async with self._reader_lock:
                self._copies_all = False
                self._standby_before = self._standby
                if not self.standbys:
                    self._standby = frozenset()
                self._standby_changed.set()
            self._consumer.subscribe([self.topics.answers], listener=_Rebalance(self))
            return True
        return False

    def _session_refused(self) -> str:
        """What a join refused for its session timeout says: the value, the broker's bounds."""
        return (
            f"the broker refused the worker group's session timeout of "
            f"{self.settings.session_timeout_ms} ms (TURNLOG_SESSION_TIMEOUT_MS, "
            "--session-timeout-ms): it takes values from its group.min.session.timeout.ms to its "
            "group.max.session.timeout.ms (6000 to 1800000 by default); set one in that range, "
            "or change the broker's bounds"
        )

    def _mixed_group(self) -> str:
        """What a refused join says: which side keeps copies, and what to change."""
        why = (
            "this worker keeps standby copies (--standby) and the group's workers do not"
            if self.standbys
            else "the group's workers keep standby copies (--standby) and this worker does not"
        )
        return (
            f"the worker group {self.group_id} places its partitions another way than this "
            f"worker: {why}, or runs an older build; start every worker of a group either with "
            "--standby or without it"
        )

    async def _round(self) -> None:
        batch = await self._consumer.getmany(timeout_ms=self.settings.commit_interval_ms)
        async with self._lock:
            # Every partition's batch is handled first, then their transactions (one producer
            # per partition) commit side by side. Handling first gives each partition's last
            # transaction the time to finish its markers: a transaction begun before they are
            # written is refused (CONCURRENT_TRANSACTIONS) and retried after a backoff, which
            # at half load was what an answer waited for most. Every prepared batch runs to its
            # own commit or abort before an error is raised.
            # Each batch is begun (decoded, store read, signature checks sent to the threads)
            # before the first is finished, so the checks of one run while another is handled.
            begun: list[tuple[_Prepared, datetime, StartedBatch]] = []
            prepared: list[_Prepared] = []
            failure: BaseException | None = None
            for tp, records in batch.items():
                if records and tp.partition in self._owners:
                    current = await self._still_current(tp, records)
                    if not current:
                        continue
                    one = _Prepared(tp, current, time.monotonic())
                    one.split()
                    now = self.clock()
                    try:
                        begun.append(
                            (one, now, self._handler.start_batch(one.answers, one.pending, now))
                        )
                    except Exception as exc:  # noqa: BLE001 - the worker's own (its threads)
                        self._put_back(tp, current[0].offset)
                        failure = failure or exc
                elif records:
                    self._put_back(tp, records[0].offset)
            for one, now, started in begun:
                try:
                    prepared.append(await self._prepare(one, started, now))
                except Exception as exc:  # noqa: BLE001 - the worker's own (a catch-up read)
                    self._put_back(one.tp, one.records[0].offset)
                    failure = failure or exc
            work = [self._conclude(one) for one in prepared]
            for outcome in await asyncio.gather(*work, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    raise outcome
            if failure is not None:
                raise failure
            await self._retake()
            await self._report_lag()

    async def _report_lag(self) -> None:
        """Per assigned partition, what is committed on the log and not yet read: the last
        stable offset (a ``read_committed`` reader's end) as of the last fetch, minus the
        position. Partitions never fetched yet report nothing."""
        self.metrics.owned.set(len(self._owners.owned))
        for tp in self._consumer.assignment():
            end = self._consumer.last_stable_offset(tp)
            if end is None:
                end = self._consumer.highwater(tp)
            if end is None:
                continue
            try:
                position = await self._consumer.position(tp)
            except IllegalStateError:
                continue
            self.metrics.lag.labels(str(tp.partition)).set(max(0, end - position))

    async def _still_current(self, tp: TopicPartition, records: list[Record]) -> list[Record]:
        """The records of a fetched batch that a take has not made stale.

        ``getmany`` may return records fetched from the position the consumer had *before* a
        take (run by the rebalance listener while this round waited for the lock) positioned
        the partition at its committed offset. Such a batch is dropped: the consumer reads the
        partition again from where the take put it. Handling it would write its rejections a
        second time (resumes are caught by the ledger, refusals are not), or, for records
        below the committed offset, write what the previous owner already wrote.
        """
        try:
            position = await self._consumer.position(tp)
        except IllegalStateError:  # no longer assigned
            return []
        if position != records[-1].offset + 1:
            return []  # repositioned since the fetch
        floor = self._floors.get(tp.partition, 0)
        return [r for r in records if r.offset >= floor]

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        async with self._lock:
            await self._owners.close()
        # Leaving the group lets the partitions move now, not after a session timeout.
        await close_consumer(self._consumer)
        # A take that the consumer's last group join ran after the first close (a stop during
        # a join) opened producers of its own: close those too.
        async with self._lock:
            await self._owners.close()
        await self._reader.stop()
        self._reader_reads = frozenset()
        await self._standby_reader.stop()
        self._standby_reads = frozenset()
        if self._watch is not None:
            await self._watch.stop()
        self._handler.close()

    # -- ownership -------------------------------------------------------------------------

    async def _acquire(self, partitions: list[int]) -> None:
        async with self._lock:
            self._joined = True
            self._assigned.update(partitions)
            await self._owners.take(partitions, now=True)
            self.metrics.owned.set(len(self._owners.owned))

    async def _release(self, partitions: list[int]) -> None:
        # Taking the lock waits for the in-flight batch to commit or abort before the
        # partitions move, so the next owner starts from a committed position.
        async with self._lock:
            self._previous |= set(partitions) & set(self._owners.owned)
            self._assigned.difference_update(partitions)
            await self._owners.release(partitions)
            self.metrics.owned.set(len(self._owners.owned))
            for p in partitions:
                # A partition someone else owns now is their lag to report, not ours.
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(str(p))

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

    async def _take_state(self, partitions: list[int]) -> None:
        """After the fence: restore the partitions' state, then read their answers from the
        committed offset as it is now (see the module docstring)."""
        began = time.monotonic()
        read: dict[int, int] = dict.fromkeys(sorted(partitions), 0)
        count = await self._restore(partitions, record_duration=True, counts=read)
        seconds = time.monotonic() - began
        warm = sorted(set(partitions) & self._standby_before)
        self.stats.takes.append({"records": read, "seconds": seconds, "warm": warm})
        log.info(
            "restored answers partitions %s: %d records in %.2fs (per partition %s; kept warm "
            "here: %s)", sorted(partitions), count, seconds, read, warm,
            extra={"event": "restore", "records": read, "warm": warm},
        )  # fmt: skip
        for p in partitions:
            tp = TopicPartition(self.topics.answers, p)
            committed = await self._consumer.committed(tp)
            self._floors[p] = committed or 0
            # None: nobody has committed, and the consumer starts from the earliest offset
            # already (a second reset here would be applied late, after a first batch).
            if committed is not None and tp in self._consumer.assignment():
                self._consumer.seek(tp, committed)

    async def _restore(
        self,
        partitions: list[int],
        timeout: float = 300.0,
        *,
        record_duration: bool = False,
        pauses_only: bool = False,
        counts: dict[int, int] | None = None,
    ) -> int:
        """Apply pauses[p] and consumptions[p] of ``partitions`` up to their committed end.

        ``pauses_only``: the reads while a partition is owned (the expiry sweep, the handler's
        catch-up) need the pauses recorded since the take, not the consumptions: while this
        worker owns p it is the only writer of consumptions[p] (the fence saw to it) and its
        store records each one as its transaction commits. Reading them back cost more than
        any other step of a resume but the signature check (``bench/README.md``). What else
        lands there (a ``forget``'s tombstones) is applied, in log order, at the next take;
        until then the forgotten token stays spent, never the reverse.
        """
        topics = (
            [self.topics.pauses] if pauses_only else [self.topics.pauses, self.topics.consumptions]
        )
        tps = [TopicPartition(topic, p) for p in partitions for topic in topics]
        began = time.monotonic()
        wanted = frozenset(tps)
        async with self._reader_lock:
            try:
                if wanted != self._reader_reads:
                    offsets = self.store.offsets()
                    await self._reader.assign(
                        {tp: offsets.get((tp.topic, tp.partition)) for tp in tps}
                    )
                    self._reader_reads = wanted
                apply = self._applier.apply
                if counts is not None:

                    async def apply(records: Sequence[Record]) -> None:
                        for r in records:
                            counts[r.partition] = counts.get(r.partition, 0) + 1
                        await self._applier.apply(records)

                count = await self._reader.read_to_end(apply, timeout=timeout)
            except BaseException:
                self._reader_reads = frozenset()  # positions unknown: seek again next time
                raise
        self.stats.restored_records += count
        self.metrics.restored.inc(count)
        if record_duration:
            self.metrics.restore_duration.observe(time.monotonic() - began)
        return count

    async def _catch_up(self, partition: int) -> None:
        """The handler's catch-up of an owned partition an answer may have overtaken."""
        await self._restore([partition], timeout=30.0, pauses_only=True)

    # -- standby copies --------------------------------------------------------------------

    def _standby_tps(self) -> frozenset[TopicPartition]:
        topics = (self.topics.pauses, self.topics.consumptions)
        return frozenset(TopicPartition(t, p) for p in self._standby_now() for t in topics)

    async def _stand_by(self) -> None:
        """Keep the standby partitions' state warm: apply pauses[p] and consumptions[p] as the
        owner writes them, so a take of p reads only what came after (Kafka Streams' standby
        tasks). Read-only: nothing is answered, expired or retired for p here.

        A fetch is made outside the reader lock and applied under it only if the set it was
        made for still stands: a take that began meanwhile (its partitions are assigned first)
        has its restore go on from the store's offsets, and the fetched records are dropped
        and read again from there, never applied after the take's own.
        """
        outage = self._outage_watch()
        current = False  # said once each time the copies reach the log's end
        while not self._stopping.is_set():
            self.standby_current = current
            try:
                async with self._reader_lock:
                    wanted = self._standby_tps()
                    if wanted != self._standby_reads:
                        offsets = self.store.offsets()
                        await self._standby_reader.assign(
                            {tp: offsets.get((tp.topic, tp.partition)) for tp in wanted}
                        )
                        self._standby_reads = wanted
                        self.metrics.standby.set(len({tp.partition for tp in wanted}))
                        current = False
                if not wanted:
                    self._standby_changed.clear()
                    waiting = asyncio.ensure_future(self._standby_changed.wait())
                    stopping = asyncio.ensure_future(self._stopping.wait())
                    await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                    for task in (waiting, stopping):
                        task.cancel()
                    continue
                records = await self._standby_reader.poll(timeout_ms=200)
                if not records:
                    if not current:
                        current = await self._standby_current(wanted)
                    continue
                current = False
                async with self._reader_lock:
                    if self._standby_reads != self._standby_tps():
                        self._standby_reads = frozenset()  # moved meanwhile: seek again
                        continue
                    await self._applier.apply(records)
                    applied = {TopicPartition(r.topic, r.partition) for r in records}
                    if applied & self._reader_reads:
                        # The restore reader's positions for these are behind the store now.
                        self._reader_reads = frozenset()
                self.stats.standby_records += len(records)
                self.metrics.standby_records.inc(len(records))
                outage.ok()
            except _BROKER_TROUBLE as exc:
                self._standby_reads = frozenset()
                await self._pause_for(outage.failed(exc))
            except StoreError as exc:  # a store from another log: said, and the copy dropped
                log.warning("standby copies stopped: %s", exc)
                self._standby_reads = frozenset()
                self._standby = frozenset()

    async def _standby_current(self, wanted: frozenset[TopicPartition]) -> bool:
        """Whether the standby reader stands at the committed end of every copy (logged)."""
        reader = self._standby_reader
        ends = await reader.end_offsets(wanted)
        at = {tp: await reader.position(tp) for tp in wanted}
        if any(at[tp] < end for tp, end in ends.items()):
            return False
        offsets = {f"{tp.topic}[{tp.partition}]": n for tp, n in sorted(at.items())}
        log.info(
            "standby copies of answers partitions %s are current: %s",
            sorted({tp.partition for tp in wanted}), json.dumps(offsets, separators=(",", ":")),
            extra={"event": "standby", "offsets": offsets},
        )  # fmt: skip
        return True

    # -- answers ---------------------------------------------------------------------------

    async def _prepare(self, one: _Prepared, started: StartedBatch, now: datetime) -> _Prepared:
        """What a partition batch's transaction must write: each record handled."""
        counts = one.counts
        handled_all = list(
            zip(
                one.answers,
                await self._handler.finish_batch(started, one.pending, now),
                strict=True,
            )
        )
        for record in one.repairs:
            since = getattr(record, "timestamp", 0)
            on_log = await resumes_on_log(
                self.settings.connection, self.topics.resumed, one.tp.partition,
                since if isinstance(since, int) else 0,
            )  # fmt: skip
            handled_all.append(
                (record, await self._handler.repair(record, on_log, one.pending, now))
            )
        for record, handled in handled_all:
            outputs = handled.outputs
            if self.seal:
                outputs = seal_outputs(self.topics, outputs)
            one.outputs.extend(outputs)
            one.headers.extend([self._trace(record)] * len(outputs))
            one.outcomes.append((record, handled))
            if handled.repaired:
                counts.repaired += 1
            elif handled.resumed:
                counts.resumed += 1
            elif handled.held:
                counts.held += 1
            elif handled.duplicate:
                counts.duplicates += 1
            elif handled.refusal is not None:
                counts.rejected += 1
                reason = handled.refusal.reason.value
                counts.rejected_by_reason[reason] = counts.rejected_by_reason.get(reason, 0) + 1
        return one

    async def _conclude(self, one: _Prepared) -> None:
        """Commit a prepared batch with its input offset; only then tell the store and count."""
        tp, records, counts = one.tp, one.records, one.counts
        offsets = {tp: records[-1].offset + 1}
        if not await self._commit(tp.partition, one.outputs, offsets, one.headers):
            self._put_back(tp, records[0].offset)
            return
        # Committed: only now does the store learn of the consumptions.
        self._applier.record_consumptions(one.pending)
        self.stats.resumed += counts.resumed
        self.stats.held += counts.held
        self.stats.rejected += counts.rejected
        self.stats.duplicates += counts.duplicates
        self.stats.repaired += counts.repaired
        for reason, n in counts.rejected_by_reason.items():
            self.stats.rejected_by_reason[reason] = self.stats.rejected_by_reason.get(reason, 0) + n
        committed_at = time.time()
        tally: dict[tuple[str, str], int] = {}
        for record, handled in one.outcomes:
            key = self._report(record, handled, committed_at)
            tally[key] = tally.get(key, 0) + 1
        # One increment per (outcome, reason) and batch, not per answer.
        for (outcome, reason), n in tally.items():
            self.metrics.answers.labels(outcome, reason).inc(n)
        self.metrics.batch_duration.observe(time.monotonic() - one.began)

    @staticmethod
    def _trace(record: Record) -> tracing.Headers | None:
        """The answer's outputs continue its trace: a child of the record's ``traceparent``
        (none when it has none, or a malformed one -- ignored, never a refusal)."""
        parent = tracing.from_headers(getattr(record, "headers", None))
        return None if parent is None else tracing.child_of(parent).header()

    def _report(self, record: Record, handled: Handled, committed_at: float) -> tuple[str, str]:
        """One committed answer: its latency, its INFO line (never the token); its outcome and
        reason, which the caller counts."""
        reason = "" if handled.refusal is None else handled.refusal.reason.value
        if handled.resumed:
            outcome = "resumed"
            # The answer record's timestamp (producer create time, milliseconds).
            stamp = getattr(record, "timestamp", None)
            if isinstance(stamp, int) and stamp > 0:
                self.metrics.resume_latency.observe(max(0.0, committed_at - stamp / 1000))
        elif handled.repaired:
            outcome = "repaired"
        elif handled.continued:
            outcome = "continued"
        elif handled.held:
            outcome = "held"
        elif handled.duplicate:
            outcome = "duplicate"
        elif handled.refusal is not None:
            outcome = "rejected"
        else:
            outcome = "tombstone"
        if outcome == "tombstone" or not log.isEnabledFor(logging.INFO):
            return outcome, reason
        log.info(
            "answer %s %s: thread %s, partition %d, offset %d%s",
            handled.answer_id, outcome, handled.thread_id, record.partition, record.offset,
            f", reason {reason}" if reason else "",
            extra={
                "event": "answer", "outcome": outcome, "reason": reason or None,
                "thread_id": handled.thread_id, "answer_id": handled.answer_id,
                "partition": record.partition, "offset": record.offset,
            },
        )  # fmt: skip
        return outcome, reason

    async def _commit(
        self,
        partition: int,
        outputs: Sequence[_Write],
        offsets: dict[TopicPartition, int],
        headers: Sequence[tracing.Headers | None] = (),
    ) -> bool:
        """Write ``outputs`` (and the input ``offsets``) in one transaction of the partition's
        producer; ``headers[i]``, where given, are the record headers of ``outputs[i]``.
        False: nothing of it happened -- aborted, or fenced by a newer owner."""
        producer = self._owners.producer(partition)
        began = time.monotonic()
        try:
            await producer.begin_transaction()
            sent = await _send_batched(producer, partition, outputs, headers)
            # aiokafka commits even if one of the transaction's records failed to be written;
            # all or nothing means waiting for every delivery (and aborting on any failure)
            # before the offsets join the transaction. Sending the offsets while the records
            # were in flight is one of two changes under which the outage chaos test wrote a
            # refusal twice (ownership.py): kept in this order.
            await asyncio.gather(*sent)
            if offsets:
                await producer.send_offsets_to_transaction(offsets, self.group_id)
            await producer.commit_transaction()
            return True
        except Exception as exc:  # noqa: BLE001 - aiokafka also raises non-Kafka state errors
            if isinstance(exc, ProducerFenced) or self._owners.was_fenced(partition):
                self.stats.fenced += 1
                self.metrics.fences.inc()
                log.warning(
                    "fenced on answers partition %d; giving it up", partition,
                    extra={"event": "ownership", "change": "fenced", "partition": partition},
                )  # fmt: skip
                await self._owners.lose(partition, fenced=True)
                self.metrics.owned.set(len(self._owners.owned))
                return False
            self.stats.aborted_batches += 1
            self.metrics.aborts.inc()
            log.warning("transaction on partition %d aborted (%s); will redo", partition, exc)
            try:
                await producer.abort_transaction()
            except Exception:  # noqa: BLE001 - a producer that cannot abort is replaced
                await self._owners.lose(partition)
                self.metrics.owned.set(len(self._owners.owned))
        finally:
            self.metrics.transaction_duration.observe(time.monotonic() - began)
        return False

    # -- expiry ----------------------------------------------------------------------------

    async def _sweep(self) -> None:
        """Expire due pauses every ``expiry_interval`` seconds, beside the answers loop."""
        outage = self._outage_watch()
        while not self._stopping.is_set():
            await self._pause_for(self._expiry_interval)
            try:
                await self._expire()
            except TimeoutError:
                self._outage_began(outage.down)
                no_answer = BrokerUnavailable(f"no answer within {_PROBE_SECONDS:.0f}s")
                await self._pause_for(outage.failed(no_answer))
                continue
            except _BROKER_TROUBLE as exc:
                self._outage_began(outage.down)
                await self._pause_for(outage.failed(exc))
                continue
            outage.ok()

    def _outage_began(self, already_down: bool) -> None:
        if not already_down:
            self.stats.broker_outages += 1
            self.metrics.outages.inc()

    async def _expire(self) -> None:
        """Close the pauses whose window ended, so nothing waits silently forever.

        Learning of the pauses recorded since the take (they are otherwise read on demand)
        happens outside the worker lock, so answers keep flowing while it runs; only deciding
        what is due and committing it holds the lock.
        """
        if not self._owners.owned:
            return
        # Also the worker's probe of its broker: aiokafka retries an unreachable broker inside
        # every call without raising, so a read that does not finish in time is how an outage
        # shows (and a later one that does is how its end shows).
        await asyncio.wait_for(self._restore(self.owned, pauses_only=True), _PROBE_SECONDS)
        async with self._lock:
            await self._expire_unfinalized()
            await self._expire_due()
            await self._retire_due()

    def _retire_line(self, now: datetime) -> int:
        """:func:`~turnlog.contracts.ledger.retire_before_ms` with this worker's verifier."""
        leeway_ms = int(self.verifier.leeway.total_seconds() * 1000)
        keep_ms = self.settings.ledger_keep_seconds * 1000
        return retire_before_ms(int(now.timestamp() * 1000), leeway_ms, keep_ms)

    async def _expire_due(self) -> None:
        now = self.clock()
        due: dict[int, list[PauseRecorded]] = {}
        # Not below the retirement line: such a pause's row may be retired already.
        # Owned partitions only, decided before a pause is read (standby copies wait here too).
        for pause in self._applier.expired(
            now,
            self._retire_line(now),
            keep=lambda thread: self._partition_of(thread) in self._owners,
        ):
            due.setdefault(self._partition_of(pause.checkpoint.thread_id), []).append(pause)
        for p, pauses in due.items():
            outputs = [out for pause in pauses for out in self._expiry(pause, now)]
            if await self._commit(p, outputs, {}):
                self._applier.record_consumptions(
                    {
                        pause.token_id: LedgerEntry(Outcome.EXPIRED, "", pause.checkpoint.thread_id)
                        for pause in pauses
                    }
                )
                self.stats.expired += len(pauses)
                self.metrics.expired.inc(len(pauses))

    async def _expire_unfinalized(self) -> None:
        """Expire the pauses of owned partitions left in the crash window: written unfinalized
        longer than ``finalize_timeout_seconds`` ago and never finalized -- their writer died
        before their turn's state was complete, so no answer may resume them. Each gets its
        ``PauseExpired`` (reason ``unfinalized``) and its token is spent, once, as any expiry;
        a worker that starts or takes a partition over does so at its first sweep. The index
        read holds only the writes not finalized yet: nothing is read on the answers' path."""
        now = self.clock()
        now_ms = int(now.timestamp() * 1000)
        line = self._retire_line(now)
        bound = now_ms - self.settings.finalize_timeout_seconds * 1000
        due: dict[int, list[PauseRecorded]] = {}
        for left in self.store.unfinalized(bound):
            p = self._partition_of(left.thread_id)
            if left.spent or left.expires_at_ms < line or p not in self._owners:
                continue
            pause = self._applier.pause(left.token_id)
            if pause is not None:
                due.setdefault(p, []).append(pause)
        for p, pauses in due.items():
            outputs = [out for one in pauses for out in self._expiry(one, now, UNFINALIZED_REASON)]
            if await self._commit(p, outputs, {}):
                self._applier.record_consumptions(
                    {
                        one.token_id: LedgerEntry(Outcome.EXPIRED, "", one.checkpoint.thread_id)
                        for one in pauses
                    }
                )
                self.stats.expired += len(pauses)
                self.metrics.expired.inc(len(pauses))
                for one in pauses:
                    log.warning(
                        "expired the pause of thread %s, checkpoint %s (token %s): written "
                        "unfinalized at %s and not finalized within %ss (its writer stopped in "
                        "the crash window); it is never resumed",
                        one.checkpoint.thread_id, one.checkpoint.checkpoint_id, one.token_id,
                        one.occurred_at.isoformat(), self.settings.finalize_timeout_seconds,
                        extra={"event": "expired", "reason": UNFINALIZED_REASON,
                               "thread_id": one.checkpoint.thread_id, "partition": p},
                    )  # fmt: skip

    async def _retire_due(self) -> None:
        """Retire the ledger rows of owned partitions whose tokens can no longer be spent.

        Found by deadline in the store's spent index, never by reading the ledger; each
        partition's tombstones go in one transaction of its fenced producer, beside the expiry
        sweep and off the answers' path, and the store drops the rows only after the commit.
        A replayed answer for such a token is refused at step 1 by the clock, before the
        ledger is read: retiring the row cannot let it be spent again.
        """
        line = self._retire_line(self.clock())
        due: dict[int, list[tuple[str, str]]] = {}
        # Owned first, then the budget: rows of other partitions (standby copies, a store
        # left from an earlier ownership) must not take every pass's scan.
        mine = (
            s for s in self.store.retirable(line) if self._partition_of(s.thread_id) in self._owners
        )
        for spent in itertools.islice(mine, RETIRE_SCAN):
            p = self._partition_of(spent.thread_id)
            due.setdefault(p, []).append((spent.thread_id, spent.token_id))
        topic = self.topics.consumptions
        for p, rows in due.items():
            outputs = [(topic, consumption_key(thread, token), None) for thread, token in rows]
            if await self._commit(p, outputs, {}):
                with self.store.batch() as batch:
                    for thread, token in rows:
                        batch.delete_consumption(thread, token)
                self.stats.retired += len(rows)

    def _partition_of(self, thread_id: str) -> int:
        return partition_for(thread_id, self._partitions)

    def _expiry(
        self, pause: PauseRecorded, now: datetime, reason: str = WINDOW_REASON
    ) -> list[Output]:
        cp, token_id = pause.checkpoint, pause.token_id
        consumed = TokenConsumed(
            **event_meta(now), token_id=token_id, answer_id="", thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id, outcome=Outcome.EXPIRED,
        )  # fmt: skip
        # One expiry per token: a copy (a sweep after a lost consumption) is the same event.
        expired = PauseExpired(
            **event_meta(now, derived_event_id("expired", token_id)), token_id=token_id,
            thread_id=cp.thread_id, checkpoint_id=cp.checkpoint_id, run_id=cp.run_id,
            session_id=cp.session_id, tool_call_id=cp.tool_call_id, expires_at=pause.expires_at,
            reason=reason,
        )  # fmt: skip
        return [
            (self.topics.consumptions, consumption_key(cp.thread_id, token_id), encode(consumed)),
            (self.topics.resumed, cp.thread_id.encode(), encode(expired)),
        ]
