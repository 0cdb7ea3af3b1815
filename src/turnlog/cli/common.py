"""What the data verbs share: keys, the store directories, a read view and its freshness."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from turnlog.errors import StoreError
from turnlog.settings import Settings


def keyring(settings: Settings) -> Any:

    from turnlog.tokens import Keyring

    keys_dir = settings.keys_dir if settings.keys_dir.is_dir() else None
    return Keyring.from_env(os.environ, keys_dir=keys_dir)


def issuer(settings: Settings) -> Any:
    from turnlog.tokens import TokenIssuer

    s = settings
    return TokenIssuer(keyring(settings), issuer=s.issuer, audience=s.audience)


def verifier(settings: Settings) -> Any:
    from turnlog.tokens import TokenVerifier

    s = settings
    return TokenVerifier(
        keyring(settings),
        issuer=s.issuer,
        audience=s.audience,
        leeway=timedelta(seconds=s.token_leeway_seconds),
    )


def projection_dir(settings: Settings) -> Path:
    return settings.state_dir / "projection"


def worker_dir(settings: Settings) -> Path:
    return settings.state_dir / "worker"


@contextmanager
def open_for_reading(settings: Settings) -> Iterator[tuple[Any, bool]]:
    """The projection store: read-write when free, else a secondary beside the running writer.

    Yields ``(store, is_writer)``; a writer can be caught up from Kafka before answering.
    """
    from turnlog.projections.store import Store

    path = projection_dir(settings)
    try:
        store = Store.open(path)
    except StoreError:
        scratch = Path(tempfile.mkdtemp(prefix="turnlog-secondary-"))
        try:
            store = Store.open_secondary(path, scratch)
            try:
                store.catch_up()
                yield store, False
            finally:
                store.close()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    try:
        yield store, True
    finally:
        store.close()


async def caught_up(store: Any, settings: Settings) -> int:
    """Apply what the store has not yet applied, riding out an unreachable broker (a retry
    goes on from the offsets the store already holds: each batch was written with them)."""
    from turnlog.kafka.outage import reach, ride_out
    from turnlog.kafka.topics import TopicSet
    from turnlog.projections.projector import CheckpointProjector

    async def attempt() -> int:
        projector = CheckpointProjector(
            settings.connection,
            store,
            TopicSet.from_settings(settings),
            broker_timeout=settings.broker_timeout_seconds,
        )
        try:
            await projector.start()
            return await projector.catch_up()
        finally:
            await projector.stop()

    # The projector's start retries on its own, for the outage budget: a never-reached address
    # is told apart first, in the first-contact budget.
    await reach(settings, who="store catch-up")
    return await ride_out(attempt, settings=settings, who="store catch-up")


def freshness(store: Any) -> str:
    offsets = store.offsets()
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(offsets.items())) or "nothing applied"
