"""One webhook's deliveries, through an outage of its receiver.

A fresh notice is posted at once -- unless a notice of the same call still waits (it goes
behind it: a receiver hears "recorded" before "reminder" before "resumed" or "expired") or the
receiver is down (it waits with the others). A notice that fails is written to the
undelivered topic before the lane commits the record that made it, and is tried again: the
webhook as a whole backs off (capped exponential, jittered) while its receiver fails, and the
waiting notices go in the order they were made as soon as it answers again. A notice is given
up -- a dead letter on the same topic, with its reason, and a warning -- when its horizon
passes (a reminder: also when its pause's window closes), or at once when the receiver refuses
it (4xx: a retry would not change its mind).

One notice the receiver keeps failing while it takes the others (a 500 for that body alone)
backs off on its own, holding back only the later notices of its own call.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from turnlog.notify import payload
from turnlog.notify.config import NotifyConfig, Sink
from turnlog.notify.metrics import NotifyMetrics
from turnlog.notify.sender import DELIVERED, REFUSED, Attempt, Post, attempt
from turnlog.notify.undelivered import Outbox
from turnlog.notify.waiting import Backlog, Undelivered

log = logging.getLogger("turnlog.notify")


class Courier:
    def __init__(
        self,
        lane: str,
        sink: Sink,
        config: NotifyConfig,
        post: Post,
        outbox: Outbox,
        metrics: NotifyMetrics,
        backlog: Backlog,
        *,
        now: Callable[[], datetime],
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.lane = lane
        self.sink = sink
        self.config = config
        self.backlog = backlog
        self.delivered = 0
        self._post = post
        self._outbox = outbox
        self._metrics = metrics
        self._now = now
        self._draw = draw
        #: failures in a row of the webhook as a whole, and when to try it again
        self._failures = 0
        self._probe_at: datetime | None = None
        self._down_since: datetime | None = None
        self._last_error = ""

    # -- what the lane asks -------------------------------------------------------------------

    async def send(self, notice: payload.Notice, give_up_at: datetime | None = None) -> None:
        """Deliver ``notice``, or keep it on the log to try again: when this returns, the
        record that made it may be committed."""
        now = self._now()
        inbox = self.config.inbox_url
        data = payload.slack_body(notice, inbox) if self.sink.slack else payload.body(notice, inbox)
        horizon = now + self.config.backoff.horizon
        entry = Undelivered(
            lane=self.lane,
            event_id=notice.event_id,
            token_id=notice.token_id,
            kind=notice.kind,
            body=data,
            seq=self.backlog.next_seq(time.time_ns()),
            first_at=now,
            give_up_at=horizon if give_up_at is None else min(horizon, give_up_at),
            thread_id=notice.thread_id,
        )
        if self.backlog.holds(notice.token_id) or self._is_down(now):
            await self._keep(entry)
            return
        result = await self._attempt(entry)
        if result.outcome == DELIVERED:
            self._delivered(entry, result)
            self._healthy()
        elif result.outcome == REFUSED:
            await self._give_up(entry, f"refused by the receiver: {result.error}")
        else:
            self._went_down(result.error)
            await self._keep(entry)

    async def retry(self, stop: asyncio.Event) -> None:
        """Give up what passed its horizon; then, unless the webhook rests, post the waiting
        notices in the order they were made until one fails."""
        for entry in self.backlog.expired(self._now()):
            await self._give_up(entry, self._why_expired(entry))
        now = self._now()
        if not len(self.backlog) or self._is_down(now):
            return
        got_through = False
        suspect: Undelivered | None = None  # the first failure, before anything got through
        blocked: set[str] = set()
        for entry in self.backlog.in_order():
            if stop.is_set():
                return
            if entry.token_id in blocked or self.backlog.resting(entry.event_id, now):
                blocked.add(entry.token_id)
                continue
            result = await self._attempt(entry)
            now = self._now()
            if result.outcome == DELIVERED:
                self.backlog.remove(entry.event_id)
                await self._outbox.drop(entry)
                self._delivered(entry, result)
                got_through = True
            elif result.outcome == REFUSED:
                await self._give_up(entry, f"refused by the receiver: {result.error}")
                got_through = True  # it answered: it is up
            elif got_through:
                self._rest_alone(entry, result.error, now)
                blocked.add(entry.token_id)
            elif suspect is None:
                # The receiver may be down, or refuse this notice alone: one other call's
                # notice decides which, before the whole webhook backs off.
                suspect = entry
                blocked.add(entry.token_id)
                self._last_error = result.error
            else:
                self._went_down(result.error)
                return
        if suspect is not None and got_through:
            self._rest_alone(suspect, self._last_error, now)
        elif suspect is not None:
            self._went_down(self._last_error)
            return
        if got_through:
            self._healthy()

    def _rest_alone(self, entry: Undelivered, error: str, now: datetime) -> None:
        """The receiver takes the others: this notice alone fails, and rests alone."""
        self._last_error = error
        failures = self.backlog.failed(entry.event_id)
        wait = self.config.backoff.delay(failures, self._draw())
        self.backlog.rest(entry.event_id, now + timedelta(seconds=wait))

    def next_due(self) -> datetime | None:
        """When :meth:`retry` has something to do next: ``None`` when nothing waits."""
        if not len(self.backlog):
            return None
        give_up = min(e.give_up_at for e in self.backlog.in_order())
        if self._probe_at is not None:
            return min(give_up, self._probe_at)
        heads: dict[str, Undelivered] = {}
        for entry in self.backlog.in_order():
            heads.setdefault(entry.token_id, entry)
        now = self._now()
        if any(not self.backlog.resting(e.event_id, now) for e in heads.values()):
            return now
        return min([give_up, *self.backlog.rest_ends()])

    async def forget(self, tokens: list[str]) -> None:
        """The thread of ``tokens`` was forgotten: its waiting notices go too (tombstones)."""
        for entry in self.backlog.of_tokens(set(tokens)):
            self.backlog.remove(entry.event_id)
            await self._outbox.drop(entry)

    def oldest_seconds(self) -> float:
        oldest = self.backlog.oldest()
        return 0.0 if oldest is None else max(0.0, (self._now() - oldest).total_seconds())

    # -- the steps ------------------------------------------------------------------------------

    def _is_down(self, now: datetime) -> bool:
        return self._probe_at is not None and now < self._probe_at

    async def _attempt(self, entry: Undelivered) -> Attempt:
        result = await attempt(
            self._post,
            self.sink.url,
            entry.body,
            event_id=entry.event_id,
            kind=entry.kind,
            secrets=self.config.secrets,
            timeout=self.config.timeout_seconds,
        )
        self._metrics.attempts.inc()
        return result

    def _delivered(self, entry: Undelivered, result: Attempt) -> None:
        self.delivered += 1
        self._metrics.notices.labels(entry.kind, "delivered").inc()
        log.info(
            "notifier: %s %s delivered to %s (HTTP %s)",
            entry.kind,
            entry.event_id,
            self.sink.describe(),
            result.status,
        )

    async def _keep(self, entry: Undelivered) -> None:
        if not self.backlog.add(entry):
            return  # the same notice, made again from a record read again: it waits once
        await self._outbox.keep(entry)
        self._metrics.notices.labels(entry.kind, "waiting").inc()
        log.info(
            "notifier: %s %s kept for %s, tried again until %s",
            entry.kind,
            entry.event_id,
            self.sink.describe(),
            f"{entry.give_up_at:%Y-%m-%d %H:%M:%S} UTC",
        )

    async def _give_up(self, entry: Undelivered, reason: str) -> None:
        self.backlog.remove(entry.event_id)
        await self._outbox.keep(entry.dead(reason, self._now()))
        self._metrics.notices.labels(entry.kind, "dead").inc()
        log.warning(
            "notifier: %s %s not delivered to %s: %s; dead-lettered",
            entry.kind,
            entry.event_id,
            self.sink.describe(),
            reason,
        )

    def _why_expired(self, entry: Undelivered) -> str:
        last = f" (last: {self._last_error})" if self._last_error else ""
        if entry.give_up_at < entry.first_at + self.config.backoff.horizon:
            return f"the pause's window closed before the reminder got through{last}"
        return f"not taken within {self.config.backoff.horizon}{last}"

    def _went_down(self, error: str) -> None:
        now = self._now()
        self._failures += 1
        self._last_error = error
        wait = self.config.backoff.delay(self._failures, self._draw())
        self._probe_at = now + timedelta(seconds=wait)
        if self._down_since is None:
            self._down_since = now
            log.warning(
                "notifier: %s is not taking notices (%s); they wait on the log and are tried "
                "again with backoff (at most %gs apart) for up to %s each",
                self.sink.describe(),
                error,
                self.config.backoff.cap_seconds,
                self.config.backoff.horizon,
            )

    def _healthy(self) -> None:
        if self._down_since is not None:
            down = (self._now() - self._down_since).total_seconds()
            log.warning(
                "notifier: %s takes notices again after %.0fs; %d still waiting",
                self.sink.describe(),
                down,
                len(self.backlog),
            )
        self._failures = 0
        self._probe_at = None
        self._down_since = None
