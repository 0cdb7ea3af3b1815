"""One webhook's lane: its consumer group over pauses, resumed and rejections (and consumptions,
for the answers held by a pause of several calls), its deliveries in log order, and a commit
after each record.

The lane reads the partitions it is given (``assign``, no group membership: the group holds
its offsets, nothing else), ``read_committed``, from the group's committed offsets. Each
record's notices are delivered -- or kept on the undelivered topic to be tried again
(:mod:`~turnlog.notify.courier`) -- and then its offset committed, one record at a time: a
process killed between a delivery and its commit posts that one notice again at the next
start -- with the same idempotency key -- and no other.

A pause's notices keep their order although they come from different topics: a closing record
(resumed, expired, refused) whose pause's record the lane has not handled yet (its offset on
``pauses`` is known from the replay) waits -- the lane reads it again once it has.

A lane that has never committed starts at the topics' ends and commits that start at once, so
notices of the past are not sent and a lane killed before its first delivery does not skip
what came meanwhile.

Reminders ride on the same commits: the commit of ``pauses[p]`` carries as its metadata the
mark of the last reminder handled for partition p (:mod:`~turnlog.notify.book`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Final

from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from turnlog.clock import utc_now
from turnlog.contracts.events import (
    AnswerRejected,
    PauseExpired,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.errors import DecodeError, TopicMismatch
from turnlog.kafka import clients
from turnlog.kafka.outage import attempt_timeout, ride_out
from turnlog.kafka.reader import Record, close_consumer
from turnlog.kafka.topics import TopicSet
from turnlog.notify import payload
from turnlog.notify.book import Book, Mark, Reminders
from turnlog.notify.config import NotifyConfig, Sink
from turnlog.notify.courier import Courier
from turnlog.notify.metrics import NotifyMetrics
from turnlog.notify.sender import Post
from turnlog.notify.undelivered import Outbox
from turnlog.notify.waiting import Backlog
from turnlog.settings import Settings
from turnlog.wire.codec import decode

log = logging.getLogger("turnlog.notify")

#: The longest a lane waits on the log before looking at its reminders again.
_IDLE_POLL_MS = 500
#: What :meth:`Lane._notice` says of a closing record whose pause's record is still unread.
_HOLD: Final = object()


class Lane:
    def __init__(
        self,
        settings: Settings,
        config: NotifyConfig,
        sink: Sink,
        book: Book,
        post: Post,
        metrics: NotifyMetrics,
        *,
        partitions: list[int],
        outbox: Outbox,
        backlog: Backlog,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.config = config
        self.sink = sink
        self.book = book
        self.topics = TopicSet.from_settings(settings)
        self.group_id = config.group_id(settings.application_id, sink)
        self.reminders = Reminders(config.remind_before, {})
        self.courier = Courier(self.group_id, sink, config, post, outbox, metrics, backlog, now=now)
        self._metrics = metrics
        self._partitions = partitions
        self._now = now
        self._done: dict[TopicPartition, int] = {}
        self._consumer = clients.consumer(
            settings,
            client_id="turnlog-notify",
            group_id=self.group_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_poll_records=100,
            fetch_max_wait_ms=100,
        )
        self._started = False

    @property
    def _tps(self) -> list[TopicPartition]:
        topics = (
            self.topics.pauses,
            self.topics.resumed,
            self.topics.rejections,
            self.topics.consumptions,
        )
        return [TopicPartition(t, p) for t in topics for p in self._partitions]

    async def start(self) -> None:
        """Join nothing, read the group's offsets and marks back, position the consumer."""
        await self._consumer.start()
        self._started = True
        await self._position()
        for facts, partition in self.book.open_pauses():
            # A pause this lane has not handled yet is offered when it does (its notice first).
            if self._handled(facts.token_id):
                self.reminders.offer(facts, partition)
        self._metrics.reminders_owed.inc(len(self.reminders))

    async def _committed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        admin = clients.admin(self.settings, client_id="turnlog-notify")
        try:
            await admin.start()
            found: dict[TopicPartition, OffsetAndMetadata]
            found = await admin.list_consumer_group_offsets(self.group_id, partitions=self._tps)
            return found
        finally:
            await admin.close()

    async def _position(self) -> None:
        tps = self._tps
        self._consumer.assign(tps)
        committed = await ride_out(
            self._committed, settings=self.settings, who=f"notifier {self.sink.describe()}"
        )
        fresh = {tp for tp in tps if tp not in committed or committed[tp].offset < 0}
        ends = await self._consumer.end_offsets(tps)
        first_mark = Mark(self._now())
        for tp in tps:
            if tp not in fresh and committed[tp].offset > ends[tp]:
                raise TopicMismatch(
                    "notifier_offsets_beyond_end",
                    f"group {self.group_id} committed {tp.topic}[{tp.partition}] up to "
                    f"{committed[tp].offset}, beyond its end {ends[tp]}: the topic was made "
                    "anew; delete the group to start afresh",
                )
            if tp in fresh:
                self._done[tp] = ends[tp]
                if tp.topic == self.topics.pauses:
                    self.reminders.marks[tp.partition] = first_mark
            else:
                self._done[tp] = committed[tp].offset
                if tp.topic == self.topics.pauses:
                    self.reminders.marks[tp.partition] = Mark.decode(committed[tp].metadata)
            self._consumer.seek(tp, self._done[tp])
        for tp in sorted(fresh):
            await self._commit(tp)

    async def stop(self) -> None:
        self._metrics.reminders_owed.dec(len(self.reminders))
        self._started = False
        await close_consumer(self._consumer)

    def _offset(self, tp: TopicPartition) -> tuple[int, str]:
        meta = self.reminders.metadata(tp.partition) if tp.topic == self.topics.pauses else ""
        return (self._done[tp], meta)

    async def _commit(self, tp: TopicPartition) -> None:
        async def attempt() -> None:
            await self._consumer.commit({tp: self._offset(tp)})

        await ride_out(
            attempt,
            settings=self.settings,
            who=f"notifier commit {self.sink.describe()}",
            timeout=attempt_timeout(self.settings),
        )

    @property
    def delivered(self) -> int:
        return self.courier.delivered

    def _handled(self, token_id: str) -> bool:
        """Whether this lane has handled the record of ``token_id``'s pause (unknown: yes)."""
        offset = self.book.offsets.get(token_id, -1)
        partition = self.book.partitions.get(token_id)
        if offset < 0 or partition is None:
            return True
        return self._done.get(TopicPartition(self.topics.pauses, partition), 0) > offset

    def _rank(self, tp: TopicPartition) -> int:
        """Pauses first, then consumptions, then what closes pauses: a batch that holds a
        pause and its resume tells them in that order."""
        return {self.topics.pauses: 0, self.topics.consumptions: 1}.get(tp.topic, 2)

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver what the log says and the reminders as they fall due, and try again what
        waits, until ``stop``."""
        while not stop.is_set():
            await self._remind(stop)
            if (retry_at := self.courier.next_due()) is not None and retry_at <= self._now():
                await self.courier.retry(stop)
            wait_ms = _IDLE_POLL_MS
            for due in (self.reminders.next_due(), self.courier.next_due()):
                if due is not None:
                    until = (due - self._now()).total_seconds() * 1000
                    wait_ms = max(0, min(wait_ms, int(until) + 1))
            batch = await self._consumer.getmany(timeout_ms=wait_ms)
            for tp, records in sorted(batch.items(), key=lambda item: self._rank(item[0])):
                for record in records:
                    if stop.is_set():
                        return  # the rest was not delivered, so not committed: read again
                    if not await self._handle(tp, record):
                        self._consumer.seek(tp, record.offset)  # its pause first: read again
                        break

    async def _remind(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            due = self.reminders.pop_due(self._now(), self.book)
            if due is None:
                return
            self._metrics.reminders_owed.dec()
            if due.facts is not None:
                notice = payload.reminder(due.facts, self._now())
                await self.courier.send(notice, give_up_at=due.facts.deadline)
            self.reminders.done(due)
            await self._commit(TopicPartition(self.topics.pauses, due.partition))

    async def _notice(self, record: Record) -> list[payload.Notice] | object:
        """What ``record`` tells, learning from it on the way (pauses, closed tokens);
        ``_HOLD`` when it closes a pause whose own record this lane has not handled yet."""
        if record.value is None:
            if record.topic == self.topics.pauses:
                await self.courier.forget(self.book.forget(record.key))
            return []
        try:
            event = decode(record.value)
        except DecodeError as exc:
            self._metrics.skipped.inc()
            where = f"{record.topic}[{record.partition}]@{record.offset}"
            log.warning("notifier: %s skipped: %s", where, exc)
            return []
        if isinstance(event, PauseRecorded):
            views = payload.each_call(event)  # each call of a pause of several waits
            calls = tuple(view.token_id for view in views)
            for view in views:
                facts = payload.facts_of(view)
                self.book.learn(facts, record.partition, record.key, record.offset, calls)
                if self.book.is_open(facts.token_id) and self.reminders.offer(
                    facts, record.partition
                ):
                    self._metrics.reminders_owed.inc()
            return payload.recorded_calls(event)
        if isinstance(event, TurnResumed | PauseExpired):
            # Every call the event closes hears of it, each in a notice with its own id.
            tokens = payload.closing_calls(event, self.book.calls.get(event.token_id, ()))
            if not all(self._handled(t) for t in tokens):
                return _HOLD
            for token in tokens:
                self.book.close(token)
            notices = [
                payload.closed(event, self.book.pauses.get(t), call=t, calls=len(tokens))
                for t in tokens
            ]
            return [n for n in notices if n is not None]
        if isinstance(event, AnswerRejected):
            known = self.book.pauses.get(event.token_id) if event.token_id else None
            if event.token_id and not self._handled(event.token_id):
                return _HOLD
            refused = payload.closed(event, known)
            return [] if refused is None else [refused]
        if isinstance(event, TokenConsumed):
            # Told of by the TurnResumed or AnswerRejected that follows, except an answer held
            # for its pause's other calls: that call no longer waits on anyone (no reminder),
            # and its turn's notice comes when the last call is answered.
            self.book.close(event.token_id)
            return []
        self._metrics.skipped.inc()
        return []

    async def _handle(self, tp: TopicPartition, record: Record) -> bool:
        """Tell what ``record`` tells and commit it; ``False`` (nothing done) when it must
        wait for its pause's record."""
        found = await self._notice(record)
        if not isinstance(found, list):
            return False
        for notice in found:
            await self.courier.send(notice)
        self._done[tp] = record.offset + 1
        await self._commit(tp)
        return True
