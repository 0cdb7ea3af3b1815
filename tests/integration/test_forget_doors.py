"""``turnlog forget`` on the protocol doors' topics: a gated MCP tool's recorded result
(``<prefix>mcp-results``) and an A2A task's records (``<prefix>a2a.tasks``) hold the thread's
content too -- the tool's arguments and result, the task's messages and artifacts. Both run
through the real code (the examples' servers, the MCP SDK's client, a2a-sdk's client), then
the threads are forgotten with the CLI: no reader finds their content any more, a running A2A
replica included, and ``--check`` counts the doors' records like the others'."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, TaskState
from a2a.utils.errors import A2AError
from mcp import Client
from mcp_types import CallToolResult, InputRequiredResult

from tests.conftest import Names
from tests.integration.a2a_support import message, replica, send
from tests.integration.cli_support import Cli, cli_env
from tests.integration.test_api import api_settings
from tests.integration.test_mcp import _approve, _load, _retry, _text
from turnlog.a2a import TaskLog, tasks_topic
from turnlog.mcp import results_topic
from turnlog.mcp.results import ResultLog
from turnlog.tokens import peek_claims

pytestmark = pytest.mark.timeout(180)


async def test_forget_tombstones_the_mcp_result_and_the_a2a_task_of_the_thread(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    marker = f"DOOR{uuid.uuid4().hex}"
    mcp_topic, a2a_topic = results_topic(settings).name, tasks_topic(settings)
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    ran: list[str] = []
    async with replica(settings, ran, "replica-a") as a:
        worker = asyncio.create_task(a.tl.run_worker())
        # MCP: the example's gated deploy, approved, run once; its result recorded.
        server, gate = _load().build_server(a.tl, tmp_path / "deploy.log")
        args = {"service": f"{marker}-mcp", "region": "eu-west-1"}
        async with Client(server) as client:
            first = await client.session.call_tool("deploy", args, allow_input_required=True)
            assert isinstance(first, InputRequiredResult) and first.request_state, first
            state = first.request_state
            done = await _retry(client, state, _approve(), args)
            assert isinstance(done, CallToolResult) and marker in _text(done), done
        await gate.close()
        claims = peek_claims(state)
        mcp_thread, token_id = str(claims["thread_id"]), str(claims["jti"])
        # A2A: the example's task, paused (its thread is the task id), approved, completed.
        async with a.client() as client:
            created = await send(client, message(f"deploy {marker}-a2a to eu"))
            task = created.task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
            finished = await send(
                client, message("approve", task_id=task.id, context_id=task.context_id)
            )
        assert finished.task.status.state == TaskState.TASK_STATE_COMPLETED, finished
        assert ran == [f"deployed {marker}-a2a to eu"]

        before = await asyncio.to_thread(cli, "forget", mcp_thread, "--check", check=1)
        assert f"1 record(s) of thread {mcp_thread!r} holding content on {mcp_topic}" in (
            before.stdout
        ), before.stdout
        mcp_forgot = await asyncio.to_thread(cli, "forget", mcp_thread, "--yes")
        a2a_forgot = await asyncio.to_thread(cli, "forget", task.id, "--yes")
        assert f"1 tombstone(s) on {mcp_topic}" in mcp_forgot.stdout.splitlines()
        assert f"0 tombstone(s) on {a2a_topic}" in mcp_forgot.stdout.splitlines()
        tombstoned = [
            int(line.split()[0])
            for line in a2a_forgot.stdout.splitlines()
            if line.endswith(f" on {a2a_topic}")
        ]
        assert tombstoned and tombstoned[0] >= 3, a2a_forgot.stdout  # created, paused, done

        # The recorded result is gone for every reader (a retry of the state finds none).
        results = ResultLog(settings)
        try:
            found = await results.find(
                mcp_thread, token_id, since=datetime.fromtimestamp(claims["iat"], UTC)
            )
        finally:
            await results.close()
        assert found is None, found
        # The task is gone from a replica started now, and from the one that ran it.
        async with TaskLog(settings) as fresh:
            await fresh.caught_up()
            assert task.id not in fresh.fold.tasks
            assert task.id not in fresh.fold.links
        await a.door.tasks.caught_up()
        assert a.door.tasks.fold.tasks.get(task.id) is None
        async with a.client() as client:
            with pytest.raises(A2AError):
                await client.get_task(GetTaskRequest(id=task.id))
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
