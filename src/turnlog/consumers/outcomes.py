"""What became of one answer: read from the worker's output topics, by the answer's id.

The worker decides every answer exactly once and writes the decision where a reader already
looks -- ``TurnResumed`` on resumed, ``AnswerRejected`` (with the refused rule's name) on
rejections -- so a caller waits for its own answer's fate without a side channel: it reads both
topics (``read_committed``) from their beginning, only the thread's partition when it knows the
thread, until the answer's record appears or its deadline passes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import TopicPartition

from turnlog.contracts.events import AnswerRejected, TurnResumed
from turnlog.errors import DecodeError
from turnlog.kafka.partitioning import partition_for
from turnlog.kafka.reader import LogReader
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings
from turnlog.wire.codec import decode


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    """What became of one answer: ``resumed`` (the turn, answer folded in) or ``rejected``.

    Exactly one of the two is set. ``reason`` names the refused rule (``response_invalid``,
    ``already_consumed``, ...), as the worker wrote it on the rejections topic.
    """

    answer_id: str
    resumed: TurnResumed | None = None
    rejected: AnswerRejected | None = None

    @property
    def accepted(self) -> bool:
        return self.resumed is not None

    @property
    def reason(self) -> str | None:
        return self.rejected.reason if self.rejected is not None else None

    @property
    def detail(self) -> str | None:
        return self.rejected.detail if self.rejected is not None else None


async def read_outcome(
    settings: Settings,
    topics: TopicSet,
    answer_id: str,
    *,
    thread_id: str | None = None,
    timeout: float = 30.0,
) -> AnswerOutcome:
    """The outcome of ``answer_id``, or :class:`TimeoutError` after ``timeout`` seconds."""
    reader = LogReader(settings.connection, client_id="turnlog-outcome")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        await asyncio.wait_for(reader.start(), timeout)
        partitions = await reader.partitions_of(topics.resumed, timeout=timeout)
        if thread_id:
            partitions = [partition_for(thread_id, len(partitions))]
        await reader.assign(
            {
                TopicPartition(topic, p): None
                for topic in (topics.resumed, topics.rejections)
                for p in partitions
            }
        )
        while loop.time() < deadline:
            left = max(1, int((deadline - loop.time()) * 1000))
            for record in await reader.poll(timeout_ms=min(200, left)):
                found = _outcome_of(record.value, answer_id)
                if found is not None:
                    return found
    finally:
        await reader.stop()
    raise TimeoutError(
        f"no outcome for answer {answer_id!r} within {timeout:g}s: is a worker running?"
    )


def _outcome_of(value: bytes | None, answer_id: str) -> AnswerOutcome | None:
    if value is None:
        return None
    try:
        event = decode(value)
    except DecodeError:
        return None
    if isinstance(event, TurnResumed) and event.answer_id == answer_id:
        return AnswerOutcome(answer_id, resumed=event)
    if isinstance(event, AnswerRejected) and event.answer_id == answer_id:
        return AnswerOutcome(answer_id, rejected=event)
    return None
