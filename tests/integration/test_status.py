"""`turnlog status` as an operator reads it: the worker group's lag on the answers topic rises
while the worker is stopped and falls to zero once it is back; pending pauses and the oldest;
which worker owns which partitions."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Names
from tests.integration.cli_support import Cli, Spawned, cli_env
from tests.integration.test_cli_observability import RESPONSE, _pause


@pytest.fixture
def cli(bootstrap: str, names: Names, tmp_path: Path) -> Iterator[Cli]:
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    yield cli


def _status(cli: Cli) -> dict[str, Any]:
    report = cli.json("status")
    assert isinstance(report, dict)
    return report


async def _until(cli: Cli, check: Any, timeout: float = 45.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        report = await asyncio.to_thread(_status, cli)
        if check(report):
            return report
        assert time.monotonic() < deadline, report
        await asyncio.sleep(0.2)


def _stop(worker: Spawned) -> None:
    worker.proc.send_signal(signal.SIGTERM)
    code, _ = worker.finish(45.0)
    assert code == 0, worker.seen


async def test_status_shows_lag_rise_while_the_worker_is_stopped_and_fall_after(
    cli: Cli, tmp_path: Path
) -> None:
    first, first_axes = _pause(cli, tmp_path, "status-1")
    second, second_axes = _pause(cli, tmp_path, "status-2")
    before = _status(cli)
    assert before["pending"] == 2 and before["answered_not_resumed"] == 0
    assert before["oldest_pending"]["thread_id"] == "status-1"
    assert [p["partition"] for p in before["partitions"]] == [0, 1, 2]

    worker = Spawned(cli, "worker")
    try:
        worker.wait_for_line("Ctrl-C stops")
        cli("answer", first, "--response", RESPONSE, *first_axes)
        running = await _until(
            cli,
            lambda r: (
                r["answered_not_resumed"] == 0
                and r["pending"] == 1
                and [m["partitions"] for m in r["members"]] == [[0, 1, 2]]
            ),
        )
    finally:
        await asyncio.to_thread(_stop, worker)
    assert running["group_state"] == "Stable"
    assert running["oldest_pending"]["thread_id"] == "status-2"
    committed = [p for p in running["partitions"] if p["committed"] is not None]
    assert committed and all(p["lag"] == 0 for p in running["partitions"])

    # The worker is gone: an answer now waits on the broker, and status says so.
    cli("answer", second, "--response", RESPONSE, *second_axes)
    stopped = _status(cli)
    assert stopped["answered_not_resumed"] == 1 and stopped["members"] == []
    assert stopped["pending"] == 1
    assert sum(p["lag"] for p in stopped["partitions"]) == 1

    worker = Spawned(cli, "worker")
    try:
        worker.wait_for_line("Ctrl-C stops")
        after = await _until(cli, lambda r: r["answered_not_resumed"] == 0 and r["pending"] == 0)
    finally:
        await asyncio.to_thread(_stop, worker)
    assert after["oldest_pending"] is None

    table = cli("status")
    assert "answered, not yet resumed: 0" in table.stdout
    assert "pending (waiting for a person): 0" in table.stdout
    _the_readme_shows_this_shape(running)


def _the_readme_shows_this_shape(report: dict[str, Any]) -> None:
    """The README's `turnlog status --json` example has the keys a real report has."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Operating it") :]
    block = section[section.index("$ turnlog status --json\n") :].split("\n", 1)[1]
    shown = json.loads(block[: block.index("\n```")])
    assert shown.keys() == report.keys()
    assert shown["oldest_pending"].keys() == report["oldest_pending"].keys()
    assert shown["partitions"][0].keys() == report["partitions"][0].keys()
    assert shown["members"][0].keys() == report["members"][0].keys()
