"""Continuing a resumed turn once: the claimant's side of the continuation claim.

Reading a resumed turn is no permission to run its next step; a claim is
(``consumers/claiming.py`` decides it on the worker). A claimant writes a
``ContinuationRequested`` beside the answers and reads the decision where the worker writes it:
the token's ledger row on the consumptions topic naming its claim (granted), or an
``AnswerRejected`` whose ``answer_id`` is the claim's id (refused, with the rule's name). Both
are read from the thread's partition only, from where those partitions ended before the request
was sent -- a decision is always written after its request -- so a claim reads a handful of
records whatever the topics hold.

:class:`Continuation` is what a winner holds: the turn, the claim, and the idempotency key of
each call it may run; :meth:`Continuation.done` says the side effect ran, after which the turn
is never continued again, not even by an explicit retake.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType

from aiokafka import TopicPartition

from turnlog._version import __version__
from turnlog.clock import utc_now
from turnlog.contracts.events import (
    AnswerRejected,
    ContinuationRequested,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.errors import DecodeError, TurnlogError
from turnlog.kafka.partitioning import partition_for
from turnlog.kafka.reader import LogReader
from turnlog.kafka.topics import TopicSet
from turnlog.producers.answers import AnswerPublisher
from turnlog.settings import Settings
from turnlog.wire.codec import decode

__all__ = [
    "AlreadyContinued",
    "ClaimTimeout",
    "Continuation",
    "ContinuationRefused",
    "default_claimant",
    "idempotency_key",
]


def default_claimant() -> str:
    """``host:pid``: who a claim names when the caller does not say."""
    return f"{socket.gethostname()}:{os.getpid()}"


def idempotency_key(token_id: str, call_id: str) -> str:
    """The key a tool that honours one gets for an approved call: its token and call, the same
    in every process and on every retry, so the tool itself can refuse a second run."""
    return f"{token_id}:{call_id}"


class ContinuationRefused(Refused):
    """A claim on a resumed turn the worker refused; ``.refusal.reason`` names the rule
    (``not_resumed``, ``claim_not_held``, ``token_invalid``, ...)."""


class AlreadyContinued(ContinuationRefused):
    """Another claimant continues (or continued) this resumed turn: run nothing.

    ``claimant`` and ``claimed_at`` say who and when; ``finished`` whether they said done. A
    claim never finished may be taken again with ``retake=True`` -- knowing its side effect may
    have run."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal)
        # The worker's words (``claiming.holder_text``) are the one place the holder is named.
        found = _HOLDER.search(refusal.detail)
        self.claimant = found["by"] if found else ""
        self.claimed_at = datetime.fromisoformat(found["at"]) if found else None
        self.claim_id = found["id"] if found else ""
        self.finished = found is not None and found["state"] == "finished"


_HOLDER = re.compile(
    r"continued by (?P<by>.+) at (?P<at>\S+) \(claim (?P<id>\S+), "
    r"(?P<state>finished|not finished)\)$"
)


class ClaimTimeout(TurnlogError, TimeoutError):
    """No decision on a claim within the timeout: is a worker running?"""


@dataclass(frozen=True, slots=True)
class _Granted:
    row: TokenConsumed


async def decide(
    settings: Settings,
    topics: TopicSet,
    publisher: AnswerPublisher,
    request: ContinuationRequested,
    *,
    timeout: float,
) -> TokenConsumed:
    """Send ``request`` and wait for its decision: the ledger row that grants it, or the
    refusal raised (:class:`AlreadyContinued`, :class:`ContinuationRefused`)."""
    reader = LogReader(settings.connection, client_id="turnlog-claim")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        await asyncio.wait_for(reader.start(), timeout)
        partitions = await reader.partitions_of(topics.consumptions, timeout=timeout)
        p = partition_for(request.thread_id, len(partitions))
        tps = [TopicPartition(topics.consumptions, p), TopicPartition(topics.rejections, p)]
        # From the ends before the request: its decision is written after it.
        ends: dict[TopicPartition, int | None] = dict(await reader.end_offsets(tps))
        await reader.assign(ends)
        await publisher.publish_claim(request)
        while loop.time() < deadline:
            left = max(1, int((deadline - loop.time()) * 1000))
            for record in await reader.poll(timeout_ms=min(200, left)):
                found = _decision(record.value, request)
                if isinstance(found, _Granted):
                    return found.row
                if found is not None:
                    raise found
    finally:
        await reader.stop()
    raise ClaimTimeout(
        f"no decision on the claim of thread {request.thread_id!r} within {timeout:g}s: "
        "is a worker running?"
    )


def _decision(
    value: bytes | None, request: ContinuationRequested
) -> _Granted | ContinuationRefused | None:
    if value is None:
        return None
    try:
        event = decode(value)
    except DecodeError:
        return None
    if isinstance(event, TokenConsumed) and event.claim_id == request.claim_id:
        wanted = "finished" if request.action == "finish" else "claimed"
        if event.thread_id == request.thread_id and event.claim_state == wanted:
            return _Granted(event)
        return None
    if isinstance(event, AnswerRejected) and event.answer_id == request.claim_id:
        try:
            reason = RefusalReason(event.reason)
        except ValueError:
            reason = RefusalReason.ANSWER_UNPROCESSABLE
        refusal = Refusal(reason, event.detail)
        if reason == RefusalReason.ALREADY_CONTINUED:
            return AlreadyContinued(refusal)
        return ContinuationRefused(refusal)
    return None


class Continuation:
    """A resumed turn this process won the right to continue.

    ``turn`` is the resumed turn (for a pause of several calls, the group's); ``claim_id`` and
    ``claimant`` name the claim; ``retaken`` says it was taken from a holder that never said
    done. Run the turn's next step, then :meth:`done`; used as ``async with``, a block that
    ends without an exception says done for you, and one that raises leaves the claim taken
    (visible as such; another process may retake it explicitly).
    """

    def __init__(
        self,
        turn: TurnResumed,
        row: TokenConsumed,
        *,
        retaken: bool,
        finish: Callable[[Continuation], Awaitable[None]],
    ) -> None:
        self.turn = turn
        self.claim_id = row.claim_id
        self.claimant = row.claimant
        self.claimed_at = datetime.fromtimestamp(row.claimed_at_ms / 1000, UTC)
        self.retaken = retaken
        #: The token whose ledger row holds the claim (a group's: the call that resumed it).
        self.token_id = row.token_id
        self.finished = False
        self._finish = finish

    @property
    def idempotency_key(self) -> str:
        """The answered call's key (:func:`idempotency_key`): hand it to the tool you run."""
        return idempotency_key(self.turn.token_id, self.turn.tool_call_id or self.turn.interrupt_id)

    def key_for(self, call_id: str) -> str:
        """The idempotency key of one call of the turn (a group's call runs under its own)."""
        for answer in self.turn.answers:
            if call_id in (answer.get("tool_call_id"), answer.get("interrupt_id")):
                return idempotency_key(str(answer["token_id"]), call_id)
        return idempotency_key(self.turn.token_id, call_id)

    async def done(self) -> None:
        """Say the side effect ran: the claim is finished and never taken again. Idempotent."""
        if not self.finished:
            await self._finish(self)
            self.finished = True

    async def __aenter__(self) -> Continuation:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.done()


class ContinueCall:
    """What :meth:`Turnlog.continue_turn` returns: await it for the :class:`Continuation`, or
    use it as ``async with`` (done on a clean exit)."""

    def __init__(self, start: Callable[[], Awaitable[Continuation]]) -> None:
        self._start = start
        self._got: Continuation | None = None

    def __await__(self) -> Generator[object, None, Continuation]:
        return self._start().__await__()

    async def __aenter__(self) -> Continuation:
        self._got = await self._start()
        return self._got

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._got is not None:
            await self._got.__aexit__(exc_type, exc, tb)


def claim_request(
    thread_id: str, token_id: str, *, action: str, claimant: str, token: str = "",
    claim_id: str | None = None,
) -> ContinuationRequested:  # fmt: skip
    """A ``ContinuationRequested`` stamped now."""
    return ContinuationRequested(
        event_id=uuid.uuid4().hex,
        occurred_at=utc_now(),
        package_version=__version__,
        claim_id=claim_id or uuid.uuid4().hex,
        thread_id=thread_id,
        token_id=token_id,
        action=action,
        claimant=claimant,
        token=token,
    )
