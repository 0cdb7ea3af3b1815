"""Reading the log for the audit: the five topics, ``read_committed``, and the group's offsets.

The auditor is independent of every worker: it needs no store and no key, only read access to
the topics and to the worker group's committed offsets (``turnlog acls`` lists the rights). It
reads each partition from its first record, so its verdict depends on nothing a worker
remembers; kept running (:meth:`Auditor.audit` again), it goes on from where it stopped.

Why the committed offsets are read first and the outputs after: a worker's transaction commits
its outputs and the answers offset together, but the broker writes the markers that make them
visible one partition at a time. Read in this order, an answer below the committed offset whose
outcome is not visible yet is one whose markers are still being written -- so a verdict that
finds answers without an outcome, or a consumption without its resume, reads the outputs again
after ``settle_seconds`` and reports only what is still missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnlog.audit.invariant import AnswerSeen, Kind, PartitionFacts, Place, Report, judge
from turnlog.clock import utc_now
from turnlog.consumers.repair import REPAIR_HEADER
from turnlog.consumers.screening import ID_CHARS, clip
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    ContinuationRequested,
    PauseExpired,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.ledger import retire_before_ms
from turnlog.errors import BrokerUnavailable, DecodeError
from turnlog.kafka import clients
from turnlog.kafka.groups import group_status
from turnlog.kafka.internals import refresh_metadata
from turnlog.kafka.partitioning import split_key
from turnlog.kafka.reader import close_consumer
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings
from turnlog.tokens import peek_claims
from turnlog.wire.codec import decode

#: What a repair request can mend: the lost half of an outcome, or an outcome lost whole.
#: A record on the log twice cannot be taken back; its copies share an event id instead.
HEALABLE = frozenset(
    {Kind.CONSUMED_WITHOUT_RESUME, Kind.RESUMED_WITHOUT_CONSUMPTION, Kind.ANSWER_WITHOUT_OUTCOME}
)


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """An answer published again, tagged, so that its partition's owner mends its outcome."""

    kind: Kind
    partition: int
    answer_id: str
    #: where the answer was, and where its repair request went
    offset: int
    request_offset: int


#: Kinds a verdict re-checks after the settle time: what a commit still writing its markers
#: shows for a moment. A duplicate never goes away by waiting, so it is not re-checked.
_TRANSIENT = {Kind.ANSWER_WITHOUT_OUTCOME, Kind.CONSUMED_WITHOUT_RESUME, Kind.EXPIRY_INCOMPLETE}


class Auditor:
    """Reads a deployment's topics and judges the exactly-once invariant over them."""

    def __init__(
        self,
        settings: Settings,
        *,
        topics: TopicSet | None = None,
        group_id: str | None = None,
        settle_seconds: float = 3.0,
        timeout: float = 300.0,
    ) -> None:
        self.settings = settings
        self.topics = topics or TopicSet.from_settings(settings)
        self.group_id = group_id or settings.application_id
        self.settle_seconds = settle_seconds
        self.timeout = timeout
        self._consumer: AIOKafkaConsumer | None = None
        self._facts: dict[int, PartitionFacts] = {}
        self._roles = {
            self.topics.answers: "answers",
            self.topics.pauses: "pauses",
            self.topics.consumptions: "consumptions",
            self.topics.resumed: "resumed",
            self.topics.rejections: "rejections",
        }
        self._first_seen: set[TopicPartition] = set()

    async def __aenter__(self) -> Auditor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await close_consumer(consumer)

    async def audit(self) -> Report:
        """One verdict: the group's committed offsets now, the topics read to their ends."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        consumer = await self._started()
        group = await group_status(
            self.settings.connection, self.group_id, self.topics.answers, timeout=self.timeout
        )
        for lag in group.partitions:
            self._partition(lag.partition).committed = lag.committed
        await self._read_to_end(consumer, deadline)
        self._retirement_line()
        report = judge(self._facts[p] for p in sorted(self._facts))
        if any(v.kind in _TRANSIENT for v in report.violations) and self.settle_seconds > 0:
            await asyncio.sleep(self.settle_seconds)  # markers still being written: see above
            await self._read_to_end(consumer, loop.time() + self.timeout)
            report = judge(self._facts[p] for p in sorted(self._facts))
        return report

    async def heal(self, report: Report) -> list[RepairRequest]:
        """Ask the owners to mend every healable violation of ``report`` (:data:`HEALABLE`):
        each answer concerned is published again, same key, value and timestamp, on its own
        partition, with the repair header. The owner decides what to write from its own ledger
        and the log (:mod:`turnlog.consumers.repair`); a request for something already whole
        writes nothing, so asking twice is harmless."""
        wanted: dict[tuple[int, str], Kind] = {}
        for v in report.violations:
            answer_id = v.ids.get("answer_id")
            if v.kind in HEALABLE and isinstance(answer_id, str):
                wanted.setdefault((v.partition, answer_id), v.kind)
        found: dict[tuple[int, str], int] = {}
        for (p, answer_id), _ in wanted.items():
            for seen in self._facts[p].answers:
                if seen.answer_id == answer_id:
                    found[(p, answer_id)] = seen.place.offset
                    break
        if not found:
            return []
        consumer = await self._started()
        producer = clients.producer(
            self.settings.connection, client_id="turnlog-audit-heal", acks="all"
        )
        await producer.start()
        requests = []
        try:
            for (p, answer_id), offset in sorted(found.items()):
                record = await _record_at(consumer, TopicPartition(self.topics.answers, p), offset)
                headers = [*(record.headers or ()), (REPAIR_HEADER, b"audit")]
                meta = await producer.send_and_wait(
                    self.topics.answers, record.value, key=record.key, partition=p,
                    timestamp_ms=record.timestamp, headers=headers,
                )  # fmt: skip
                kind = wanted[(p, answer_id)]
                requests.append(RepairRequest(kind, p, answer_id, offset, int(meta.offset)))
        finally:
            await producer.stop()
        return requests

    def _retirement_line(self) -> None:
        """The ledger's retirement line now, as a worker with these settings draws it."""
        line = retire_before_ms(
            int(utc_now().timestamp() * 1000),
            self.settings.token_leeway_seconds * 1000,
            self.settings.ledger_keep_seconds * 1000,
        )
        for facts in self._facts.values():
            facts.retire_before_ms = line

    # -- reading -------------------------------------------------------------------------

    def _partition(self, p: int) -> PartitionFacts:
        facts = self._facts.get(p)
        if facts is None:
            facts = self._facts[p] = PartitionFacts(p)
        return facts

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is not None:
            return self._consumer
        consumer = clients.consumer(
            self.settings.connection,
            client_id="turnlog-audit",
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_poll_records=5000,
            fetch_max_wait_ms=20,
        )
        try:
            await consumer.start()
            tps = []
            for topic in self._roles:
                parts = await self._partitions_of(consumer, topic)
                tps += [TopicPartition(topic, p) for p in parts]
            consumer.assign(tps)
            starts = await consumer.beginning_offsets(tps)
            for tp in tps:
                consumer.seek(tp, starts[tp])
                self._partition(tp.partition)
            #: retention-limited outputs that have lost records: their first record dates the
            #: horizon of what they can vouch for.
            self._aged = {
                tp
                for tp in tps
                if starts[tp] > 0 and self._roles[tp.topic] in ("resumed", "rejections")
            }
        except BaseException:
            await close_consumer(consumer)
            raise
        self._consumer = consumer
        return consumer

    async def _partitions_of(self, consumer: AIOKafkaConsumer, topic: str) -> list[int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(self.timeout, 30.0)
        while True:
            found = consumer.partitions_for_topic(topic)
            if found:
                return sorted(found)
            if loop.time() > deadline:
                raise BrokerUnavailable(f"no metadata for topic {topic}: does it exist?")
            await refresh_metadata(consumer)
            await asyncio.sleep(0.1)

    async def _read_to_end(self, consumer: AIOKafkaConsumer, deadline: float) -> None:
        tps = list(consumer.assignment())
        ends = await consumer.end_offsets(tps)
        loop = asyncio.get_running_loop()
        while True:
            behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
            if not behind:
                return
            if loop.time() > deadline:
                raise BrokerUnavailable(f"the audit did not reach the end of {behind[:3]}")
            batch = await consumer.getmany(*behind, timeout_ms=200)
            for tp, records in batch.items():
                self._take(tp, records)

    def _take(self, tp: TopicPartition, records: Iterable[Any]) -> None:
        role = self._roles[tp.topic]
        facts = self._partition(tp.partition)
        for record in records:
            place = Place(tp.partition, record.offset, int(record.timestamp or 0))
            if tp in self._aged and tp not in self._first_seen:
                self._first_seen.add(tp)
                facts.horizon_ms = max(facts.horizon_ms or 0, place.timestamp_ms)
            if role == "pauses":
                self._pause_key(facts, record, place)
            elif record.value is None:
                continue  # a tombstone (a forgotten thread's key)
            elif role == "answers":
                facts.answers.append(_answer(tp.topic, record, place))
            else:
                self._output(facts, role, record.value, place)

    @staticmethod
    def _pause_key(facts: PartitionFacts, record: Any, place: Place) -> None:
        if record.key is None:
            return
        try:
            key = split_key(record.key)
        except DecodeError:
            return
        facts.pause_keys.setdefault(key, []).append((place.timestamp_ms, record.value is None))

    @staticmethod
    def _output(facts: PartitionFacts, role: str, value: bytes, place: Place) -> None:
        try:
            event = decode(value)
        except DecodeError as exc:
            facts.undecodable.append((role, place, f"{exc.reason}: {exc}"))
            return
        if role == "consumptions" and isinstance(event, TokenConsumed):
            facts.consumed.append((place, event))
        elif role == "resumed" and isinstance(event, TurnResumed):
            facts.resumed.append((place, event))
        elif role == "resumed" and isinstance(event, PauseExpired):
            facts.expired.append((place, event))
        elif role == "rejections" and isinstance(event, AnswerRejected):
            facts.rejected.append((place, event))
        else:
            facts.undecodable.append((role, place, f"a {type(event).__name__} has no place here"))


async def _record_at(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> Any:
    """The record at ``offset`` of ``tp``, read again; the consumer goes back to where it was."""
    back = await consumer.position(tp)
    consumer.seek(tp, offset)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30.0
        while loop.time() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=1)
            for record in batch.get(tp, []):
                if record.offset == offset:
                    return record
        raise BrokerUnavailable(f"could not read {tp.topic}[{tp.partition}]@{offset} again")
    finally:
        consumer.seek(tp, back)


def _answer(topic: str, record: Any, place: Place) -> AnswerSeen:
    """An answers record as the worker's refusal would name it: by the value's answer id, or
    -- for bytes that are no answer -- by ``topic:partition:offset``."""
    try:
        answer = decode(record.value, AnswerSubmitted)
    except DecodeError:
        try:
            claim = decode(record.value, ContinuationRequested)
        except DecodeError:
            return AnswerSeen(place, clip(f"{topic}:{place.partition}:{place.offset}", ID_CHARS))
        # A claim on a resumed turn: judged by its own rule (one decision, one winner).
        return AnswerSeen(
            place, clip(claim.claim_id, ID_CHARS), claim.thread_id,
            claim.token_id or None, claim_action=claim.action,
        )  # fmt: skip
    token_id: str | None
    expires_at_ms: int | None = None
    try:
        claims = peek_claims(answer.token)
        jti, exp = claims.get("jti"), claims.get("exp")
        token_id = jti if isinstance(jti, str) else None
        if isinstance(exp, int) and not isinstance(exp, bool):
            expires_at_ms = exp * 1000
    except Exception:  # noqa: BLE001 - any unreadable token: the audit names no token
        token_id = None
    # Clipped as the worker clips what it echoes, so a long id still finds its refusal.
    answer_id = clip(answer.answer_id, ID_CHARS)
    return AnswerSeen(place, answer_id, answer.thread_id, token_id, expires_at_ms)
