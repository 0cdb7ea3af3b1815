"""An example server (``examples/*_server.py --port PORT``) in a process of its own, as the
issue's interface starts it: on a free port, stopped (SIGTERM, then SIGKILL) when done."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def example_server(
    example: Path, env: dict[str, str], path: str = ""
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The running process and its URL (``http://127.0.0.1:PORT`` + ``path``); its stderr is
    kept for the test to show when the process exits early."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(example), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process, f"http://127.0.0.1:{port}{path}"
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()
