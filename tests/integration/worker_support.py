"""What the worker acceptance tests share: a deployment whose keys live in a directory (so other
processes can load them), an in-process worker, and a follower of the worker's output topics."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from tests.deployment import Deployment, make_deployment, with_keyring
from tests.kafka_helpers import eventually, read_to_end
from turnlog.consumers.worker import ResumeWorker
from turnlog.contracts.events import (
    AnswerRejected,
    PauseExpired,
    TokenConsumed,
    TurnResumed,
)
from turnlog.kafka.topics import TopicSet
from turnlog.projections.store import Store
from turnlog.tokens import Keyring, write_keypair
from turnlog.wire.codec import decode

KID = "shared-key"
_T = TypeVar("_T")


def keyed_deployment(
    bootstrap: str,
    prefix: str,
    app: str,
    root: Path,
    *,
    partitions: int = 6,
    leeway_seconds: int | None = None,
) -> tuple[Deployment, Path]:
    """A test deployment signing with a key pair written to ``root/keys`` (for child processes)."""
    keys = root / "keys"
    write_keypair(keys, KID)
    dep = make_deployment(bootstrap, prefix, app, root / "state", partitions=partitions)
    settings = dep.settings
    if leeway_seconds is not None:
        settings = settings.with_(token_leeway_seconds=leeway_seconds)
    dep = with_keyring(settings, Keyring.from_directory(keys))
    return dep, keys


@asynccontextmanager
async def running_worker(
    dep: Deployment, state: Path, **options: Any
) -> AsyncIterator[ResumeWorker]:
    """A ResumeWorker running in this process until the block ends (then a clean stop)."""
    store = Store.open(state)
    worker = ResumeWorker(
        dep.settings, store=store, verifier=dep.verifier, interactions=dep.interactions, **options
    )
    task = asyncio.create_task(worker.run())
    _RUNS[worker] = task
    try:
        yield worker
    finally:
        worker.request_stop()
        await task
        store.close()


_RUNS: weakref.WeakKeyDictionary[ResumeWorker, asyncio.Task[None]] = weakref.WeakKeyDictionary()


def run_task(worker: ResumeWorker) -> asyncio.Task[None]:
    """The task running ``worker.run()`` for :func:`running_worker`: done means it exited."""
    return _RUNS[worker]


async def wait_owned(
    workers: list[ResumeWorker], partitions: int, *, timeout: float = 60.0
) -> list[list[int]]:
    """Poll until the workers between them own every partition exactly once, each some."""

    async def settled() -> list[list[int]] | None:
        owned = [w.owned for w in workers]
        flat = sorted(p for each in owned for p in each)
        return owned if flat == list(range(partitions)) and all(owned) else None

    result: list[list[int]] = await eventually(settled, timeout=timeout, interval=0.1)
    return result


async def committed_events(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic`` (read_committed, from the beginning to the end now), decoded."""
    return [decode(r.value) for r in await read_to_end(bootstrap, topic, timeout=60.0)]


def of_type(events: list[Any], cls: type[_T]) -> list[_T]:
    return [e for e in events if isinstance(e, cls)]


class Follower:
    """Follows resumed, consumptions and rejections (read_committed) in the background, so a test
    can wait for one event without re-reading the topics each time."""

    def __init__(self, bootstrap: str, topics: TopicSet) -> None:
        self._topics = topics
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        self.raw: list[ConsumerRecord[bytes, bytes]] = []
        self.events: list[Any] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        tps = []
        for topic in (self._topics.resumed, self._topics.consumptions, self._topics.rejections):
            tps += [TopicPartition(topic, p) for p in range(self._topics.partitions)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for record in records:
                    self.raw.append(record)
                    self.events.append(decode(record.value))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    def rejections(self, answer_id: str | None = None) -> list[AnswerRejected]:
        found = of_type(self.events, AnswerRejected)
        return [r for r in found if answer_id is None or r.answer_id == answer_id]

    def consumed(self, token_id: str) -> list[TokenConsumed]:
        return [c for c in of_type(self.events, TokenConsumed) if c.token_id == token_id]

    def resumed(self, token_id: str) -> list[TurnResumed]:
        return [t for t in of_type(self.events, TurnResumed) if t.token_id == token_id]

    def expired(self, token_id: str) -> list[PauseExpired]:
        return [e for e in of_type(self.events, PauseExpired) if e.token_id == token_id]

    async def wait_for(self, found: Callable[[], list[_T]], timeout: float = 30.0) -> list[_T]:
        async def check() -> list[_T]:
            return found()

        result: list[_T] = await eventually(check, timeout=timeout, interval=0.05)
        return result
