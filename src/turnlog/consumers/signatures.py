"""A batch's token signatures, checked on a few threads at once.

Why: the Ed25519 check is the costliest step of a resume (``bench/README.md``), and
``cryptography`` releases the GIL while it runs, so the checks of one fetched batch can run side
by side on the cores the machine has while the event loop waits for them. Each check is
:meth:`~turnlog.tokens.TokenVerifier.verify_parsed` itself -- the same rules, the same refusals
-- and its outcome, a refusal or any other exception included, is handed back to be used where
the handler would have made the check, so nothing about the order of the rules changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from turnlog.contracts.claims import PauseClaims
from turnlog.tokens import TokenVerifier
from turnlog.tokens.peek import ParsedToken

#: The fewest tokens worth a trip to the threads (below it a hop costs more than it saves).
AHEAD_FROM = 8

Outcome = PauseClaims | Exception


class SignatureChecks:
    """``threads`` verification threads, started on first use; fewer than two: none."""

    def __init__(self, verifier: TokenVerifier, threads: int) -> None:
        self._verifier = verifier
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    async def check(self, tokens: Sequence[ParsedToken], now: datetime) -> list[Outcome] | None:
        """Each token's outcome (its claims, or what verifying it raised), in order; ``None``
        when the batch is checked one by one where it is used instead."""
        started = self.start(tokens, now)
        return None if started is None else await started

    def start(
        self, tokens: Sequence[ParsedToken], now: datetime
    ) -> Awaitable[list[Outcome]] | None:
        """:meth:`check`, begun now on the threads: what it returns is awaited for the outcomes
        later, so the event loop's thread does other work (another partition's batch) while the
        checks run. ``None`` as for :meth:`check`."""
        if self._threads < 2 or len(tokens) < AHEAD_FROM:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, "turnlog-verify")
        loop = asyncio.get_running_loop()
        shares = [tokens[i :: self._threads] for i in range(self._threads)]
        futures = [
            loop.run_in_executor(self._pool, self._check_all, share, now) for share in shares
        ]
        # A task, not a bare coroutine: one never awaited (its batch failed first) is dropped
        # quietly; the checks themselves never raise (each outcome is caught).
        return loop.create_task(self._gathered(futures, len(tokens)))

    async def _gathered(
        self, futures: list[asyncio.Future[list[Outcome]]], count: int
    ) -> list[Outcome]:
        done = await asyncio.gather(*futures)
        found: list[Outcome] = [RuntimeError("unchecked")] * count
        for i, outcomes in enumerate(done):
            found[i :: self._threads] = outcomes
        return found

    def _check_all(self, share: Sequence[ParsedToken], now: datetime) -> list[Outcome]:
        found: list[Outcome] = []
        for token in share:
            try:
                found.append(self._verifier.verify_parsed(token, now))
            except Exception as exc:  # noqa: BLE001 - handed back to the record's own handling
                found.append(exc)
        return found

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
