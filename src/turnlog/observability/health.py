"""``/metrics``, ``/healthz`` and ``/readyz`` on one port, served from the component's own loop.

A few lines of asyncio rather than a web framework or prometheus_client's threaded server: the
readiness answer reads the component's state (owned partitions, a finished catch-up), which
lives on the event loop, and a scrape must not race it from another thread.

``/healthz`` answers 200 while the loop runs (a wedged loop answers nothing, which is the
point); ``/readyz`` answers 200 only when ``ready()`` says so, else 503 -- with why, when
``why()`` knows (a service waiting for a broker it has not reached yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from turnlog.observability.metrics import REGISTRY

log = logging.getLogger(__name__)

#: How long a client may take to send its request line and headers.
_REQUEST_SECONDS = 5.0


class HealthServer:
    """Serves the metrics of ``registry`` and the health of one component on ``port``
    (0 picks a free port: read :attr:`port` after :meth:`start`)."""

    def __init__(
        self,
        port: int,
        *,
        host: str = "0.0.0.0",
        registry: CollectorRegistry | None = None,
        ready: Callable[[], bool] = lambda: True,
        why: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._host = host
        self._port = port
        self._registry = REGISTRY if registry is None else registry
        self._ready = ready
        self._why = why
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        log.info("serving /metrics, /healthz and /readyz on port %d", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)
            self._server = None

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def answer(self, path: str) -> tuple[int, str, bytes]:
        """Status, content type and body for a GET of ``path``."""
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self._registry)
        if path == "/healthz":
            return 200, "text/plain; charset=utf-8", b"ok\n"
        if path == "/readyz":
            try:
                ready = self._ready()
            except Exception:
                log.exception("readiness check failed")
                ready = False
            if ready:
                return 200, "text/plain; charset=utf-8", b"ready\n"
            why = self._why()
            text = "not ready\n" if not why else f"not ready: {why}\n"
            return 503, "text/plain; charset=utf-8", text.encode()
        return 404, "text/plain; charset=utf-8", b"not found\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_REQUEST_SECONDS):
                request = await reader.readline()
                while (await reader.readline()).strip():
                    pass  # headers: nothing here needs them
            parts = request.decode("latin-1").split()
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain; charset=utf-8", b"GET only\n"
            else:
                status, ctype, body = self.answer(parts[1])
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(
                status, "Service Unavailable"
            )
            head = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if parts[:1] == ["HEAD"] else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, OSError):
            pass  # a client that went away or never asked: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
