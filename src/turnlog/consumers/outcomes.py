"""What became of one answer: read from the worker's output topics, by the answer's id.

The worker decides every answer exactly once and writes the decision where a reader already
looks -- ``TurnResumed`` on resumed, ``AnswerRejected`` (with the refused rule's name) on
rejections, and for an answer to one call of a pause of several whose other calls still wait,
its token spent as ``held`` on consumptions -- so a caller waits for its own answer's fate
without a side channel: it reads the three topics (``read_committed``) from their beginning,
only the thread's partition when it knows the thread, until the answer's record appears or its
deadline passes.

A held answer is not final: the group resumes once its last call is answered, and that turn
carries every call's answer. So nothing is decided before the topics are read to the end they
had when the read began: an answer whose group has resumed since is ``resumed`` (the group's
turn), one whose group still waits is ``held``, with the calls still open -- read from the
pause's record on the pauses topic and the consumptions of its calls' tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from turnlog.consumers.content_keys import opened
from turnlog.contracts.events import AnswerRejected, PauseRecorded, TokenConsumed, TurnResumed
from turnlog.contracts.group import calls_of
from turnlog.contracts.ledger import Outcome
from turnlog.errors import DecodeError
from turnlog.kafka.partitioning import partition_for, pause_key
from turnlog.kafka.reader import LogReader
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings
from turnlog.wire.codec import decode


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    """What became of one answer: ``resumed`` (the turn, answer folded in), ``held``, or
    ``rejected``.

    Exactly one of the three is set. ``held``: the answer was taken for one call of a pause of
    several, and the turn resumes when the calls in ``waiting`` (their call ids) are answered
    too; asked again after that, the outcome is the group's ``resumed`` turn. ``reason`` names
    the refused rule (``response_invalid``, ``already_consumed``, ...), as the worker wrote it
    on the rejections topic.
    """

    answer_id: str
    resumed: TurnResumed | None = None
    rejected: AnswerRejected | None = None
    held: TokenConsumed | None = None
    #: For a held answer: the calls of its pause still waiting for an answer, in call order.
    waiting: tuple[str, ...] = ()

    @property
    def accepted(self) -> bool:
        """The worker took the answer: it resumed the turn, or holds it for its group."""
        return self.resumed is not None or self.held is not None

    @property
    def reason(self) -> str | None:
        return self.rejected.reason if self.rejected is not None else None

    @property
    def detail(self) -> str | None:
        return self.rejected.detail if self.rejected is not None else None


@dataclass
class Decisions:
    """What the records read so far say of one answer (no I/O: fed decoded events)."""

    answer_id: str
    resumed: TurnResumed | None = None
    rejected: AnswerRejected | None = None
    held: TokenConsumed | None = None
    #: Every token the consumptions read so far name (spent: resumed, held or expired).
    spent: set[str] = field(default_factory=set)

    def add(self, event: object) -> None:
        if isinstance(event, TurnResumed) and self.answer_id in answer_ids(event):
            self.resumed = event
        elif isinstance(event, AnswerRejected) and event.answer_id == self.answer_id:
            self.rejected = event
        elif isinstance(event, TokenConsumed):
            self.spent.add(event.token_id)
            if event.answer_id == self.answer_id and event.outcome == Outcome.HELD:
                self.held = event

    def outcome(self) -> AnswerOutcome | None:
        """The answer's fate as read so far: its group's resumed turn before its hold, its
        hold before a refusal (a copy of a taken answer refused later is not its fate)."""
        if self.resumed is not None:
            return AnswerOutcome(self.answer_id, resumed=self.resumed)
        if self.held is not None:
            return AnswerOutcome(self.answer_id, held=self.held)
        if self.rejected is not None:
            return AnswerOutcome(self.answer_id, rejected=self.rejected)
        return None


def answer_ids(turn: TurnResumed) -> tuple[str, ...]:
    """The answers a resumed turn folds in: its own, and every call's of a pause of several."""
    return (turn.answer_id, *(str(a.get("answer_id", "")) for a in turn.answers))


def waiting_calls(pause: PauseRecorded, spent: set[str]) -> tuple[str, ...]:
    """The calls of ``pause`` whose token no consumption names yet, in the order of the calls."""
    return tuple(
        call.tool_call_id or call.interrupt_id
        for call in calls_of(pause)
        if call.token_id not in spent
    )


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
    seen = Decisions(answer_id)
    try:
        await asyncio.wait_for(reader.start(), timeout)
        partitions = await reader.partitions_of(topics.resumed, timeout=timeout)
        count = len(partitions)
        if thread_id:
            partitions = [partition_for(thread_id, count)]
        watched = (topics.resumed, topics.rejections, topics.consumptions)
        await reader.assign({TopicPartition(t, p): None for t in watched for p in partitions})
        ends = await reader.end_offsets()
        caught_up = False
        while loop.time() < deadline:
            left = max(1, int((deadline - loop.time()) * 1000))
            for record in await reader.poll(timeout_ms=min(200, left)):
                if record.value is not None:
                    with contextlib.suppress(DecodeError):  # the worker refused it by name
                        seen.add(decode(record.value))
            if not caught_up:
                caught_up = all([await reader.position(tp) >= end for tp, end in ends.items()])
            found = seen.outcome() if caught_up else None
            if found is not None and found.held is not None:
                pause = await _pause_of(reader, topics, found.held, count, deadline)
                waiting = () if pause is None else waiting_calls(pause, seen.spent)
                return AnswerOutcome(answer_id, held=found.held, waiting=waiting)
            if found is not None and found.resumed is not None and found.resumed.sealed:
                # A sealed turn (TURNLOG_SEAL) is handed out opened; its thread forgotten
                # since, ContentShredded says so.
                opened_turn = await opened(settings, topics, found.resumed)
                return AnswerOutcome(answer_id, resumed=opened_turn)
            if found is not None:
                return found
    finally:
        await reader.stop()
    raise TimeoutError(
        f"no outcome for answer {answer_id!r} within {timeout:g}s: is a worker running?"
    )


async def _pause_of(
    reader: LogReader, topics: TopicSet, held: TokenConsumed, count: int, deadline: float
) -> PauseRecorded | None:
    """The pause a held answer's token belongs to, from the thread's partition of the pauses
    topic (its record keyed by thread and checkpoint; the newest copy wins, as compaction's)."""
    tp = TopicPartition(topics.pauses, partition_for(held.thread_id, count))
    key = pause_key(held.thread_id, held.checkpoint_id)
    await reader.assign({tp: None})
    end = (await reader.end_offsets([tp]))[tp]
    loop = asyncio.get_running_loop()
    found: PauseRecorded | None = None
    while await reader.position(tp) < end and loop.time() < deadline:
        for record in await reader.poll(timeout_ms=200):
            if record.key != key or record.value is None:
                continue
            try:
                pause = decode(record.value, PauseRecorded)
            except DecodeError:
                continue
            if any(call.token_id == held.token_id for call in calls_of(pause)):
                found = pause
    return found
