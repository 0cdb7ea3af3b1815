"""The ``turnlog`` command, driven as a person would drive it, against the real broker.

Every verb runs in a subprocess with the deployment in its environment, so what is checked is
what a shell sees: stdout, stderr and the exit code.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.cli_support import EXIT_BROKER, EXIT_REFUSED, Cli, cli_env


@pytest.fixture
def cli(bootstrap: str, names: Names, tmp_path: Path) -> Iterator[Cli]:
    yield Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))


def test_the_whole_tour(cli: Cli, tmp_path: Path) -> None:
    keys = cli.json("keys", "new", "--kid", "k1")
    assert isinstance(keys, dict) and Path(str(keys["private"])).exists()

    first = cli.json("topics", "ensure")
    assert isinstance(first, dict) and len(first["created"]) == 5
    again = cli.json("topics", "ensure")
    assert isinstance(again, dict) and again["created"] == [] and len(again["verified"]) == 5
    described = cli.json("topics", "describe")
    assert isinstance(described, list)
    policies = {row["topic"].rsplit(".", 1)[-1]: row["cleanup.policy"] for row in described}
    assert policies == {
        "pauses": "compact",
        "answers": "compact",
        "consumptions": "compact",
        "resumed": "delete",
        "rejections": "delete",
    }

    cp = sample_checkpoint("cli-thread")
    checkpoint_file = tmp_path / "checkpoint.json"
    checkpoint_file.write_text(cp.encode())
    paused = cli.json("pause", str(checkpoint_file))
    assert isinstance(paused, dict)
    token = str(paused["token"])
    assert paused["thread_id"] == "cli-thread"

    pending = cli.json("pending")
    assert isinstance(pending, dict)
    assert [p["token_id"] for p in pending["pending"]] == [paused["token_id"]]

    axes = ["--scope", cp.scope_hash, "--session", cp.session_id, "--run", cp.run_id]
    response = json.dumps({"answers": [{"selections": ["eu"], "other": None}]})
    missing = cli("answer", token, "--response", response, *axes, check=EXIT_REFUSED)
    assert "axis_missing_call" in missing.stderr and "Traceback" not in missing.stderr
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    bad = cli(
        "answer", forged, "--response", response, *axes, "--call", "call-1", check=EXIT_REFUSED
    )
    assert "token_invalid" in bad.stderr
    wrong_run = ["--scope", cp.scope_hash, "--session", cp.session_id, "--run", "other-run"]
    mismatch = cli(
        "answer", token, "--response", response, *wrong_run, "--call", "call-1", check=EXIT_REFUSED
    )
    assert "run_mismatch" in mismatch.stderr

    worker = cli.spawn("worker", "--instance-id", "cli-worker-1")  # static membership
    try:
        sent = cli.json("answer", token, "--response", response, *axes, "--call", "call-1")
        assert isinstance(sent, dict) and sent["answer_id"]
        resumed = cli("tail", "resumed", "--from-beginning", "--max", "1", "--json", timeout=90)
        event = json.loads(resumed.stdout)
        assert event["type"] == "TurnResumed" and event["thread_id"] == "cli-thread"
        assert [m["tool_call_id"] for m in event["history"][-3:]] == ["call-1", "call-2", "call-3"]

        cli("answer", token, "--response", response, *axes, "--call", "call-1")
        rejected = cli("tail", "rejections", "--from-beginning", "--max", "1", "--json", timeout=90)
        assert json.loads(rejected.stdout)["reason"] == "already_consumed"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_err = worker.communicate(timeout=60)
    assert worker.returncode == 0, worker_err
    assert "stopped: resumed 1, rejected 1" in worker_err

    shown = cli.json("show", "cli-thread")
    assert isinstance(shown, dict)
    assert shown["latest"]["state"] == "resumed" and len(shown["history"]) == 1
    assert cli.json("pending") == {
        "pending": [],
        "next": None,
        "unfinalized": 0,
        "claimed_not_finished": [],
        "as_of": shown["as_of"],
    }
    unknown = cli("show", "no-such-thread", check=1)
    assert "no checkpoint recorded" in unknown.stderr

    replayed = cli.json("replay")
    assert isinstance(replayed, dict) and len(str(replayed["digest"])) == 64

    forgotten = cli.json("forget", "cli-thread", "--yes")
    assert isinstance(forgotten, dict)
    assert sorted(forgotten["tombstones"].values()) == [1, 1, 2]


def test_unreachable_broker_is_one_line_and_exit_4(cli: Cli) -> None:
    result = cli(
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--broker-timeout",
        "1",
        "topics",
        "ensure",
        check=EXIT_BROKER,
    )
    assert result.stderr.count("\n") == 1 and "not reachable" in result.stderr


def test_bad_arguments_are_usage_errors(cli: Cli, tmp_path: Path) -> None:
    cli("keys", "new", "--kid", "k1")
    result = cli("pause", str(tmp_path / "missing.json"), check=2)
    assert "cannot read checkpoint" in result.stderr
    assert cli("tail", "nowhere", check=2).stderr.startswith("error:")
    assert cli("answer", "t", "--response", "not json", check=2).stderr.startswith("error:")
    for verb in ("topics", "keys", "broker", "pause", "answer", "worker", "replay", "tail"):
        assert cli(verb, "--help").stdout.strip()
