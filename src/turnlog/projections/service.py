"""The checkpoint service: readiness, flush and close around a durable driver.

Three rules, each with the failure it prevents:

* ``ensure_ready`` is lazy, idempotent and locked -- readiness creates topics and starts a
  producer, and two callers that both saw "not ready" must not do that twice;
* a failed readiness does not latch -- the next call retries, because a broker that was down for
  a minute must not poison the process for good;
* ``flush`` records failures and never raises, and ``close`` runs after a failed flush and is
  idempotent -- a service that refuses to close because it could not write leaks its clients.
  What it records is every write that did not reach the broker by the flush's end (which thread
  and checkpoint, and why), as text scrubbed by the logs' rules: an exception's message may
  hold a token or a key, and ``flush_failures`` is meant to be logged.

A deployment with no durable driver is supported: every verb is then a no-op.

A write may be recorded unfinalized (``record_write(..., finalized=False)``, what
``Turnlog.pause(..., finalized=False)`` does) and finalized later
(:meth:`CheckpointService.finalize`): one left unfinalized by a crash is expired by its thread's
owner with its reason, never resumed (:mod:`turnlog.kafka.finalization`). A thread's checkpoints
are read in the log's order.

:class:`LazyStoreDriver` is the driver as processes sharing one state directory need it:
readiness is the pause writer's alone, and a local store is opened by the first read only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import PauseRecorded
from turnlog.errors import StoreError
from turnlog.observability.logs import scrub
from turnlog.projections.store import StoreLocked

if TYPE_CHECKING:
    from turnlog.kafka.topics import TopicSet
    from turnlog.producers.pauses import RecordedPause


class CheckpointDriver(Protocol):
    """The durable handle the service governs (Kafka + the local store in production)."""

    async def ensure_ready(self) -> None: ...

    async def flush(self) -> Sequence[str] | None:
        """Push what is buffered; the writes that did not reach the broker, as text."""
        ...

    async def close(self) -> None: ...

    async def latest(self, thread_id: str) -> TurnCheckpoint | None: ...

    async def list_checkpoints(self, thread_id: str) -> list[TurnCheckpoint]: ...


class Writer(Protocol):
    """The pause writer's lifecycle (``PauseRecorder``): what readiness starts."""

    async def ensure_ready(self) -> None: ...

    async def flush(self) -> Sequence[str] | None: ...

    async def close(self) -> None: ...


class StoreDriver(CheckpointDriver, Protocol):
    """A driver reading one store directory (``KafkaCheckpointDriver``), told this process's
    writes so it reads them back."""

    def wrote(self, thread_id: str, partition: int, offset: int) -> None: ...


class TopicsOnly:
    """The pause writer given to a :class:`LazyStoreDriver`'s store driver: the topics to
    follow and nothing to start or stop -- the real writer is readied and closed once, by the
    lazy driver, however many store drivers it tries."""

    def __init__(self, topics: TopicSet) -> None:
        self.topics = topics

    async def ensure_ready(self) -> None:
        return None

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


class LazyStoreDriver:
    """A checkpoint driver whose store is opened by the first read, in the first of ``first``,
    ``first-2``, ... ``first-<stores>`` that no other process holds.

    Readiness starts the writer only: a pause is a record on Kafka, and a process that pauses
    must not hold a local store, or a second process on the same state directory could not
    pause (issue 28). The reads do need a store that follows the pauses topic, and a RocksDB
    secondary of another process's store would be only as fresh as that process's own last
    read; so each reading process projects into a store of its own -- the first directory when
    it is free, else the next -- and leaves it for the next process to continue from.
    """

    def __init__(
        self,
        writer: Writer,
        store_driver: Callable[[Path], StoreDriver],
        first: Path,
        *,
        stores: int = 64,
    ) -> None:
        self._writer = writer
        self._store_driver = store_driver
        numbered = (first.with_name(f"{first.name}-{n}") for n in range(2, stores + 1))
        self._directories = (first, *numbered)
        self._reading: StoreDriver | None = None
        self._at: Path | None = None
        self._written: dict[str, tuple[int, int]] = {}
        self._lock = asyncio.Lock()

    @property
    def store_dir(self) -> Path | None:
        """The directory the reads use, once a read opened one."""
        return self._at

    async def ensure_ready(self) -> None:
        await self._writer.ensure_ready()

    async def flush(self) -> Sequence[str] | None:
        return await self._writer.flush()

    async def finalize(self, pause: PauseRecorded, traceparent: str | None) -> RecordedPause:
        """Write an unfinalized pause again, finalized (``PauseRecorder.finalize``)."""
        finalize = getattr(self._writer, "finalize", None)
        if finalize is None:
            raise RuntimeError("this checkpoint driver's writer cannot finalize a write")
        done: RecordedPause = await finalize(pause, traceparent)
        self.wrote(done.thread_id, done.partition, done.offset)
        return done

    async def close(self) -> None:
        async with self._lock:
            reading, self._reading, self._at = self._reading, None, None
            try:
                if reading is not None:
                    await reading.close()
            finally:
                await self._writer.close()

    def wrote(self, thread_id: str, partition: int, offset: int) -> None:
        """Remember where this process wrote a thread's latest pause: a store opened later
        still reads it back (read-your-writes)."""
        self._written[thread_id] = (partition, offset)
        if self._reading is not None:
            self._reading.wrote(thread_id, partition, offset)

    async def latest(self, thread_id: str) -> TurnCheckpoint | None:
        return await (await self._reader()).latest(thread_id)

    async def list_checkpoints(self, thread_id: str) -> list[TurnCheckpoint]:
        return await (await self._reader()).list_checkpoints(thread_id)

    async def _reader(self) -> StoreDriver:
        async with self._lock:
            if self._reading is None:
                reading = await self._open_first_free()
                for thread_id, (partition, offset) in self._written.items():
                    reading.wrote(thread_id, partition, offset)
                self._reading = reading
            return self._reading

    async def _open_first_free(self) -> StoreDriver:
        owners: list[str] = []
        for directory in self._directories:
            driver = self._store_driver(directory)
            try:
                await driver.ensure_ready()
            except StoreLocked as locked:
                await driver.close()
                owners.append(locked.owner or "a process that recorded no owner")
                continue
            except BaseException:
                await driver.close()  # a failed start (the broker) is retried by the next read
                raise
            self._at = directory
            return driver
        raise StoreError(
            f"every checkpoint store from {self._directories[0]} on is open read-write "
            f"({len(owners)}: "
            f"{'; '.join(owners[:3])}{'; ...' if len(owners) > 3 else ''}); close a process "
            "that reads checkpoints, or give it another state directory"
        )


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
    #: ``False``: written in the crash window, not finalized when it was registered.
    finalized: bool = True


class _Paused(Protocol):
    """What :meth:`CheckpointService.finalize` reads of a pause (``Turnlog.pause``'s result)."""

    @property
    def token(self) -> str: ...
    @property
    def pause(self) -> PauseRecorded: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def traceparent(self) -> str | None: ...


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
        """Push buffered writes; each that did not reach the broker is recorded in
        :attr:`flush_failures` (scrubbed text), never raised."""
        if self._driver is None or not self._ready:
            return
        try:
            failures = list(await self._driver.flush() or ())
        except Exception as exc:  # noqa: BLE001 - the contract is "flush never raises"
            failures = [f"{type(exc).__name__}: {exc}"]
        if failures:
            self._flush_failures = (*self._flush_failures, *map(scrub, failures))

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
        finalized: bool = True,
    ) -> CheckpointRef:
        """Register a write; a safe-boundary write becomes the thread's latest boundary.
        ``finalized=False``: the write is in the crash window (see :meth:`finalize`)."""
        ref = CheckpointRef(
            thread_id=checkpoint.thread_id,
            checkpoint_id=checkpoint.checkpoint_id,
            created_at=checkpoint.created_at,
            sequence=checkpoint.sequence,
            package_version=checkpoint.package_version or None,
            tenant_id=checkpoint.tenant_id or None,
            safe_boundary=checkpoint.safe_boundary,
            digest=digest,
            finalized=finalized,
        )
        if checkpoint.safe_boundary:
            self._boundaries[checkpoint.thread_id] = ref
        return ref

    async def finalize(self, paused: _Paused) -> RecordedPause:
        """Close the crash window of a pause written with ``finalized=False``: the pause is
        written again without the mark, and the result carries its token (none was issued
        before). A pause never finalized is expired by its owner once older than
        ``Settings.finalize_timeout_seconds``, with the reason ``unfinalized``::

            paused = await tl.pause(checkpoint, finalized=False)   # paused.token == ""
            ...                                                    # complete the turn's state
            done = await tl.checkpoints.finalize(paused)           # done.token: hand it out
        """
        if self._driver is None:
            raise RuntimeError("no durable driver: nothing was written to finalize")
        finalize = getattr(self._driver, "finalize", None)
        if finalize is None:
            raise RuntimeError("this checkpoint driver cannot finalize a write")
        await self.ensure_ready()
        done: RecordedPause = await finalize(paused.pause, paused.traceparent)
        self.record_write(done.pause.checkpoint)
        return done

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
