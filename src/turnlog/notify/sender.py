"""One attempt to deliver a notice: a POST to one webhook, signed afresh.

An attempt is done when the receiver answers 2xx. A network error, a timeout, a 5xx, 408, 425
or 429 is worth another attempt later (the receiver was down, busy, or asked us to slow down);
any other answer (400, 401, 403, 404, 410...) is the receiver saying no, which a retry would
not change. Every attempt is bounded by the timeout, first byte to last (a receiver that
trickles its answer is cut off too).

A webhook's URL is a secret (a Slack webhook's path is its key; a query or user part may carry
a token): nothing here lets it reach a log line. httpx logs every request's full URL at INFO
(logger ``httpx``) and httpcore its connection's steps at DEBUG: both are held to WARNING, and
a filter rewrites any URL that still reaches them; a failure's text is scrubbed of the URL
before anyone logs it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import urlsplit

from turnlog._version import __version__
from turnlog.notify.config import describe_url
from turnlog.notify.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, signature_header

#: The answers worth another attempt: the receiver was down, busy or asked us to slow down.
_RETRY_STATUSES = frozenset({408, 425, 429})
#: Anything that reads as a URL with a scheme, in a log line or an error's text.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
#: The HTTP client's loggers (httpcore's per module, under ``httpcore``).
HTTP_LOGGERS: Final = ("httpx", "httpcore")

DELIVERED, REFUSED, FAILED = "delivered", "refused", "failed"


def scrub(text: str, url: str | None = None) -> str:
    """``text`` with every URL cut to its scheme and host, and the parts of ``url`` that are
    secret (path, query, user) removed wherever they stand alone."""
    text = _URL.sub(lambda m: describe_url(m.group(0)), text)
    if url:
        parts = urlsplit(url)
        secret = [parts.path, parts.query, parts.fragment, parts.netloc.rpartition("@")[0]]
        for piece in sorted((p for p in secret if len(p) > 1), key=len, reverse=True):
            text = text.replace(piece, "…")
    return text


class _ScrubUrls(logging.Filter):
    """Rewrites a record's message with every URL cut to scheme and host."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def quiet_http_client_logs() -> None:
    """Hold the HTTP client's loggers to WARNING and scrub what they still log (idempotent).
    A logger's filter sees only the records of that logger, so httpcore's modules get one each."""
    names = (*HTTP_LOGGERS, "httpcore.connection", "httpcore.http11", "httpcore.http2")
    for name in (*names, "httpcore.proxy", "httpcore.socks"):
        logger = logging.getLogger(name)
        if name in HTTP_LOGGERS:
            logger.setLevel(logging.WARNING)
        if not any(isinstance(f, _ScrubUrls) for f in logger.filters):
            logger.addFilter(_ScrubUrls())


class Post(Protocol):
    """POST ``body`` to ``url`` with ``headers`` in at most ``timeout`` seconds; the status."""

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> int: ...


@dataclass(frozen=True, slots=True)
class Attempt:
    #: ``delivered``, ``refused`` (the receiver said no: no retry) or ``failed`` (retry later)
    outcome: str
    #: The answer's status, or ``None`` when the attempt got none.
    status: int | None
    #: Why it was not delivered, scrubbed of the URL; empty when it was.
    error: str = ""


def retryable(status: int) -> bool:
    return status >= 500 or status in _RETRY_STATUSES


class HttpPoster:
    """:class:`Post` over one httpx client (connections kept alive between notices; the
    environment's proxy settings honoured; redirects not followed: a webhook that moved must
    be configured anew, not followed to wherever a redirect points)."""

    def __init__(self) -> None:
        import httpx

        quiet_http_client_logs()
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


async def attempt(
    post: Post,
    url: str,
    body: bytes,
    *,
    event_id: str,
    kind: str,
    secrets: tuple[bytes, ...],
    timeout: float,
    clock: Callable[[], float] = time.time,
) -> Attempt:
    """One POST, and what came of it."""
    headers = headers_for(body, event_id=event_id, kind=kind, secrets=secrets, now=clock())
    try:
        status = await post(url, body, headers, timeout)
    except TimeoutError:
        return Attempt(FAILED, None, f"no answer within {timeout:g}s")
    except Exception as exc:  # noqa: BLE001 -- any transport failure is one failed attempt
        return Attempt(FAILED, None, scrub(f"{type(exc).__name__}: {exc}", url))
    if 200 <= status < 300:
        return Attempt(DELIVERED, status)
    return Attempt(FAILED if retryable(status) else REFUSED, status, f"HTTP {status}")
