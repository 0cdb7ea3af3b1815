"""`turnlog worker` and `turnlog project` as an operator runs them: `--metrics-port` serves
/healthz, /readyz and /metrics over real HTTP, and `--log-format json --log-level info` writes
one JSON line per answer outcome and per ownership change, with no token in any line."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.cli_support import Cli, Spawned, cli_env
from tests.integration.test_observability import http_get, samples
from tests.kafka_helpers import eventually

RESPONSE = json.dumps({"answers": [{"selections": ["eu"], "other": None}]})


@pytest.fixture
def cli(bootstrap: str, names: Names, tmp_path: Path) -> Iterator[Cli]:
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    yield cli


def _port(spawned: Spawned) -> int:
    line = spawned.wait_for_line("metrics and health on port")
    found = re.search(r"port (\d+)", line)
    assert found is not None, line
    return int(found.group(1))


def _pause(cli: Cli, tmp_path: Path, thread: str) -> tuple[str, list[str]]:
    cp = sample_checkpoint(thread)
    path = tmp_path / f"{thread}.json"
    path.write_text(cp.encode())
    paused = cli.json("pause", str(path))
    assert isinstance(paused, dict)
    axes = ["--scope", cp.scope_hash, "--session", cp.session_id, "--run", cp.run_id]
    return str(paused["token"]), [*axes, "--call", "call-1"]


async def _ready(port: int) -> None:
    async def ready() -> bool:
        return (await http_get(port, "/readyz"))[0] == 200

    await eventually(ready, timeout=60.0, interval=0.2)


async def test_worker_serves_health_and_metrics_and_logs_one_json_line_per_answer(
    cli: Cli, tmp_path: Path
) -> None:
    tokens = []
    answers = []
    for thread in ("obs-cli-1", "obs-cli-2"):
        token, axes = _pause(cli, tmp_path, thread)
        tokens.append(token)
        answers.append(axes)
    worker = Spawned(
        cli, "worker", "--metrics-port", "0", "--log-level", "info", "--log-format", "json"
    )
    try:
        port = _port(worker)
        assert (await http_get(port, "/healthz"))[0] == 200
        await _ready(port)
        sent = []
        for token, axes in [*zip(tokens, answers, strict=True), (tokens[0], answers[0])]:
            out = await asyncio.to_thread(cli.json, "answer", token, "--response", RESPONSE, *axes)
            assert isinstance(out, dict)
            sent.append(str(out["answer_id"]))

        async def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            got = samples((await http_get(port, "/metrics"))[1])
            total = sum(v for (n, _), v in got.items() if n == "turnlog_worker_answers_total")
            return got if total == 3 else {}

        got = await eventually(counted, timeout=60.0, interval=0.2)
    finally:
        worker.proc.send_signal(signal.SIGTERM)
        code, _ = await asyncio.to_thread(worker.finish, 45.0)
    assert code == 0, worker.seen
    name = "turnlog_worker_answers_total"
    assert got[(name, (("outcome", "resumed"), ("reason", "")))] == 2
    assert got[(name, (("outcome", "rejected"), ("reason", "already_consumed")))] == 1

    lines = worker.seen  # every stderr line, those read at the finish included
    records = [json.loads(line) for line in lines if line.startswith("{")]
    by_answer = [r for r in records if r.get("event") == "answer"]
    assert sorted(r["answer_id"] for r in by_answer) == sorted(sent)
    for r in by_answer:
        assert r["level"] == "info" and r["thread_id"].startswith("obs-cli-")
        assert isinstance(r["partition"], int) and isinstance(r["offset"], int)
    assert [r["reason"] for r in by_answer if r["outcome"] == "rejected"] == ["already_consumed"]
    owned = [r for r in records if r.get("event") == "ownership" and r["change"] == "owned"]
    assert sorted(r["partition"] for r in owned) == [0, 1, 2]
    # No token -- nor its signature alone -- in any line the worker wrote.
    for token in tokens:
        signature = token.rsplit(".", 1)[1]
        assert not [line for line in lines if token in line or signature in line]


async def test_project_is_ready_once_caught_up_and_serves_its_metrics(
    cli: Cli, tmp_path: Path
) -> None:
    _pause(cli, tmp_path, "obs-project-1")
    project = Spawned(cli, "project", "--metrics-port", "0")
    try:
        port = _port(project)
        await _ready(port)
        got = samples((await http_get(port, "/metrics"))[1])
        assert (await http_get(port, "/nowhere"))[0] == 404
    finally:
        project.proc.send_signal(signal.SIGTERM)
        code, _ = await asyncio.to_thread(project.finish, 45.0)
    assert code == 0, project.seen
    assert got[("turnlog_projector_caught_up", ())] == 1
    applied = sum(v for (n, _), v in got.items() if n == "turnlog_projector_records_applied_total")
    assert applied >= 1
    lag = [v for (n, _), v in got.items() if n == "turnlog_projector_lag"]
    assert lag and set(lag) == {0.0}
    # The one pause is waiting for a person, since moments ago.
    assert got[("turnlog_pending_pauses", ())] == 1
    assert 0 <= got[("turnlog_oldest_pending_pause_age_seconds", ())] < 600


@pytest.mark.parametrize("verb", [("tail", "resumed", "--max", "0"), ("demo",)])
def test_every_long_running_verb_takes_the_log_flags(cli: Cli, verb: tuple[str, ...]) -> None:
    """tail and demo take --log-level/--log-format like worker and project; a bad value is one
    line naming the flag (exit 2), before anything runs."""
    bad = cli(*verb, "--log-level", "loud", check=2)
    assert "--log-level" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    wrong = cli(*verb, "--log-format", "xml", check=2)
    assert "--log-format" in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
