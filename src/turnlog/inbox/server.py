"""Serving the app with uvicorn inside a running event loop, on a socket bound beforehand.

Binding first means a taken port is an ``OSError`` naming the address, in the caller's hands
(uvicorn would log it and ``sys.exit`` from inside its task), and port 0 gives a free port whose
number is known before the first request. Signals stay with the caller (the CLI's
:class:`~turnlog.cli.app.Interrupts`, or a test): uvicorn's own handlers would re-raise them
after a graceful stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class InboxServer:
    """``await start()`` serves ``app`` on ``host:port`` (0: any free port); ``await stop()``."""

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 8765) -> None:
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise OSError(f"cannot serve the inbox on {host}:{port}: {exc.strerror}") from None
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,  # a URL may carry a filter; nothing of a session is logged
            log_level="warning",
            timeout_graceful_shutdown=2,
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self, timeout: float = 10.0) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._server.started:
            if self._task.done():
                await self._task  # raises what stopped it
                raise RuntimeError("the inbox server stopped while starting")
            if loop.time() > deadline:
                raise TimeoutError(f"the inbox server did not start within {timeout:g}s")
            await asyncio.sleep(0.02)

    def request_stop(self) -> None:
        self._server.should_exit = True

    async def wait(self) -> None:
        """Until the server stops (after :meth:`request_stop`)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        self.request_stop()
        try:
            if self._task is not None:
                await self._task
        finally:
            self._sock.close()
