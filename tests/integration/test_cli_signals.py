"""Ctrl-C during a long-running verb ends it cleanly: exit 0 or 130, at most one line, no
traceback -- also while it is busy with something that does not look at the stop flag (the
worker restoring its partitions, ``project`` catching up).

Before: a SIGINT that came before the verb installed its handlers was lost (the verb ran on),
and one during a catch-up was only seen once the catch-up was over.

The worker tests also catch a leak of the worker's own: stopped while it joins its group, the
assignment's take runs after ``ResumeWorker.stop()`` closed the owners, and its fenced
producers are never closed ("Unclosed AIOKafkaProducer" on stderr at exit).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.conftest import Names
from tests.deployment import REQUEST, make_deployment, sample_checkpoint
from tests.integration.cli_support import EXIT_INTERRUPTED, Cli, Spawned, cli_env
from turnlog.kafka.partitioning import partition_for
from turnlog.kafka.topics import admin_client
from turnlog.producers.pauses import PauseRecorder

PAUSES = 30_000
#: The graceful stop gets 10 s, the cancellation after it 10 s more: a clean exit comes well
#: within this, a hang never does.
EXIT_WITHIN = 45.0


@pytest.fixture
def cli(bootstrap: str, names: Names, tmp_path: Path) -> Iterator[Cli]:
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    yield cli


async def _many_pauses(bootstrap: str, names: Names, tmp_path: Path, count: int) -> None:
    """``count`` pauses on the pauses topic, so that a restore or a catch-up takes a while."""
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "filler", partitions=3)
    recorder = PauseRecorder(dep.settings, dep.issuer)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    await producer.start()
    try:
        sends = []
        for i in range(count):
            thread = f"filler-{i}"
            _, key, value = recorder.prepare(sample_checkpoint(thread), request_json=REQUEST)
            sends.append(
                await producer.send(
                    dep.topics.pauses, value, key=key, partition=partition_for(thread, 3)
                )
            )
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


async def _members_assigned(bootstrap: str, group: str, timeout: float = 60) -> None:
    """Until the group has a member with partitions: the worker is fencing and restoring."""
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            [response] = await admin.describe_consumer_groups([group])
            for described in response.to_object()["groups"]:
                if any(m["member_assignment"] for m in described["members"]):
                    return
            await asyncio.sleep(0.05)
        raise AssertionError(f"group {group} had no member with partitions in {timeout:.0f}s")
    finally:
        await admin.close()


def _clean(code: int, after: list[str]) -> None:
    assert code in (0, EXIT_INTERRUPTED), (code, after)
    assert len(after) <= 1, after
    assert not any("Traceback" in line for line in after), after


async def test_sigint_while_the_worker_restores_exits_cleanly(
    cli: Cli, bootstrap: str, names: Names, tmp_path: Path
) -> None:
    await _many_pauses(bootstrap, names, tmp_path, PAUSES)
    worker = Spawned(cli, "worker")
    worker.wait_for_line("Ctrl-C stops")
    await _members_assigned(bootstrap, names.app)
    sent = time.monotonic()
    worker.proc.send_signal(signal.SIGINT)
    code, after = await asyncio.to_thread(worker.finish, EXIT_WITHIN)
    assert time.monotonic() - sent < EXIT_WITHIN
    _clean(code, after)
    # It left the store closed: the next worker opens it.
    again = Spawned(cli, "worker")
    again.wait_for_line("Ctrl-C stops")
    again.proc.send_signal(signal.SIGTERM)
    code, after = await asyncio.to_thread(again.finish, EXIT_WITHIN)
    _clean(code, after)


async def test_sigint_while_project_catches_up_exits_cleanly(
    cli: Cli, bootstrap: str, names: Names, tmp_path: Path
) -> None:
    await _many_pauses(bootstrap, names, tmp_path, PAUSES)
    projector = Spawned(cli, "project")
    projector.wait_for_line("Ctrl-C stops")
    sent = time.monotonic()
    projector.proc.send_signal(signal.SIGINT)
    code, after = await asyncio.to_thread(projector.finish, EXIT_WITHIN)
    took = time.monotonic() - sent
    _clean(code, after)
    assert not any("caught up" in line for line in projector.seen), projector.seen
    assert took < 10, f"the catch-up ran on for {took:.1f}s after Ctrl-C"
    # The store was closed cleanly, kept what it had applied, and catches up from there.
    rows: list[object] = []
    after: list[str] = []
    while True:  # a page at a time, as pending prints them
        page = cli.json("pending", "--limit", "10000", *after)
        assert isinstance(page, dict)
        rows += page["pending"]
        if not page.get("next"):
            break
        after = ["--after", page["next"]]
    assert len(rows) == PAUSES


@pytest.mark.parametrize("verb", ["worker", "project"])
def test_sigint_right_after_start_is_not_lost(cli: Cli, verb: str) -> None:
    """A signal as early as the verb can take it, before it has started any client."""
    spawned = Spawned(cli, verb)
    spawned.wait_for_line("Ctrl-C stops")
    spawned.proc.send_signal(signal.SIGINT)
    code, after = spawned.finish(EXIT_WITHIN)
    _clean(code, after)


def test_sigint_while_following_stops_the_projector_gracefully(cli: Cli) -> None:
    spawned = Spawned(cli, "project")
    spawned.wait_for_line("; following")
    spawned.proc.send_signal(signal.SIGINT)
    code, after = spawned.finish(EXIT_WITHIN)
    assert code == 0 and after == [], (code, after)
