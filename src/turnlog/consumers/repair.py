"""Repair requests: how an outcome that a partly visible transaction lost is written again,
by the partition's owner, exactly once.

A broker can acknowledge a transaction's commit and still lose a marker of one of its
partitions (``docs/guarantees.md``: KAFKA-20734 on a lone broker in controlled shutdown). What
that leaves is found by ``turnlog audit``: a token spent whose resumed turn is not on the log, a
resumed turn whose consumption is not, an answer below the committed offset with neither.

``turnlog audit --heal`` asks for the repair by publishing the answer again -- the same key and
value, on the same answers partition -- with the :data:`REPAIR_HEADER` header. The request is
thus read by whoever owns the partition now, in its fenced transaction with the input offset,
so a repair is made once even if the auditor asks twice or the owner dies half-way. The owner
trusts nothing the request says: it reads its own ledger and the resumed partition (from
shortly before the answer's timestamp) and writes only what is missing (see
:meth:`~turnlog.consumers.handler.AnswerHandler.repair`). A tagged record that is a new answer
is handled as any answer, at the time it is read: the header gains a publisher nothing.

Why this and not a check at every take, or a periodic one: the audit reads whole partitions of
the output topics, which grows with history; a take must stay quick at any size (failover), and
the answer path must not pay for a fault that is rare. The request costs nothing until there is
something to repair, and the one thing the answer path does is look at a record's headers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition

from turnlog.consumers.screening import ID_CHARS, clip
from turnlog.contracts.events import TurnResumed
from turnlog.errors import BrokerUnavailable, DecodeError
from turnlog.kafka import clients
from turnlog.kafka.reader import close_consumer
from turnlog.wire.codec import decode

#: The header that marks an answers record as a repair request.
REPAIR_HEADER = "turnlog-repair"
#: How far before the answer's timestamp the resumed partition is searched: the resumed turn
#: was written after the answer was published, by any clock skew between producer and worker.
LOOK_BACK_MS = 10 * 60 * 1000


def is_repair(record: Any) -> bool:
    """Whether an answers record carries the repair header (its value is ignored)."""
    headers = getattr(record, "headers", None)
    if not headers:
        return False
    return any(key == REPAIR_HEADER for key, _ in headers)


async def resumes_on_log(
    connection: clients.Target,
    topic: str,
    partition: int,
    since_ms: int,
    *,
    timeout: float = 60.0,
) -> frozenset[tuple[str, str]]:
    """(token id, answer id) of every ``TurnResumed`` on ``topic[partition]`` (read_committed)
    from ``since_ms`` minus :data:`LOOK_BACK_MS` to its end now."""
    consumer = clients.consumer(
        connection,
        client_id="turnlog-repair",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
    )
    found: set[tuple[str, str]] = set()
    try:
        await consumer.start()
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        start = max(0, since_ms - LOOK_BACK_MS)
        at = (await consumer.offsets_for_times({tp: start})).get(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        if at is None:
            return frozenset()  # nothing on the partition since then
        consumer.seek(tp, at.offset)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while await consumer.position(tp) < end:
            if loop.time() > deadline:
                raise BrokerUnavailable(f"the repair's read of {topic}[{partition}] timed out")
            batch = await consumer.getmany(tp, timeout_ms=200)
            for record in batch.get(tp, []):
                if record.value is None:
                    continue
                try:
                    event = decode(record.value)
                except DecodeError:
                    continue
                if isinstance(event, TurnResumed):
                    found.add((event.token_id, clip(event.answer_id, ID_CHARS)))
    finally:
        await close_consumer(consumer)
    return frozenset(found)
