"""What the data verbs share: keys, the store directories, a read view and its freshness."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
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


#: A catch-up this many records behind says so before it reads them, and how it goes while it
#: does: a first ``pending`` (``status``, ``show``) on a machine that never projected the topics
#: reads their whole history into its own store (76 s at a million pauses), which an operator
#: or a script would otherwise take for a hang.
SAY_BEHIND = 20_000
#: Seconds between two progress lines of a long catch-up.
SAY_EVERY = 10.0


class CatchUpReport:
    """What a long catch-up says (one line each, through ``say``): up front how many records it
    must read and why; every :data:`SAY_EVERY` seconds how far it is, its rate and the time
    left at that rate; at the end what it read and how long it took. Silent for a store less
    than :data:`SAY_BEHIND` records behind."""

    def __init__(
        self,
        say: Callable[[str], None],
        where: str,
        *,
        threshold: int = SAY_BEHIND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._say, self._where, self._threshold, self._clock = say, where, threshold, clock
        self._began = clock()
        self._last_said: float | None = None
        self._applied = 0

    def __call__(self, progress: Any) -> None:
        now = self._clock()
        self._applied = progress.applied
        behind = progress.applied + progress.remaining
        if self._last_said is None:
            if behind < self._threshold:
                return
            self._last_said = now
            self._say(
                f"catching up the local store ({self._where}): {behind:,} offsets of the pauses "
                "and consumptions topics not applied yet (records and transaction markers) -- a "
                "first read on this machine reads their whole history, later ones only what is new"
            )
            return
        if now - self._last_said >= SAY_EVERY and progress.remaining:
            self._last_said = now
            rate = progress.rate or 1.0
            self._say(
                f"applied {progress.applied:,} records, {progress.remaining:,} offsets left "
                f"({rate:,.0f}/s, at most about {progress.remaining / rate:,.0f}s)"
            )

    def finish(self) -> None:
        if self._last_said is not None:
            seconds = self._clock() - self._began
            self._say(f"caught up: {self._applied:,} records applied in {seconds:.1f}s")


async def caught_up(
    store: Any,
    settings: Settings,
    *,
    say: Callable[[str], None] | None = None,
    threshold: int = SAY_BEHIND,
) -> int:
    """Apply what the store has not yet applied, riding out an unreachable broker (a retry
    goes on from the offsets the store already holds: each batch was written with them). A
    catch-up of ``threshold`` records or more is told through ``say`` (stderr by default)."""
    from turnlog.kafka.outage import reach, ride_out
    from turnlog.kafka.topics import TopicSet
    from turnlog.projections.projector import CheckpointProjector

    if say is None:
        from turnlog.cli.app import err

        def say(line: str) -> None:
            err.print(line, soft_wrap=True, highlight=False, markup=False)

    report = CatchUpReport(say, str(getattr(store, "path", "")), threshold=threshold)

    async def attempt() -> int:
        projector = CheckpointProjector(
            settings.connection,
            store,
            TopicSet.from_settings(settings),
            broker_timeout=settings.broker_timeout_seconds,
            on_progress=report,
        )
        try:
            await projector.start()
            return await projector.catch_up()
        finally:
            await projector.stop()

    # The projector's start retries on its own, for the outage budget: a never-reached address
    # is told apart first, in the first-contact budget.
    await reach(settings, who="store catch-up")
    applied = await ride_out(attempt, settings=settings, who="store catch-up")
    report.finish()
    return applied


def freshness(store: Any) -> str:
    offsets = store.offsets()
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(offsets.items())) or "nothing applied"
