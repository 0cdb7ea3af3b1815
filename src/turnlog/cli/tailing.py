"""``turnlog tail``'s loop: records as they come, and a broker that goes away said once.

aiokafka's ``getmany`` does not fail when the broker goes: it retries inside, and returns
nothing, so a tail whose broker stopped waited in silence for its idle time (an hour by
default) and never said why. Here the wait is cut into short polls; a poll that brings nothing
is followed, every few seconds, by a metadata request -- the cheapest question a broker answers
-- and one that goes unanswered is an outage, ridden out as every component rides one out: one
line when it starts, one when it ends, and past ``TURNLOG_BROKER_TIMEOUT`` the verb's one error
line (exit 4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from turnlog.errors import BrokerUnavailable
from turnlog.kafka.outage import OUTAGE_LOG
from turnlog.kafka.reader import BrokerOutage, broker_reachable

#: How long one poll waits, and how long without a record before the broker is asked.
POLL_SECONDS = 1.0
PROBE_SECONDS = 3.0


async def follow(
    consumer: Any,
    *,
    bootstrap: str,
    budget_seconds: float,
    idle_seconds: float,
    max_records: int | None,
    show: Callable[[Any], Awaitable[None]],
) -> int:
    """Hand every record of ``consumer`` to ``show`` until ``max_records`` were shown or none
    came for ``idle_seconds``; returns how many were. Raises :class:`BrokerUnavailable` once
    the broker has not answered for ``budget_seconds``."""
    loop = asyncio.get_running_loop()
    outage = BrokerOutage(budget_seconds, "tail", OUTAGE_LOG)
    seen = 0
    heard = last = loop.time()
    while max_records is None or seen < max_records:
        left = idle_seconds - (loop.time() - last)
        if left <= 0:
            break
        wait_ms = max(1, int(min(POLL_SECONDS, left) * 1000))
        batch = await consumer.getmany(timeout_ms=wait_ms, max_records=1)
        now = loop.time()
        if batch:
            heard = last = now
            outage.ok()
            for records in batch.values():
                for record in records:
                    seen += 1
                    await show(record)
            continue
        if outage.down or now - heard >= PROBE_SECONDS:
            if await broker_reachable(consumer, PROBE_SECONDS):
                heard = loop.time()
                outage.ok()
            else:
                delay = outage.failed(BrokerUnavailable(f"no answer from {bootstrap}"), now)
                await asyncio.sleep(delay)
                last += loop.time() - now  # an outage is not idle time
    return seen


__all__ = ["POLL_SECONDS", "PROBE_SECONDS", "follow"]
