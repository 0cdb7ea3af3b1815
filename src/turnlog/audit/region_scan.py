"""Reading two regions for the cross-region judgement (:mod:`turnlog.audit.regions`).

Each region's five topics are read from their first record to their ends, ``read_committed``
(an aborted transaction's records are no region's facts), with no consumer group and no store:
like ``turnlog audit``, the verdict depends on nothing a worker remembers.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from aiokafka import TopicPartition

from turnlog.audit.regions import Copy, Refusal, RegionFacts, RegionReport, Resume, judge_regions
from turnlog.consumers.screening import ID_CHARS, clip
from turnlog.contracts.events import AnswerRejected, AnswerSubmitted, PauseRecorded, TurnResumed
from turnlog.errors import BrokerUnavailable, DecodeError
from turnlog.kafka import clients
from turnlog.kafka.internals import refresh_metadata
from turnlog.kafka.reader import close_consumer
from turnlog.kafka.topics import TopicSet
from turnlog.tokens import peek_claims
from turnlog.wire.codec import decode


async def read_region(
    name: str,
    target: clients.Target,
    topics: TopicSet,
    timeout: float = 120.0,
    settle: float = 0.0,
) -> RegionFacts:
    """``name``'s facts: its five topics read to their ends now.

    ``settle``: how long to wait for the transactions still open on the region to end first.
    A ``read_committed`` reader stops at the first open transaction of a partition, so what a
    region wrote after it is invisible until the transaction commits or is aborted -- a region
    just back from a SIGKILL holds the transactions its killed writers had open (until their
    transaction timeout), and a MirrorMaker killed mid-transaction holds B's. Partitions still
    blocked after ``settle`` are named (:attr:`RegionFacts.unsettled`), not silently cut short.
    """
    facts = RegionFacts(name)
    roles = {
        topics.pauses: "pauses",
        topics.answers: "answers",
        topics.consumptions: "consumptions",
        topics.resumed: "resumed",
        topics.rejections: "rejections",
    }
    consumer = clients.consumer(
        target,
        client_id="turnlog-audit-regions",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        max_poll_records=5000,
        fetch_max_wait_ms=20,
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        await consumer.start()
        tps: list[TopicPartition] = []
        for topic in roles:
            while not consumer.partitions_for_topic(topic):
                if loop.time() > deadline:
                    raise BrokerUnavailable(f"{name}: no metadata for topic {topic}")
                await refresh_metadata(consumer)
                await asyncio.sleep(0.1)
            tps += [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await _settled_ends(target, consumer, tps, facts, loop.time() + settle)
        while True:
            behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
            if not behind:
                break
            if loop.time() > deadline:
                raise BrokerUnavailable(f"{name}: did not reach the end of {behind[:3]}")
            batch = await consumer.getmany(*behind, timeout_ms=200)
            for tp, records in batch.items():
                for record in records:
                    take(facts, roles[tp.topic], record)
    finally:
        await close_consumer(consumer)
    return facts


async def _settled_ends(
    target: clients.Target,
    consumer: Any,
    tps: list[TopicPartition],
    facts: RegionFacts,
    until: float,
) -> dict[TopicPartition, int]:
    """The last stable offsets once no transaction is open (or ``until`` passed): a partition
    whose last stable offset is below its high watermark has one open."""
    marks = clients.consumer(
        target, client_id="turnlog-audit-regions", group_id=None,
        isolation_level="read_uncommitted", enable_auto_commit=False,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    try:
        await marks.start()
        while True:
            stable = await consumer.end_offsets(tps)
            high = await marks.end_offsets(tps)
            blocked = [tp for tp in tps if stable[tp] < high[tp]]
            if not blocked or loop.time() >= until:
                facts.unsettled = [f"{tp.topic}[{tp.partition}]" for tp in blocked]
                return dict(stable)
            await asyncio.sleep(0.5)  # polling the offsets until the transactions end
    finally:
        await close_consumer(marks)


def take(facts: RegionFacts, role: str, record: Any) -> None:
    """One record of ``role`` into ``facts``."""
    value: bytes | None = record.value
    stamp = int(record.timestamp or 0)
    digest = b"" if value is None else hashlib.sha256(value).digest()
    facts.records.add(Copy(role, record.partition, record.key, digest, stamp))
    if value is None:
        return
    try:
        event = decode(value)
    except DecodeError:
        return  # not turnlog's to judge here (the region's own audit names it)
    if role == "pauses" and isinstance(event, PauseRecorded):
        facts.pauses.setdefault(event.token_id, stamp)
        for call in event.group:
            token = call.get("token_id")
            if isinstance(token, str):
                facts.pauses.setdefault(token, stamp)
    elif role == "answers" and isinstance(event, AnswerSubmitted):
        facts.answers.setdefault(clip(event.answer_id, ID_CHARS), (_token_of(event), stamp))
    elif role == "resumed" and isinstance(event, TurnResumed):
        facts.resumes.append(
            Resume(event.token_id, event.answer_id, event.event_id, _ms(event), stamp)
        )
    elif role == "rejections" and isinstance(event, AnswerRejected):
        facts.refusals.append(
            Refusal(
                event.answer_id, event.token_id, event.reason, event.event_id, _ms(event), stamp
            )
        )


def _ms(event: Any) -> int:
    return int(event.occurred_at.timestamp() * 1000)


def _token_of(answer: AnswerSubmitted) -> str | None:
    try:
        jti = peek_claims(answer.token).get("jti")
    except Exception:  # noqa: BLE001 - any unreadable token: no token named
        return None
    return jti if isinstance(jti, str) else None


async def audit_regions(
    source: clients.Target,
    target: clients.Target,
    topics: TopicSet,
    *,
    names: tuple[str, str] = ("A", "B"),
    timeout: float = 120.0,
    settle: float = 0.0,
) -> RegionReport:
    """Read region A (``source``, the one lost) and region B (``target``), and judge."""
    a, b = await asyncio.gather(
        read_region(names[0], source, topics, timeout, settle),
        read_region(names[1], target, topics, timeout, settle),
    )
    return judge_regions(a, b)
