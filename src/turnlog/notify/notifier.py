"""The notifier as one component: the pauses replayed from the log, then one lane per webhook.

The replay reads the compacted pauses and consumptions topics from their earliest offsets to
their ends (``read_committed``), keeping a few hundred bytes per pause -- who it is, what it
asks, when it closes -- and the tokens already spent. That is what a reminder is owed from
after a restart, and what a resumed or refused notice says of its pause. Each lane starts from
its own copy, so a webhook that lags behind learns in its own time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from types import TracebackType

from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from turnlog.contracts.events import PauseRecorded, TokenConsumed
from turnlog.errors import DecodeError
from turnlog.kafka import clients
from turnlog.kafka.outage import ride_out
from turnlog.kafka.reader import LogReader, Record
from turnlog.kafka.topics import TopicSet, ensure_topics
from turnlog.notify import undelivered
from turnlog.notify.book import Book
from turnlog.notify.config import NotifyConfig
from turnlog.notify.lane import Lane
from turnlog.notify.metrics import notify_metrics
from turnlog.notify.payload import each_call, facts_of
from turnlog.notify.sender import HttpPoster, Post
from turnlog.notify.undelivered import Outbox
from turnlog.notify.waiting import Backlog
from turnlog.settings import Settings
from turnlog.wire.codec import decode

log = logging.getLogger("turnlog.notify")


async def ready(settings: Settings, topics: TopicSet) -> None:
    """The topic set exists (created if this deployment lets processes create topics)."""

    async def attempt() -> None:
        admin = clients.admin(settings, client_id="turnlog-notify")
        try:
            await admin.start()
            await ensure_topics(admin, topics, create=settings.create_topics)
        finally:
            await admin.close()

    await ride_out(attempt, settings=settings, who="notifier readiness")


async def replay(settings: Settings, topics: TopicSet) -> tuple[Book, list[int]]:
    """The pauses and spent tokens the log holds now, and the topics' partitions."""
    book = Book()
    reader = LogReader(settings, client_id="turnlog-notify-replay")
    try:
        await reader.start()
        partitions = await reader.partitions_of(topics.pauses)
        names = (topics.pauses, topics.consumptions)
        await reader.assign({TopicPartition(t, p): None for t in names for p in partitions})

        async def apply(records: Sequence[Record]) -> None:
            for record in records:
                if record.value is None:
                    if record.topic == topics.pauses:
                        book.forget(record.key)
                    continue
                try:
                    event = decode(record.value)
                except DecodeError:
                    continue
                if isinstance(event, PauseRecorded):
                    views = each_call(event)
                    calls = tuple(view.token_id for view in views)
                    for view in views:
                        facts = facts_of(view)
                        book.learn(facts, record.partition, record.key, record.offset, calls)
                elif isinstance(event, TokenConsumed):
                    book.close(event.token_id)

        await reader.read_to_end(apply)
    finally:
        await reader.stop()
    return book, partitions


class Notifier:
    """``async with Notifier(settings, config) as n: await n.run()``; ``request_stop()`` ends
    the run after the delivery in hand (its commit included)."""

    def __init__(
        self,
        settings: Settings,
        config: NotifyConfig,
        *,
        post: Post | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.topics = TopicSet.from_settings(settings)
        self.lanes: list[Lane] = []
        self.pauses_known = 0
        self._own_poster = HttpPoster() if post is None else None
        self._post: Post = post if post is not None else self._own_poster  # type: ignore[assignment]
        self._metrics = notify_metrics(registry)
        self._stop = asyncio.Event()
        self._outbox = Outbox(settings)

    @property
    def waiting(self) -> int:
        """Notices kept for a webhook that has not taken them yet, over every webhook."""
        return sum(len(lane.courier.backlog) for lane in self.lanes)

    def oldest_waiting_seconds(self) -> float:
        return max((lane.courier.oldest_seconds() for lane in self.lanes), default=0.0)

    async def start(self) -> None:
        await ready(self.settings, self.topics)
        book, partitions = await replay(self.settings, self.topics)
        await undelivered.ensure(self.settings, len(partitions))
        await self._outbox.start()
        self.pauses_known = len(book.pauses)
        for sink in self.config.sinks:
            group = self.config.group_id(self.settings.application_id, sink)
            lane = Lane(
                self.settings,
                self.config,
                sink,
                book.copy(),
                self._post,
                self._metrics,
                partitions=partitions,
                outbox=self._outbox,
                backlog=Backlog(await undelivered.load(self.settings, group)),
            )
            self.lanes.append(lane)
            await lane.start()
        self._metrics.waiting.set_function(lambda: self.waiting)
        self._metrics.oldest_waiting.set_function(self.oldest_waiting_seconds)

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        tasks = [asyncio.create_task(lane.run(self._stop)) for lane in self.lanes]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a lane that failed (the broker gone too long) ends the run
        finally:
            self._stop.set()
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        for lane in self.lanes:
            await lane.stop()
        await self._outbox.stop()
        if self._own_poster is not None:
            await self._own_poster.aclose()

    async def __aenter__(self) -> Notifier:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
