"""The command closes the loop alone (issue 28): pause, see what waits, answer it, resumed.

Before, ``pending`` showed a token id but no token, ``pause --json`` left out the four axes, and
global options were refused after the verb, so a person at a shell could not answer a pause
without the library. Each verb runs in a subprocess, as a shell would run it.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.cli_support import Cli, cli_env

RESPONSE = json.dumps({"answers": [{"selections": ["eu"], "other": None}]})
AXES = ("scope", "session", "run", "call")


@pytest.fixture
def cli(bootstrap: str, names: Names, tmp_path: Path) -> Iterator[Cli]:
    yield Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))


def _pause(cli: Cli, tmp_path: Path, thread: str) -> dict[str, object]:
    cp = sample_checkpoint(thread)
    path = tmp_path / f"{thread}.json"
    path.write_text(cp.encode())
    paused = cli.json("pause", str(path))
    assert isinstance(paused, dict)
    assert {k: paused[k] for k in AXES} == {
        "scope": cp.scope_hash,
        "session": cp.session_id,
        "run": cp.run_id,
        "call": "call-1",
    }
    return paused


def test_pause_pending_answer_resumed_from_the_command_alone(
    cli: Cli, tmp_path: Path, names: Names, bootstrap: str
) -> None:
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    by_token = _pause(cli, tmp_path, "loop-by-token")
    by_thread = _pause(cli, tmp_path, "loop-by-thread")

    # Global options after the verb: the environment's prefix is replaced by the same one.
    bare = Cli({k: v for k, v in cli.env.items() if k != "TURNLOG_TOPIC_PREFIX"})
    listed = json.loads(
        bare(
            "pending", "--json", "--with-tokens", "--topic-prefix", names.prefix,
            "--bootstrap-servers", bootstrap,
        ).stdout
    )  # fmt: skip
    rows = {row["thread_id"]: row for row in listed["pending"]}
    assert set(rows) == {"loop-by-token", "loop-by-thread"}
    row = rows["loop-by-token"]
    assert row["token_id"] == by_token["token_id"]
    assert {k: row[k] for k in AXES} == {k: by_token[k] for k in AXES}
    assert row["token"] and row["expires_in"].startswith("6d 23h")
    # Without --with-tokens, no token is printed.
    assert all("token" not in r for r in json.loads(cli("pending", "--json").stdout)["pending"])
    table = cli("pending").stdout
    assert "6d 23h" in table and "call-1" in table

    worker = cli.spawn("worker", "--instance-id", "cli-loop-worker")
    try:
        # Everything `answer` needs, as `pending --json --with-tokens` printed it.
        stated = [f"--{axis}={row[axis]}" for axis in AXES]
        sent = cli.json("answer", row["token"], "--response", RESPONSE, *stated, "--wait")
        assert isinstance(sent, dict) and sent["outcome"]["resumed"] is True
        # Or by thread alone: the token signed again from the pause, the axes the pause's own.
        resumed = cli("answer", "--thread", "loop-by-thread", "--response", RESPONSE, "--wait")
        assert "resumed thread loop-by-thread" in resumed.stdout
        again = cli("answer", "--thread", "loop-by-thread", "--response", RESPONSE, check=1)
        assert again.stderr.startswith("error: no pending pause on thread 'loop-by-thread'")
        # The resumed stream as JSON Lines: one compact object a line.
        tail = cli("tail", "resumed", "--from-beginning", "--max", "2", "--json", timeout=90)
        lines = tail.stdout.splitlines()
        assert len(lines) == 2
        assert {json.loads(line)["thread_id"] for line in lines} == set(rows)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_err = worker.communicate(timeout=60)
    assert worker.returncode == 0, worker_err
    assert "stopped: resumed 2, rejected 0" in worker_err
    assert by_thread["token_id"] != by_token["token_id"]


def test_answer_takes_a_token_or_a_thread(cli: Cli) -> None:
    both = cli("answer", "TOKEN", "--thread", "t", "--response", RESPONSE, check=2)
    neither = cli("answer", "--response", RESPONSE, check=2)
    for ran in (both, neither):
        assert ran.lines == ["error: answer takes a TOKEN or --thread THREAD (one of the two)"]
    assert cli("pending", "--with-tokens", check=2).stderr.startswith("error: --with-tokens")


def test_a_token_replaced_by_a_newer_pause_of_its_call_is_refused_as_superseded(
    cli: Cli, tmp_path: Path
) -> None:
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    older = _pause(cli, tmp_path, "paused-twice")
    newer = _pause(cli, tmp_path, "paused-twice")  # the same thread and checkpoint, again
    listed = json.loads(cli("pending", "--json").stdout)["pending"]
    assert [row["token_id"] for row in listed] == [newer["token_id"]]
    stated = [f"--{axis}={older[axis]}" for axis in AXES]
    worker = cli.spawn("worker", "--instance-id", "cli-superseded-worker")
    try:
        refused = cli(
            "answer", str(older["token"]), "--response", RESPONSE, *stated, "--wait", check=3
        )
        (line,) = refused.lines
        assert line.startswith("error: rejected: pause_superseded (step 5): a newer pause")
        assert str(newer["token_id"]) in line
        cli("answer", str(newer["token"]), "--response", RESPONSE, *stated, "--wait")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_err = worker.communicate(timeout=60)
    assert worker.returncode == 0, worker_err
    assert "stopped: resumed 1, rejected 1" in worker_err
