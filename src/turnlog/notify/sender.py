"""One delivery: a POST to one webhook, signed afresh on every attempt, retried with backoff.

A delivery is done when the receiver answers 2xx. A network error, a timeout, a 5xx, 408, 425
or 429 is tried again after the schedule's next wait; any other answer (400, 401, 403, 404,
410...) is the receiver saying no, which a retry would not change, so it ends the delivery at
once. Every attempt is bounded by the timeout, first byte to last (a receiver that trickles its
answer is cut off too), so one delivery holds its webhook's lane for at most
:meth:`~turnlog.notify.backoff.Backoff.worst_case`, never forever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from turnlog._version import __version__
from turnlog.notify.backoff import Backoff
from turnlog.notify.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, signature_header

#: The answers worth another attempt: the receiver was down, busy or asked us to slow down.
_RETRY_STATUSES = frozenset({408, 425, 429})


class Post(Protocol):
    """POST ``body`` to ``url`` with ``headers`` in at most ``timeout`` seconds; the status."""

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> int: ...


@dataclass(frozen=True, slots=True)
class Result:
    delivered: bool
    attempts: int
    #: The last answer's status, or ``None`` when the last attempt got none.
    status: int | None
    #: Why it was not delivered (the last attempt's failure), empty when it was.
    error: str = ""


def retryable(status: int) -> bool:
    return status >= 500 or status in _RETRY_STATUSES


class HttpPoster:
    """:class:`Post` over one httpx client (connections kept alive between notices; the
    environment's proxy settings honoured; redirects not followed: a webhook that moved must
    be configured anew, not followed to wherever a redirect points)."""

    def __init__(self) -> None:
        import httpx

        self._client = httpx.AsyncClient(follow_redirects=False, trust_env=True)

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> int:
        async with asyncio.timeout(timeout):
            response = await self._client.post(
                url, content=body, headers=dict(headers), timeout=timeout
            )
            return response.status_code

    async def aclose(self) -> None:
        await self._client.aclose()


def headers_for(
    body: bytes, *, event_id: str, kind: str, secrets: tuple[bytes, ...], now: float
) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "user-agent": f"turnlog-notify/{__version__}",
        "turnlog-event": kind,
        IDEMPOTENCY_HEADER: event_id,
        SIGNATURE_HEADER: signature_header(secrets, int(now), body),
    }


async def deliver(
    post: Post,
    url: str,
    body: bytes,
    *,
    event_id: str,
    kind: str,
    secrets: tuple[bytes, ...],
    backoff: Backoff,
    timeout: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
) -> Result:
    """Post until a 2xx, a refusal, or the schedule runs out."""
    waits = backoff.delays()
    status: int | None = None
    error = ""
    for attempt in range(1, backoff.attempts + 1):
        headers = headers_for(body, event_id=event_id, kind=kind, secrets=secrets, now=clock())
        try:
            status = await post(url, body, headers, timeout)
        except TimeoutError:
            status, error = None, f"no answer within {timeout:g}s"
        except Exception as exc:  # noqa: BLE001 -- any transport failure is one failed attempt
            status, error = None, f"{type(exc).__name__}: {exc}"
        else:
            if 200 <= status < 300:
                return Result(True, attempt, status)
            error = f"HTTP {status}"
            if not retryable(status):
                return Result(False, attempt, status, error)
        if attempt <= len(waits):
            await sleep(waits[attempt - 1])
    return Result(False, backoff.attempts, status, error)
