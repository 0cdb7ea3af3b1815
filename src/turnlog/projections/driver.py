"""The checkpoint service's production driver: Kafka for writes, the local store for reads.

:class:`~turnlog.projections.service.CheckpointService` governs readiness, flush and close of a
driver; this one is the pause writer (topics ensured, transactional producer started) plus a
store projected from the pauses topic, which answers ``latest`` and ``list_checkpoints``. Reads
follow the topic rather than trusting memory, so a process sees pauses written by any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import PauseRecorded
from turnlog.errors import BrokerUnavailable
from turnlog.kafka.topics import TopicSet
from turnlog.projections.projector import CheckpointProjector
from turnlog.projections.store import Store
from turnlog.settings import Settings
from turnlog.wire.codec import decode


class PauseWriter(Protocol):
    """What the driver needs of the pause writer (``PauseRecorder``)."""

    topics: TopicSet

    async def ensure_ready(self) -> None: ...

    async def flush(self) -> Sequence[str] | None: ...

    async def close(self) -> None: ...


class KafkaCheckpointDriver:
    """The checkpoint service's production driver: the pause producer for readiness and
    flushing, a local store projected from the pauses topic for ``latest``/``list_checkpoints``.

    A read first catches the store up to the topic's committed end -- and, for a thread this
    process paused, at least to its own last write, so a caller reads what it just wrote even
    while the transaction's commit marker is still on its way.
    """

    def __init__(
        self, settings: Settings, recorder: PauseWriter, store_dir: Path, *, read_timeout: float
    ) -> None:
        self.settings = settings
        self.recorder = recorder
        self._store_dir = store_dir
        self._read_timeout = read_timeout
        self._store: Store | None = None
        self._projector: CheckpointProjector | None = None
        self._written: dict[str, tuple[int, int]] = {}
        self._lock = asyncio.Lock()

    async def ensure_ready(self) -> None:
        await self.recorder.ensure_ready()
        async with self._lock:
            if self._projector is not None:
                return
            if self._store is None:
                self._store = Store.open(self._store_dir)
            projector = CheckpointProjector(
                self.settings.connection,
                self._store,
                self.recorder.topics,
                broker_timeout=self.settings.broker_timeout_seconds,
            )
            try:
                await projector.start()
            except BaseException:
                await projector.stop()
                raise
            self._projector = projector

    async def flush(self) -> Sequence[str] | None:
        return await self.recorder.flush()

    async def close(self) -> None:
        async with self._lock:
            projector, self._projector = self._projector, None
            if projector is not None:
                await projector.stop()
            await self.recorder.close()
            if self._store is not None:
                self._store.close()
                self._store = None

    def wrote(self, thread_id: str, partition: int, offset: int) -> None:
        """Remember where this process wrote a thread's latest pause (read-your-writes)."""
        self._written[thread_id] = (partition, offset)

    async def _fresh(self, thread_id: str) -> Store:
        async with self._lock:
            if self._projector is None or self._store is None:
                raise RuntimeError("the checkpoint driver is not ready")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._read_timeout
            await self._projector.catch_up()
            own = self._written.get(thread_id)
            while own is not None:
                applied = self._store.offset(self.recorder.topics.pauses, own[0])
                if applied is not None and applied > own[1]:
                    break
                if loop.time() > deadline:
                    raise BrokerUnavailable(
                        f"the pause of thread {thread_id!r} at offset {own[1]} did not become "
                        f"readable within {self._read_timeout:.0f}s"
                    )
                await asyncio.sleep(0.02)  # the commit marker is on its way: poll again
                await self._projector.catch_up()
            return self._store

    async def latest(self, thread_id: str) -> TurnCheckpoint | None:
        raw = (await self._fresh(thread_id)).latest(thread_id)
        return None if raw is None else decode(raw, PauseRecorded).checkpoint

    async def list_checkpoints(self, thread_id: str) -> list[TurnCheckpoint]:
        store = await self._fresh(thread_id)
        return [decode(raw, PauseRecorded).checkpoint for raw in store.list_checkpoints(thread_id)]
