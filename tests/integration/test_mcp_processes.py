"""examples/mcp_server.py as the issue runs it: server processes over streamable HTTP on the
real broker, driven from outside with the MCP SDK's own client. The process that handed out the
``request_state`` is SIGKILLed before the retry; the retry reaches another process, which
continues the pause; a process started after that one is killed too returns the recorded result
to the same retry, and the deploy line is written once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, TextContent

from tests.conftest import Names
from tests.integration.example_server import example_server
from tests.integration.test_api import api_settings
from turnlog import Turnlog

pytestmark = pytest.mark.timeout(180)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_server.py"
ARGS = {"service": "api", "region": "eu-west-1"}


async def _ready(process: subprocess.Popen[str], url: str, timeout: float = 60) -> None:
    """Wait until the process answers HTTP on its MCP path."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient() as http:
        while True:
            if process.poll() is not None:
                stderr = process.stderr.read() if process.stderr is not None else ""
                raise AssertionError(f"the example exited {process.returncode}: {stderr}")
            try:
                await http.get(url)
                return
            except httpx.TransportError:
                pass
            if loop.time() > deadline:
                raise AssertionError(f"{url} did not answer in {timeout:.0f}s")
            await asyncio.sleep(0.1)


def _killed(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=20)


async def _retry(url: str, state: str) -> CallToolResult:
    approve = {"approval": ElicitResult(action="accept", content={"decision": "approve"})}
    async with Client(url) as client:
        result = await client.session.call_tool(
            "deploy", ARGS, input_responses=approve, request_state=state,
            allow_input_required=True,
        )  # fmt: skip
    assert isinstance(result, CallToolResult), result
    return result


def _text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def test_the_retry_reaches_another_process_after_the_first_was_sigkilled(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    log = tmp_path / "deploy.log"
    env = {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": bootstrap,
        "TURNLOG_TOPIC_PREFIX": names.prefix,
        "TURNLOG_APPLICATION_ID": names.app,
        "TURNLOG_STATE_DIR": str(tmp_path / "state"),
        "TURNLOG_KEYS_DIR": str(tmp_path / "keys"),
        "TURNLOG_PARTITIONS": str(settings.partitions),
        "DEPLOY_LOG": str(log),
    }
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        with example_server(EXAMPLE, env, "/mcp") as (first, url):
            await _ready(first, url)
            async with Client(url) as client:
                asked = await client.session.call_tool("deploy", ARGS, allow_input_required=True)
            assert isinstance(asked, InputRequiredResult) and asked.request_state is not None
            _killed(first)
        with example_server(EXAMPLE, env, "/mcp") as (second, url):
            await _ready(second, url)
            done = await _retry(url, asked.request_state)
            assert _text(done) == "deployed api to eu-west-1"
            _killed(second)
        with example_server(EXAMPLE, env, "/mcp") as (third, url):
            await _ready(third, url)
            again = await _retry(url, asked.request_state)
            assert _text(again) == "deployed api to eu-west-1"
        assert log.read_text().splitlines() == ["deployed api to eu-west-1"]
    await asyncio.wait_for(worker, 30)  # it stopped with the Turnlog, cleanly
