"""The checkpoint service's rules (seed 001) over a fake driver: no broker needed."""

from __future__ import annotations

import asyncio

import pytest

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.projections.service import CheckpointService


class FakeDriver:
    """Counts every call; readiness fails ``fail_ready`` times, flush fails while ``fail_flush``."""

    def __init__(self, *, fail_ready: int = 0, fail_flush: bool = False) -> None:
        self.fail_ready = fail_ready
        self.fail_flush = fail_flush
        self.ready_calls = 0
        self.flush_calls = 0
        self.close_calls = 0
        self.in_ready = 0
        self.most_in_ready = 0
        self.checkpoints = [TurnCheckpoint(thread_id="t", checkpoint_id="cp-1", sequence=1)]

    async def ensure_ready(self) -> None:
        self.ready_calls += 1
        self.in_ready += 1
        self.most_in_ready = max(self.most_in_ready, self.in_ready)
        try:
            for _ in range(3):  # yield, so concurrent callers really overlap
                await asyncio.sleep(0)
            if self.fail_ready:
                self.fail_ready -= 1
                raise ConnectionError("broker down")
        finally:
            self.in_ready -= 1

    async def flush(self) -> None:
        self.flush_calls += 1
        if self.fail_flush:
            raise OSError("disk full")

    async def close(self) -> None:
        self.close_calls += 1

    async def latest(self, thread_id: str) -> TurnCheckpoint | None:
        return self.checkpoints[-1] if thread_id == "t" else None

    async def list_checkpoints(self, thread_id: str) -> list[TurnCheckpoint]:
        return list(self.checkpoints) if thread_id == "t" else []


async def test_readiness_is_lazy_and_happens_once_under_concurrency() -> None:
    driver = FakeDriver()
    service = CheckpointService(driver)
    assert driver.ready_calls == 0 and not service.ready
    await asyncio.gather(*(service.ensure_ready() for _ in range(10)))
    await service.ensure_ready()
    assert service.ready
    assert (driver.ready_calls, driver.most_in_ready) == (1, 1)


async def test_failed_readiness_does_not_latch() -> None:
    driver = FakeDriver(fail_ready=1)
    service = CheckpointService(driver)
    with pytest.raises(ConnectionError):
        await service.ensure_ready()
    assert not service.ready
    await service.ensure_ready()
    assert service.ready
    assert driver.ready_calls == 2


async def test_concurrent_callers_of_a_failing_readiness_each_retry() -> None:
    driver = FakeDriver(fail_ready=1)
    service = CheckpointService(driver)
    results = await asyncio.gather(
        service.ensure_ready(), service.ensure_ready(), return_exceptions=True
    )
    assert [type(r) for r in results] == [ConnectionError, type(None)]
    assert service.ready and driver.ready_calls == 2 and driver.most_in_ready == 1


async def test_reads_make_the_service_ready() -> None:
    driver = FakeDriver()
    service = CheckpointService(driver)
    latest = await service.latest("t")
    assert latest is not None and latest.checkpoint_id == "cp-1"
    assert [cp.sequence for cp in await service.list_checkpoints("t")] == [1]
    assert await service.latest("other") is None
    assert service.ready and driver.ready_calls == 1


async def test_flush_failure_is_recorded_not_raised_and_close_still_runs_once() -> None:
    driver = FakeDriver(fail_flush=True)
    service = CheckpointService(driver)
    await service.ensure_ready()
    await service.flush()  # does not raise
    await service.flush()
    assert service.flush_failures == ("OSError: disk full", "OSError: disk full")
    assert all(isinstance(f, str) for f in service.flush_failures)
    await service.close()
    await service.close()
    assert driver.close_calls == 1
    assert not service.ready


async def test_flush_before_readiness_touches_nothing() -> None:
    driver = FakeDriver(fail_flush=True)
    service = CheckpointService(driver)
    await service.flush()
    assert driver.flush_calls == 0 and service.flush_failures == ()


async def test_close_after_failed_readiness_releases_the_driver() -> None:
    driver = FakeDriver(fail_ready=1)
    service = CheckpointService(driver)
    with pytest.raises(ConnectionError):
        await service.ensure_ready()
    await service.close()
    assert driver.close_calls == 1


async def test_a_closed_service_does_not_become_ready_again() -> None:
    driver = FakeDriver()
    service = CheckpointService(driver)
    await service.ensure_ready()
    await service.close()
    with pytest.raises(RuntimeError, match="closed"):
        await service.ensure_ready()
    assert driver.ready_calls == 1


async def test_no_driver_is_a_supported_no_op() -> None:
    service = CheckpointService(None)
    assert not service.durable
    await service.ensure_ready()
    await service.flush()
    await service.close()
    await service.close()
    assert await service.latest("t") is None
    assert await service.list_checkpoints("t") == []
    assert service.flush_failures == ()


_TOKEN = "eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJ0b2stMSJ9.c2lnbmF0dXJlLWJ5dGVz"
_KEY = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIK1\n-----END PRIVATE KEY-----"


class ReportingDriver(FakeDriver):
    """A driver whose flush reports writes that did not reach the broker, or raises text
    holding a token and a key."""

    def __init__(self, report: list[str] | None = None, raise_text: str | None = None) -> None:
        super().__init__()
        self.report = report
        self.raise_text = raise_text

    async def flush(self) -> list[str] | None:  # type: ignore[override]
        self.flush_calls += 1
        if self.raise_text is not None:
            raise RuntimeError(self.raise_text)
        return self.report


async def test_flush_records_what_the_driver_reports_and_scrubs_tokens_and_keys() -> None:
    """Before, a driver's flush could not report a write it failed (its result was dropped),
    and a raised message was kept verbatim, token and private key included."""
    reported = ReportingDriver([f"thread t, checkpoint cp-1: rejected {_TOKEN}"])
    service = CheckpointService(reported)
    await service.ensure_ready()
    await service.flush()
    await service.flush()
    assert service.flush_failures == (
        "thread t, checkpoint cp-1: rejected [token redacted]",
        "thread t, checkpoint cp-1: rejected [token redacted]",
    )
    raising = CheckpointService(ReportingDriver(raise_text=f"boom {_TOKEN} and {_KEY}"))
    await raising.ensure_ready()
    await raising.flush()  # never raises
    assert raising.flush_failures == (
        "RuntimeError: boom [token redacted] and [private key redacted]",
    )
    quiet = CheckpointService(ReportingDriver([]))
    await quiet.ensure_ready()
    await quiet.flush()
    assert quiet.flush_failures == ()
