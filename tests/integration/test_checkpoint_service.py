"""The checkpoint service's rules that need a broker (issue 39), each on a real one.

- A flush with the broker stopped and a pause in flight reports that pause (thread and
  checkpoint, why), as text the log scrubber leaves as it is, and never raises. Before, aiokafka's
  flush returned without a word and ``flush_failures`` stayed empty.
- The crash window: a process killed between an unfinalized write and its finalization leaves a
  pause that its thread's owner expires with the reason ``unfinalized`` -- never resumed. Before,
  no write could be unfinalized.
- "Oldest first" is the log's order: three pauses of one thread with ids that sort the other
  way (cp-9, cp-10, cp-11) and sequences that disagree come back in the order written, read by
  another process. Before, the order was (sequence, checkpoint id as text).
- A worker started while its broker is down waits it out as a service (not ready meanwhile,
  under the outage budget) and owns its partitions once the broker is back. Before, it exited 4
  after ``TURNLOG_CONNECT_TIMEOUT``.

The outage tests stop a broker of their own (``own_broker``), never the shared one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.brokers import OwnBroker
from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, axes, sample_checkpoint, with_keyring
from tests.integration.cli_support import Cli, Spawned, cli_env
from tests.integration.test_observability import http_get
from tests.integration.worker_support import Follower, running_worker, wait_owned
from tests.kafka_helpers import eventually, wait_until_consumed
from turnlog import Settings, Turnlog
from turnlog.kafka.finalization import UNFINALIZED_REASON
from turnlog.kafka.topics import TopicSet
from turnlog.observability.logs import scrub
from turnlog.tokens import Keyring, write_keypair

pytest_plugins = ["tests.brokers"]

REPO = Path(__file__).resolve().parents[2]


def _env(bootstrap: str, names: Names, root: Path, **more: str) -> dict[str, str]:
    """The ``TURNLOG_*`` of a deployment signing with the key pair in ``root/keys``."""
    write_keypair(root / "keys", "k1")
    env = cli_env(bootstrap, names.prefix, names.app, root)
    path = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, **more}


def _proc(env: dict[str, str], *args: str) -> dict[str, object]:
    ran = subprocess.run(
        [sys.executable, "-m", "tests.integration.checkpoint_proc", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [line for line in ran.stdout.splitlines() if line.startswith("{")]
    assert lines, (ran.returncode, ran.stdout, ran.stderr[-3000:])
    found: dict[str, object] = json.loads(lines[-1])
    found["returncode"] = ran.returncode
    return found


async def test_a_flush_with_the_broker_stopped_reports_the_pause_in_flight_scrubbed(
    own_broker: OwnBroker, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="turnlog")
    env = _env(own_broker.bootstrap, names, tmp_path, TURNLOG_BROKER_TIMEOUT="50")
    async with Turnlog(Settings.from_env(env)) as tl:
        await tl.checkpoints.ensure_ready()
        await tl.checkpoints.flush()
        assert tl.checkpoints.flush_failures == ()  # nothing in flight, nothing failed
        await own_broker.stop()
        cp = sample_checkpoint("flush-1", checkpoint_id="cp-flush")
        pausing = asyncio.create_task(tl.pause(cp, request=REQUEST))

        async def waiting() -> bool:  # the pause is in flight: its writer met the outage
            return any("pause recorder" in r.getMessage() for r in caplog.records)

        await eventually(waiting, timeout=60.0, interval=0.1)
        await tl.checkpoints.flush()  # never raises
        failures = tl.checkpoints.flush_failures
        assert len(failures) == 1, failures
        assert failures[0].startswith("thread flush-1, checkpoint cp-flush: "), failures
        assert "not acknowledged by the broker" in failures[0]
        assert [scrub(f) for f in failures] == list(failures)  # safe to log as it stands
        assert not pausing.done()  # the write itself still rides the outage out

        await own_broker.start()
        paused = await asyncio.wait_for(pausing, 120)
        await tl.checkpoints.flush()  # it landed: nothing new to report
        assert tl.checkpoints.flush_failures == failures
        assert paused.token not in "".join(failures)


async def test_a_process_killed_in_the_crash_window_leaves_a_pause_its_owner_expires(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    env = _env(bootstrap, names, tmp_path, TURNLOG_FINALIZE_TIMEOUT="1")
    settings = Settings.from_env(env)
    Cli(env)("topics", "ensure")
    died = _proc(env, "crash", "crash-1", "cp-crash")
    assert died["returncode"] == -signal.SIGKILL and died["token"] == "", died
    # Beside it on the same thread's partition, a pause its writer finalized in time: its
    # token comes with the finalization, and it resumes like any other.
    cp = sample_checkpoint("crash-1", checkpoint_id="cp-kept")
    tl = Turnlog(settings.with_(finalize_timeout_seconds=3600))
    paused = await tl.pause(cp, request=REQUEST, finalized=False)
    assert paused.token == ""
    kept = await tl.checkpoints.finalize(paused)
    assert kept.token and kept.pause.token_id == paused.pause.token_id
    # Before any owner decides: status and pending count the crashed writer's pause apart.
    cli = Cli(env)
    status = cli.json("status")
    pending = cli.json("pending")
    assert isinstance(status, dict) and isinstance(pending, dict)
    assert status["pending"] == 2 and status["unfinalized"] == 1, status
    assert pending["unfinalized"] == 1, pending
    marked = {row["token_id"]: row["unfinalized"] for row in pending["pending"]}
    assert marked == {died["token_id"]: True, kept.pause.token_id: False}, marked
    dep = with_keyring(settings, Keyring.from_directory(tmp_path / "keys"))
    follower = Follower(bootstrap, TopicSet.from_settings(settings))
    await follower.start()
    try:
        # The next owner: a worker started after the crash.
        async with tl, running_worker(dep, tmp_path / "w", expiry_interval=0.2) as worker:
            await wait_owned([worker], settings.partitions)
            await tl.answer(kept.token, ANSWER, **axes(cp))  # type: ignore[arg-type]
            await follower.wait_for(lambda: follower.resumed(kept.pause.token_id), timeout=60)
            token_id = str(died["token_id"])
            expired = await follower.wait_for(lambda: follower.expired(token_id), timeout=60)
            consumed = await follower.wait_for(lambda: follower.consumed(token_id), timeout=60)
            assert [e.reason for e in expired] == [UNFINALIZED_REASON]
            assert expired[0].checkpoint_id == "cp-crash"
            assert [c.outcome for c in consumed] == ["expired"]
            assert follower.resumed(token_id) == []
            assert follower.expired(kept.pause.token_id) == []
            assert worker.store.is_spent(token_id)
            assert len(follower.resumed(kept.pause.token_id)) == 1  # resumed, not expired
            await wait_until_consumed(bootstrap, settings.application_id, dep.topics.answers)
        # The audit judges the crash window's expiry as any other: once, with its consumption.
        audit = await asyncio.to_thread(cli.json, "audit")
        assert isinstance(audit, dict)
        assert (audit["resumed"], audit["expired"], audit["violations"]) == (1, 1, 0), audit
    finally:
        await follower.stop()


async def test_a_thread_s_pauses_come_back_in_the_log_s_order_in_another_process(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    env = _env(bootstrap, names, tmp_path / "writer")
    async with Turnlog(Settings.from_env(env)) as tl:
        for checkpoint_id in ("cp-9", "cp-10", "cp-11"):  # the quick start's form: no sequence
            cp = replace(sample_checkpoint("order-1", checkpoint_id=checkpoint_id), sequence=0)
            await tl.pause(cp, request=REQUEST)
        for sequence, checkpoint_id in ((3, "cp-a"), (2, "cp-b"), (1, "cp-c")):
            cp = sample_checkpoint("order-2", checkpoint_id=checkpoint_id, sequence=sequence)
            await tl.pause(cp, request=REQUEST)
    other = {**env, "TURNLOG_STATE_DIR": str(tmp_path / "reader")}
    assert _proc(other, "read", "order-1") == {
        "listed": ["cp-9", "cp-10", "cp-11"], "latest": "cp-11", "returncode": 0,
    }  # fmt: skip
    # A caller's sequence is its own field: it does not reorder what the log holds.
    assert _proc(other, "read", "order-2") == {
        "listed": ["cp-a", "cp-b", "cp-c"], "latest": "cp-c", "returncode": 0,
    }  # fmt: skip


async def test_a_worker_started_while_its_broker_is_down_waits_it_out_and_owns_its_partitions(
    own_broker: OwnBroker, names: Names, tmp_path: Path
) -> None:
    connect = 2
    env = _env(
        own_broker.bootstrap, names, tmp_path,
        TURNLOG_CONNECT_TIMEOUT=str(connect), TURNLOG_BROKER_TIMEOUT="180",
    )  # fmt: skip
    cli = Cli(env)
    cli("topics", "ensure")
    await own_broker.stop()
    worker = Spawned(cli, "worker", "--metrics-port", "0")
    try:
        found = re.search(r"port (\d+)", worker.wait_for_line("metrics and health on port"))
        assert found is not None
        port = int(found.group(1))
        line = await asyncio.to_thread(worker.wait_for_line, "never reached yet", 60)
        assert "TURNLOG_BROKER_TIMEOUT" in line and "waits it out" in line, line
        status, body = await http_get(port, "/readyz")
        assert status == 503 and "waiting for the broker" in body, (status, body)
        # Well past the connect budget (the old exit 4 came in it), still running, not ready.
        with pytest.raises(subprocess.TimeoutExpired):
            await asyncio.to_thread(worker.proc.wait, connect * 3)
        assert (await http_get(port, "/readyz"))[0] == 503

        await own_broker.start()

        async def ready() -> bool:  # ready: it owns (fenced, restored) every partition given
            return (await http_get(port, "/readyz"))[0] == 200

        await eventually(ready, timeout=120.0, interval=0.2)
        assert worker.proc.poll() is None
    finally:
        worker.proc.send_signal(signal.SIGTERM)
        code, _ = await asyncio.to_thread(worker.finish, 60.0)
    assert code == 0, worker.seen
