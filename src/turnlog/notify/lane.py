"""One webhook's lane: its consumer group over pauses, resumed and rejections (and consumptions,
for the answers held by a pause of several calls), its deliveries in log order, and a commit
after each delivery.

The lane reads the partitions it is given (``assign``, no group membership: the group holds
its offsets, nothing else), ``read_committed``, from the group's committed offsets. Each record
is delivered (or given up after its retries) and then its offset committed, one record at a
time: a process killed between a delivery and its commit posts that one notice again at the
next start -- with the same idempotency key -- and no other. A lane that has never committed
starts at the topics' ends and commits that start at once, so notices of the past are not sent
and a lane killed before its first delivery does not skip what came meanwhile.

Reminders ride on the same commits: the commit of ``pauses[p]`` carries as its metadata the
mark of the last reminder handled for partition p (:mod:`~turnlog.notify.book`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

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
from turnlog.notify.metrics import NotifyMetrics
from turnlog.notify.sender import Post, deliver
from turnlog.settings import Settings
from turnlog.wire.codec import decode

log = logging.getLogger("turnlog.notify")

#: The longest a lane waits on the log before looking at its reminders again.
_IDLE_POLL_MS = 500


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
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.config = config
        self.sink = sink
        self.book = book
        self.topics = TopicSet.from_settings(settings)
        self.group_id = config.group_id(settings.application_id, sink)
        self.reminders = Reminders(config.remind_before, {})
        self.delivered = 0
        self._post = post
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

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver what the log says and the reminders as they fall due, until ``stop``."""
        while not stop.is_set():
            await self._remind(stop)
            wait_ms = _IDLE_POLL_MS
            due = self.reminders.next_due()
            if due is not None:
                until = (due - self._now()).total_seconds() * 1000
                wait_ms = max(0, min(wait_ms, int(until) + 1))
            batch = await self._consumer.getmany(timeout_ms=wait_ms)
            for tp, records in batch.items():
                for record in records:
                    if stop.is_set():
                        return  # the rest was not delivered, so not committed: read again
                    await self._handle(tp, record)

    async def _remind(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            due = self.reminders.pop_due(self._now(), self.book)
            if due is None:
                return
            self._metrics.reminders_owed.dec()
            if due.facts is not None:
                await self._send(payload.reminder(due.facts, self._now()))
            self.reminders.done(due)
            await self._commit(TopicPartition(self.topics.pauses, due.partition))

    def _notice(self, record: Record) -> list[payload.Notice] | payload.Notice | None:
        """What ``record`` tells, learning from it on the way (pauses, closed tokens)."""
        if record.value is None:
            if record.topic == self.topics.pauses:
                self.book.forget(record.key)
            return None
        try:
            event = decode(record.value)
        except DecodeError as exc:
            self._metrics.skipped.inc()
            where = f"{record.topic}[{record.partition}]@{record.offset}"
            log.warning("notifier: %s skipped: %s", where, exc)
            return None
        if isinstance(event, PauseRecorded):
            for view in payload.each_call(event):  # each call of a pause of several waits
                facts = payload.facts_of(view)
                self.book.learn(facts, record.partition, record.key)
                if self.book.is_open(facts.token_id) and self.reminders.offer(
                    facts, record.partition
                ):
                    self._metrics.reminders_owed.inc()
            return payload.recorded_calls(event)
        if isinstance(event, TurnResumed | PauseExpired):
            known_pause = self.book.pauses.get(event.token_id)
            self.book.close(event.token_id)
            if isinstance(event, TurnResumed):  # a group's turn closes every call of it
                for answer in event.answers:
                    self.book.close(str(answer["token_id"]))
            return payload.closed(event, known_pause)
        if isinstance(event, AnswerRejected):
            known = self.book.pauses.get(event.token_id) if event.token_id else None
            return payload.closed(event, known)
        if isinstance(event, TokenConsumed):
            # Told of by the TurnResumed or AnswerRejected that follows, except an answer held
            # for its pause's other calls: that call no longer waits on anyone (no reminder),
            # and its turn's notice comes when the last call is answered.
            self.book.close(event.token_id)
            return None
        self._metrics.skipped.inc()
        return None

    async def _handle(self, tp: TopicPartition, record: Record) -> None:
        found = self._notice(record)
        for notice in [] if found is None else found if isinstance(found, list) else [found]:
            await self._send(notice)
        self._done[tp] = record.offset + 1
        await self._commit(tp)

    async def _send(self, notice: payload.Notice) -> None:
        inbox = self.config.inbox_url
        data = payload.slack_body(notice, inbox) if self.sink.slack else payload.body(notice, inbox)
        result = await deliver(
            self._post,
            self.sink.url,
            data,
            event_id=notice.event_id,
            kind=notice.kind,
            secrets=self.config.secrets,
            backoff=self.config.backoff,
            timeout=self.config.timeout_seconds,
        )
        self._metrics.attempts.inc(result.attempts)
        if result.delivered:
            self.delivered += 1
            self._metrics.notices.labels(notice.kind, "delivered").inc()
            log.info(
                "notifier: %s %s delivered to %s (attempt %d)",
                notice.kind,
                notice.event_id,
                self.sink.describe(),
                result.attempts,
            )
            return
        self._metrics.notices.labels(notice.kind, "failed").inc()
        log.warning(
            "notifier: %s %s (thread %s) not delivered to %s after %d attempt(s): %s; going on",
            notice.kind,
            notice.event_id,
            notice.thread_id,
            self.sink.describe(),
            result.attempts,
            result.error,
        )
