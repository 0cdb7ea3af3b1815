"""A webhook receiver for the notifier's tests: an HTTP server on a thread of the test process
that keeps every request it gets, and answers by path -- ``/ok`` 200, ``/fail`` 500, ``/slow``
after ``slow_seconds``, ``/paced`` 200 after ``pace_seconds`` (so a kill lands mid-stream)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() when it arrived

    @property
    def data(self) -> Any:
        return json.loads(self.body)

    @property
    def key(self) -> str:
        return self.headers["turnlog-idempotency-key"]


class Receiver:
    def __init__(
        self, *, slow_seconds: float = 5.0, pace_seconds: float = 0.3, port: int = 0
    ) -> None:
        self.slow_seconds = slow_seconds
        self.pace_seconds = pace_seconds
        self._hits: list[Hit] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver._hits.append(Hit(self.path, headers, body, time.time()))
                status = 500 if self.path == "/fail" else 200
                if self.path == "/slow":
                    time.sleep(receiver.slow_seconds)  # the receiver's behaviour, not a wait
                elif self.path == "/paced":
                    time.sleep(receiver.pace_seconds)
                try:
                    self.send_response(status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the notifier gave up on us meanwhile

            def log_message(self, *args: Any) -> None:
                pass

        # port: the port of a receiver closed before, to play a webhook back after an outage
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str | None = None) -> list[Hit]:
        with self._lock:
            return [h for h in self._hits if path is None or h.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


async def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` past ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = check()
        if found:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        await asyncio.sleep(0.05)
