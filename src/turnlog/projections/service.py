"""The checkpoint service: readiness, flush and close around a durable driver.

Three rules, each with the failure it prevents:

* ``ensure_ready`` is lazy, idempotent and locked -- readiness creates topics and starts a
  producer, and two callers that both saw "not ready" must not do that twice;
* a failed readiness does not latch -- the next call retries, because a broker that was down for
  a minute must not poison the process for good;
* ``flush`` records failures and never raises, and ``close`` runs after a failed flush and is
  idempotent -- a service that refuses to close because it could not write leaks its clients.

A deployment with no durable driver is supported: every verb is then a no-op.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from turnlog.contracts.checkpoint import TurnCheckpoint


class CheckpointDriver(Protocol):
    """The durable handle the service governs (Kafka + the local store in production)."""

    async def ensure_ready(self) -> None: ...

    async def flush(self) -> None: ...

    async def close(self) -> None: ...

    async def latest(self, thread_id: str) -> TurnCheckpoint | None: ...

    async def list_checkpoints(self, thread_id: str) -> list[TurnCheckpoint]: ...


@dataclass(frozen=True, slots=True)
class CheckpointRef:
    """What the service registered about one write."""

    thread_id: str
    checkpoint_id: str
    created_at: datetime
    sequence: int | None = None
    package_version: str | None = None
    tenant_id: str | None = None
    safe_boundary: bool = False
    digest: str | None = None


class CheckpointService:
    def __init__(self, driver: CheckpointDriver | None) -> None:
        self._driver = driver
        self._ready = False
        self._closed = False
        self._lock = asyncio.Lock()
        self._flush_failures: tuple[str, ...] = ()
        self._boundaries: dict[str, CheckpointRef] = {}

    @property
    def durable(self) -> bool:
        return self._driver is not None

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def flush_failures(self) -> tuple[str, ...]:
        """Flush failures as loggable text, never exception objects."""
        return self._flush_failures

    async def ensure_ready(self) -> None:
        if self._driver is None or self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            if self._closed:
                raise RuntimeError("this checkpoint service is closed")
            await self._driver.ensure_ready()
            self._ready = True

    async def flush(self) -> None:
        if self._driver is None or not self._ready:
            return
        try:
            await self._driver.flush()
        except Exception as exc:  # noqa: BLE001 - the contract is "flush never raises"
            self._flush_failures = (*self._flush_failures, f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        if self._driver is None or self._closed:
            return
        self._closed = True
        self._ready = False
        await self._driver.close()

    def record_write(
        self,
        checkpoint: TurnCheckpoint,
        *,
        digest: str | None = None,
    ) -> CheckpointRef:
        """Register a write; a safe-boundary write becomes the thread's latest boundary."""
        ref = CheckpointRef(
            thread_id=checkpoint.thread_id,
            checkpoint_id=checkpoint.checkpoint_id,
            created_at=checkpoint.created_at,
            sequence=checkpoint.sequence,
            package_version=checkpoint.package_version or None,
            tenant_id=checkpoint.tenant_id or None,
            safe_boundary=checkpoint.safe_boundary,
            digest=digest,
        )
        if checkpoint.safe_boundary:
            self._boundaries[checkpoint.thread_id] = ref
        return ref

    def latest_safe_boundary(self, thread_id: str) -> CheckpointRef | None:
        return self._boundaries.get(thread_id)

    async def latest(self, thread_id: str) -> TurnCheckpoint | None:
        if self._driver is None:
            return None
        await self.ensure_ready()
        return await self._driver.latest(thread_id)

    async def list_checkpoints(self, thread_id: str) -> list[TurnCheckpoint]:
        if self._driver is None:
            return []
        await self.ensure_ready()
        return await self._driver.list_checkpoints(thread_id)
