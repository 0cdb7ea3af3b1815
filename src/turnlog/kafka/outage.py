"""Riding out an unreachable broker: retry with backoff for a budget, one line each way.

A broker that goes away (a restart, a leader change, a network blip) is retried with backoff
for ``Settings.broker_timeout_seconds``; the first failure logs one line and the first success
after it another; only past the budget is it :class:`~turnlog.errors.BrokerUnavailable` (the
CLI's exit 4). :class:`BrokerOutage` keeps that account for loops that retry on their own (the
worker, the projector, ``ResumedTurns``); :func:`ride_out` wraps a one-shot attempt (a pause, an
answer, a topic check).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    UnknownTopicOrPartitionError,
)

from turnlog.errors import BrokerUnavailable
from turnlog.kafka.internals import cancel_sender_tasks, fail_pending
from turnlog.kafka.reader import BrokerOutage
from turnlog.settings import Settings

T = TypeVar("T")


#: One line when the broker goes, one when it is back (the CLI quiets it for one-shot verbs,
#: whose single error line says the same).
OUTAGE_LOG = logging.getLogger("turnlog.kafka.outage")


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the broker cannot be reached *now* (worth retrying), as opposed to
    a refusal that a retry would only repeat. An unknown topic is not an outage."""
    if isinstance(exc, UnknownTopicOrPartitionError):
        return False
    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError | NodeNotReadyError):
        return True
    return isinstance(exc, KafkaError) and bool(exc.retriable)


def attempt_timeout(settings: Settings) -> float:
    """How long one attempt may take before the broker counts as gone: a tenth of the outage
    budget, at least 5 s (a transactional start on a busy machine) and at most 10 s (so the
    line saying the broker went comes within seconds of it going)."""
    return min(10.0, max(5.0, settings.broker_timeout_seconds / 10))


def request_timeout_ms(settings: Settings) -> int:
    """A client's own request timeout: no longer than one attempt."""
    return int(attempt_timeout(settings) * 1000)


async def stop_producer(producer: AIOKafkaProducer, *, patience: float, grace: float = 2.0) -> None:
    """Stop ``producer``, waiting up to ``patience`` seconds for what it still has to deliver,
    and then not waiting for the broker any more.

    aiokafka 0.14's idempotent and transactional producers never expire a batch -- they retry
    until the broker takes it -- and ``stop()`` waits for every pending batch and, for a
    transactional producer, for its coordinator lookups, which also retry until the broker
    answers: with the broker gone a plain stop never returns. So past ``patience`` the pending
    batches are failed (the accumulator's own ``fail_all``, as an abort does), then the
    sender's tasks are cancelled, then the client is closed. Whatever was not acknowledged is
    the caller's to send again, as the same fact. (aiokafka internals, pinned ``<0.15``.)
    """
    stopping = asyncio.ensure_future(producer.stop())
    steps = (
        lambda: fail_pending(getattr(producer, "_message_accumulator", None)),
        lambda: cancel_sender_tasks(producer),
        stopping.cancel,
    )
    done, _ = await asyncio.wait([stopping], timeout=patience)
    for step in steps:
        if done:
            break
        step()
        done, _ = await asyncio.wait([stopping], timeout=grace)
    if not stopping.done() or stopping.cancelled() or stopping.exception() is not None:
        # The stop ended on the cancelled sender before it closed the client: close it here.
        client = getattr(producer, "client", None)
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), grace)
            except Exception as exc:  # noqa: BLE001 - best effort on a client being dropped
                OUTAGE_LOG.debug("closing an abandoned producer's client: %r", exc)


async def abandon(producer: AIOKafkaProducer) -> None:
    """Close a producer whose broker may be gone at once: its pending sends fail."""
    fail_pending(getattr(producer, "_message_accumulator", None))
    await stop_producer(producer, patience=0.5)


async def ride_out(
    attempt: Callable[[], Awaitable[T]],
    *,
    settings: Settings,
    who: str,
    timeout: float | None = None,
    log: logging.Logger = OUTAGE_LOG,
) -> T:
    """``attempt()``, retried with backoff while the broker is unreachable.

    An attempt fails on an outage when it raises one of aiokafka's "cannot reach" errors, or
    -- with ``timeout`` -- when it has not finished in that many seconds (idempotent producers
    do not fail while the broker is away: they wait for it), in which case it is cancelled and
    must clean up after itself. The lines and the budget are the shared
    :class:`~turnlog.kafka.reader.BrokerOutage`'s: once the outage (dated from the start of the
    first failed attempt) has lasted ``settings.broker_timeout_seconds``, the next failure is
    :class:`BrokerUnavailable` -- never retried here: whoever raises it has already waited.
    Anything that is not an outage is raised at once.
    """
    loop = asyncio.get_running_loop()
    budget = settings.broker_timeout_seconds
    outage = BrokerOutage(budget, f"{who} (Kafka at {settings.bootstrap_servers})", log)
    since: float | None = None
    while True:
        started = loop.time()
        limit = timeout
        if limit is not None and since is not None:
            limit = max(1.0, min(limit, since + budget - started + 1.0))
        try:
            result = await (attempt() if limit is None else asyncio.wait_for(attempt(), limit))
        except BrokerUnavailable:
            raise
        except Exception as exc:
            if not (is_outage(exc) or isinstance(exc, TimeoutError)):
                raise
            if isinstance(exc, TimeoutError):
                exc = TimeoutError(f"no answer within {loop.time() - started:.0f}s")
            since = started if since is None else since
            backoff = outage.failed(exc, began=started)
            # The last attempt comes just after the budget is spent, and its failure raises.
            await asyncio.sleep(min(backoff, max(0.05, since + budget - loop.time() + 0.05)))
            continue
        outage.ok()
        return result
