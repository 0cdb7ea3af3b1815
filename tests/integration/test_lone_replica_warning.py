"""A worker on a cluster whose turnlog topics have one replica says so at start, once (issue 27,
item B): a lone replica's controlled shutdown can lose a transaction's commit marker
(KAFKA-20734), so a resume is lost or a refusal written twice; the line says how to avoid it.

The session's broker is one node, so every topic it holds has one replica: ``turnlog worker``
and ``Turnlog.run_worker`` each say it in exactly one line, and go on working.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, make_deployment, sample_checkpoint
from tests.integration.cli_support import Cli, Spawned, cli_env
from tests.integration.test_cli_observability import _port, _ready
from turnlog import Turnlog
from turnlog.tokens import write_keypair

MARK = "KAFKA-20734"


def _is_the_warning(line: str) -> bool:
    return MARK in line and "one replica" in line


async def test_the_worker_command_says_it_in_one_line_and_keeps_working(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    write_keypair(tmp_path / "keys", "k1")
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("topics", "ensure")
    worker = Spawned(cli, "worker", "--metrics-port", "0")
    try:
        port = _port(worker)
        await _ready(port)  # joined, fenced and restored: well past its start
    finally:
        worker.proc.send_signal(signal.SIGTERM)
        code, _ = await asyncio.to_thread(worker.finish, 45.0)
    assert code == 0, worker.seen
    warnings = [line for line in worker.seen if _is_the_warning(line)]
    assert len(warnings) == 1, worker.seen
    [line] = warnings
    assert line.startswith(f"warning: the {names.prefix}* topics have one replica:"), line
    for said in ("replication factor 3", "min.insync.replicas=2", "stop the workers", "audit"):
        assert said in line, said
    assert not [seen for seen in worker.seen if "Traceback" in seen or "error:" in seen]


async def test_run_worker_logs_it_once_at_warning(
    bootstrap: str, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="turnlog")
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state", partitions=3)
    async with Turnlog(dep.settings, keyring=dep.keyring) as tl:
        stop = asyncio.Event()
        worker = asyncio.create_task(tl.run_worker(until=stop))
        try:
            paused = await tl.pause(sample_checkpoint("lone-replica"), request=REQUEST)
            sent = await tl.answer(paused.token, ANSWER, **paused.axes)
            outcome = await tl.outcome(sent.answer_id, timeout=60)
            assert outcome.accepted  # the worker ran through its start and resumed the turn
        finally:
            stop.set()
            await asyncio.wait_for(worker, 60)
    records = [r for r in caplog.records if _is_the_warning(r.getMessage())]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    assert records[0].levelno == logging.WARNING and records[0].name == "turnlog.kafka.topics"
