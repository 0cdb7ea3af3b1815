"""A service started while its broker is down waits it out (issue 39, item 4), without a broker.

A CLI verb's first contact gives up in ``TURNLOG_CONNECT_TIMEOUT``; a service (a worker, the
projector, the notifier, the inbox: code run under ``as_service``) gives a never-reached address
the outage budget instead, says so in its line, and ``waiting()`` -- what ``/readyz`` says beside
"not ready" -- tells why while it waits, and nothing once the wait is over.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tests.unit.test_first_contact import OUTAGE_LOGGER, _refused, closed_address
from turnlog.errors import BrokerUnavailable
from turnlog.kafka.outage import as_service, ride_out, waiting
from turnlog.settings import Settings


async def test_a_service_waits_a_never_reached_broker_out_under_the_outage_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    settings = Settings(
        bootstrap_servers=closed_address(), connect_timeout_seconds=0.3,
        broker_timeout_seconds=1.5,
    )  # fmt: skip
    seen: list[str | None] = []

    async def attempt() -> None:
        seen.append(waiting())
        await _refused()

    started = time.monotonic()
    with as_service("worker"), pytest.raises(BrokerUnavailable) as gave_up:
        await ride_out(attempt, settings=settings, who="unit")
    took = time.monotonic() - started
    assert 1.5 <= took < 4.0, took  # the outage budget, not the 0.3 s first-contact one
    assert "TURNLOG_BROKER_TIMEOUT" in str(gave_up.value)
    assert seen[0] is None and seen[-1] is not None  # not waiting before the first failure
    assert "waiting for the broker, up to 1.5s (TURNLOG_BROKER_TIMEOUT)" in seen[-1]
    assert waiting() is None  # the wait is over
    [line] = [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]
    assert "never reached yet" in line and "(TURNLOG_BROKER_TIMEOUT)" in line
    assert "the worker waits it out as an outage, not ready meanwhile" in line


async def test_outside_a_service_the_first_contact_budget_stands() -> None:
    settings = Settings(
        bootstrap_servers=closed_address(), connect_timeout_seconds=0.3,
        broker_timeout_seconds=30,
    )  # fmt: skip
    with as_service("worker"):
        pass  # a service that ended leaves nothing behind
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as gave_up:
        await asyncio.wait_for(ride_out(_refused, settings=settings, who="unit"), 10)
    assert time.monotonic() - started < 3.0
    assert gave_up.value.never_reached and "TURNLOG_CONNECT_TIMEOUT" in str(gave_up.value)
