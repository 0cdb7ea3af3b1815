"""examples/a2a_server.py as the issue runs it: two processes of the example are one agent, on
the real broker, driven from outside with a2a-sdk's own client over HTTP -- the calls of
docs/snippets/a2a_client.py, which the A2A page shows. A task created through one process is
read and continued through the other after the first was SIGKILLed; the deploy line is written
once, and a retry of the continuing message gets the finished task back."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from a2a.types.a2a_pb2 import TaskState

from tests.conftest import Names
from tests.integration.a2a_support import EXAMPLE
from tests.integration.cli_support import Cli
from tests.integration.example_server import example_server
from tests.integration.test_api import api_settings
from turnlog import Turnlog

pytestmark = pytest.mark.timeout(180)
CLIENT = EXAMPLE.parents[1] / "docs" / "snippets" / "a2a_client.py"


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


def _snippet() -> ModuleType:
    spec = importlib.util.spec_from_file_location("a2a_client_snippet", CLIENT)
    if spec is None or spec.loader is None:
        raise ImportError(CLIENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        with (
            example_server(EXAMPLE, env) as (first, first_url),
            example_server(EXAMPLE, env) as (second, second_url),
        ):
            await asyncio.gather(_ready(first, first_url), _ready(second, second_url))
            said = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, str(CLIENT), first_url, "deploy billing to eu"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert said.returncode == 0, said.stderr
            task_id, context_id, state, question = said.stdout.strip().split(" ", 3)
            assert state == "TASK_STATE_INPUT_REQUIRED", said.stdout
            assert question == "Deploy billing to eu? Reply approve or reject."
            pending = await asyncio.to_thread(Cli(env).json, "pending")
            assert isinstance(pending, dict)
            assert [p["thread_id"] for p in pending["pending"]] == [task_id]

            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            client = _snippet()
            seen = await client.read_task(second_url, task_id)
            assert seen.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            ids = {"task_id": task_id, "context_id": context_id, "message_id": "m-approve"}
            done = await client.send_text(second_url, "approve", **ids)
            assert done.status.state == TaskState.TASK_STATE_COMPLETED, done
            assert client.status_line(done).endswith("TASK_STATE_COMPLETED deployed billing to eu")
            again = await client.send_text(second_url, "approve", **ids)  # a retry
            assert again.status.state == TaskState.TASK_STATE_COMPLETED
            assert deploys.read_text() == "deployed billing to eu\n"
        assert not worker.done()
