"""examples/a2a_server.py as the issue runs it: two processes of the example are one agent, on
the real broker, driven from outside with a2a-sdk's own client over HTTP. A task created through
one process is read and continued through the other after the first was SIGKILLed; the deploy
line is written once, and a retry of the continuing message gets the finished task back."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types.a2a_pb2 import GetTaskRequest, TaskState

from tests.conftest import Names
from tests.integration.a2a_support import EXAMPLE, message, send, text_of
from tests.integration.cli_support import Cli
from tests.integration.test_api import api_settings
from turnlog import Turnlog

pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _server(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
        if process.stderr is not None:
            process.stderr.close()


async def _ready(process: subprocess.Popen[str], url: str, timeout: float = 60) -> None:
    """Wait until the agent card is served (the process up, its task log read)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient() as http:
        while True:
            if process.poll() is not None:
                stderr = process.stderr.read() if process.stderr is not None else ""
                raise AssertionError(f"the example exited {process.returncode}: {stderr}")
            try:
                if (await http.get(f"{url}/.well-known/agent-card.json")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if loop.time() > deadline:
                raise AssertionError(f"{url} served no agent card in {timeout:.0f}s")
            await asyncio.sleep(0.2)


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[Client]:
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        yield client
    finally:
        await client.close()


async def test_a_task_made_through_a_killed_process_is_continued_once_through_another(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    deploys = tmp_path / "deploys.log"
    env = {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": bootstrap,
        "TURNLOG_TOPIC_PREFIX": names.prefix,
        "TURNLOG_APPLICATION_ID": names.app,
        "TURNLOG_STATE_DIR": str(tmp_path / "agent-state"),
        "TURNLOG_KEYS_DIR": str(tmp_path / "keys"),
        "TURNLOG_PARTITIONS": "2",
        "TURNLOG_COMMIT_INTERVAL_MS": "50",
        "DEPLOY_LOG": str(deploys),
    }
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        with _server(env) as (first, first_url), _server(env) as (second, second_url):
            await asyncio.gather(_ready(first, first_url), _ready(second, second_url))
            async with _client(first_url) as client:
                created = (await send(client, message("deploy billing to eu"))).task
            assert created.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, created
            assert "approve or reject" in text_of(created.status.message)
            pending = await asyncio.to_thread(Cli(env).json, "pending")
            assert isinstance(pending, dict)
            assert [p["thread_id"] for p in pending["pending"]] == [created.id]

            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            async with _client(second_url) as client:
                seen = await client.get_task(GetTaskRequest(id=created.id))
                assert seen.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
                approve = message("approve", task_id=created.id, context_id=created.context_id)
                done = (await send(client, approve)).task
                assert done.status.state == TaskState.TASK_STATE_COMPLETED, done
                assert text_of(done.status.message) == "deployed billing to eu"
                again = (await send(client, approve)).task
                assert again.status.state == TaskState.TASK_STATE_COMPLETED
            assert deploys.read_text() == "deployed billing to eu\n"
        assert not worker.done()
