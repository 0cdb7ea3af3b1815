"""``turnlog forget --erase-within``: the thread's bytes gone from every broker file of the
compacted topics (the protocol doors' and the notifier's too) within the window, on a
deployment made with turnlog's own topic settings and no other write to the thread's
partition -- the broker's files grepped for the thread's markers, the kept thread's markers
still there; ``--check`` says what holds content."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import REQUEST, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.test_api import api_settings
from tests.kafka_helpers import read_to_end
from turnlog import Paused, Turnlog
from turnlog.a2a import TaskLog, tasks_topic
from turnlog.a2a.fold import SAVE, Entry
from turnlog.clock import utc_now
from turnlog.kafka.partitioning import partition_for
from turnlog.mcp import results_topic
from turnlog.mcp.results import RecordedResult, ResultLog
from turnlog.notify import undelivered
from turnlog.notify.waiting import Undelivered
from turnlog.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
WINDOW_SECONDS = 60


def _broker_log_dir(bootstrap: str) -> Path:
    """The data directory of the local broker listening on ``bootstrap``'s port (the tests' broker
    runs on this machine: ``compose/kafka-local/kafka.sh``)."""
    port = bootstrap.rsplit(":", 1)[-1]
    for properties in sorted((ROOT / ".kafka").glob("*/server.properties")):
        text = properties.read_text()
        if re.search(rf"^listeners=.*:{port}\b", text, re.MULTILINE):
            [line] = [x for x in text.splitlines() if x.startswith("log.dirs=")]
            return Path(line.split("=", 1)[1].split(",")[0])
    raise AssertionError(f"no local broker listening on {port} under {ROOT / '.kafka'}")


def _holding(log_dir: Path, topics: list[str], partition: int, marker: bytes) -> list[str]:
    """Every file of the topics' ``partition`` directories (every partition's for the
    notifier's topic, partitioned by key) whose bytes hold ``marker``."""
    found = []
    for topic in topics:
        part = "*" if topic.endswith("notify.undelivered") else str(partition)
        for path in log_dir.glob(f"{topic}-{part}/*"):
            try:
                if marker in path.read_bytes():
                    found.append(path.name)
            except FileNotFoundError:
                continue  # unlinked by the cleaner meanwhile
    return found


async def _pause_and_answer(tl: Turnlog, thread: str, marker: str) -> Paused:
    cp = dataclasses.replace(sample_checkpoint(thread), prompt=f"Continue {marker}-prompt")
    paused = await tl.pause(cp, request=REQUEST)
    answer = {"answers": [{"selections": ["eu"], "other": f"{marker}-answer"}]}
    sent = await tl.answer(paused.token, answer, **paused.axes)
    assert (await tl.outcome(sent.answer_id, timeout=60)).accepted
    return paused


async def _content_keys(
    bootstrap: str, topic: str, partition: int, threads: tuple[str, ...]
) -> list[bytes]:
    """The key of each thread's one sealed resumed turn, as the keys topic holds it."""
    found = {
        bytes(r.key or b"").partition(b"\x00")[0].decode(): bytes(r.value)
        for r in await read_to_end(bootstrap, topic)
        if r.partition == partition and r.value is not None
    }
    return [found[thread] for thread in threads]


async def _notices_not_delivered(settings: Settings, markers: dict[str, str]) -> None:
    """What a notifier writes for each thread while its webhook is down: a notice delivered
    since (kept, then tombstoned: its bytes still in the log) and one still waiting."""
    await undelivered.ensure(settings, 3)
    outbox = undelivered.Outbox(settings)
    await outbox.start()
    try:
        now = utc_now()
        for thread, marker in markers.items():
            for n, state in enumerate(("delivered", "waiting")):
                body = json.dumps({"thread_id": thread, "summary": f"{marker}-notice-{state}"})
                entry = Undelivered(
                    lane="lane",
                    event_id=uuid.uuid4().hex,
                    token_id=f"token-{thread}",
                    kind="pause.recorded",
                    body=body.encode(),
                    seq=n,
                    first_at=now,
                    give_up_at=now + timedelta(hours=1),
                    thread_id=thread,
                )
                await outbox.keep(entry)
                if state == "delivered":
                    await outbox.drop(entry)
    finally:
        await outbox.stop()


async def _door_records(settings: Settings, markers: dict[str, str]) -> None:
    """What the protocol doors write for each thread, through their own logs: a gated MCP
    tool's recorded result, and an A2A task saved (the door's thread is the task id)."""
    results = ResultLog(settings)
    try:
        for thread, marker in markers.items():
            await results.record(
                RecordedResult(
                    thread,
                    f"token-{thread}",
                    "deploy",
                    {"content": [{"type": "text", "text": f"{marker}-result"}]},
                    "claim",
                    "replica",
                    utc_now().isoformat(),
                )
            )
    finally:
        await results.close()
    async with TaskLog(settings) as tasks:
        for thread, marker in markers.items():
            saved = Entry(SAVE, thread, "alice", uuid.uuid4().hex, state="TASK_STATE_WORKING",
                          task=f"{marker}-task".encode())  # fmt: skip
            assert await tasks.write(saved)


@pytest.mark.timeout(240)
async def test_forget_erase_within_leaves_no_byte_of_the_thread_in_any_broker_file(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    # The workers seal (TURNLOG_SEAL): the resumed turns' text is on no topic in the clear, and
    # each turn's key on the keys topic is erased like the rest.
    settings = api_settings(bootstrap, names, tmp_path).with_(partitions=3, seal=True)
    log_dir = _broker_log_dir(bootstrap)
    gone_marker, kept_marker = f"GONE{uuid.uuid4().hex}", f"KEPT{uuid.uuid4().hex}"
    # Two threads on the same partition: the kept one must survive the cleaning.
    gone = f"erase-gone-{names.app}"
    kept = next(
        t for i in range(1000) if partition_for(t := f"erase-kept-{i}", 3) == partition_for(gone, 3)
    )
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        try:
            await _pause_and_answer(tl, gone, gone_marker)
            await _pause_and_answer(tl, kept, kept_marker)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
    await _notices_not_delivered(settings, {gone: gone_marker, kept: kept_marker})
    await _door_records(settings, {gone: gone_marker, kept: kept_marker})
    compacted = [f"{names.prefix}{t}" for t in ("pauses", "answers", "consumptions")]
    compacted += [results_topic(settings).name, tasks_topic(settings)]
    compacted.append(undelivered.topic_name(settings))
    compacted.append(f"{names.prefix}keys")
    p = partition_for(gone, 3)
    assert _holding(log_dir, compacted, p, gone_marker.encode()), "the markers were never written"
    # Sealed: neither thread's text is in any file of the resumed topic.
    streams = [f"{names.prefix}resumed", f"{names.prefix}rejections"]
    for marker in (gone_marker, kept_marker):
        assert not _holding(log_dir, streams, p, marker.encode())
    gone_key, kept_key = await _content_keys(bootstrap, f"{names.prefix}keys", p, (gone, kept))
    assert _holding(log_dir, compacted, p, gone_key)

    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    before = json.loads(cli("forget", gone, "--check", "--json", check=1).stdout)
    assert before["erased"] is False and sorted(before["left"].values()) == [1, 1, 1, 1, 1, 1, 2]
    began = time.time()
    ran = cli("forget", gone, "--yes", "--erase-within", f"{WINDOW_SECONDS}s", timeout=180)
    erased_after = time.time() - began
    lines = ran.stdout.splitlines()
    assert "1 tombstone(s) on " + compacted[0] in lines, lines
    assert "1 tombstone(s) on " + compacted[3] in lines, lines  # the tool's result
    assert "1 tombstone(s) on " + compacted[4] in lines, lines  # the task's one record
    assert "1 tombstone(s) on " + compacted[5] in lines, lines  # the one not delivered yet
    assert "1 tombstone(s) on " + compacted[6] in lines, lines  # the resumed turn's key
    assert any(line.startswith(f"lowered on {compacted[4]}: ") for line in lines), lines
    assert any(line.startswith(f"lowered on {compacted[0]}: ") for line in lines), lines
    assert lines[-1].startswith("erased: no record of thread"), lines

    # The broker's files too: the cleaned segments' old files are unlinked within the window.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, began + WINDOW_SECONDS - time.time())
    while held := [
        *_holding(log_dir, compacted, p, gone_marker.encode()),
        *_holding(log_dir, compacted, p, gone_key),
    ]:
        if loop.time() > deadline:
            raise AssertionError(f"the forgotten thread's bytes are still in {held}")
        await asyncio.sleep(0.5)
    bytes_gone_after = time.time() - began
    assert bytes_gone_after <= WINDOW_SECONDS, bytes_gone_after
    assert _holding(log_dir, compacted, p, kept_marker.encode())  # the other thread is untouched
    assert _holding(log_dir, compacted, p, kept_key)
    after = cli.json("forget", gone, "--check")
    assert after == {
        "thread_id": gone,
        "left": dict.fromkeys(compacted, 0),
        "erased": True,
    }
    kept_left = cli("forget", kept, "--check", check=1)
    assert f"1 record(s) of thread {kept!r} holding content on {compacted[0]}" in kept_left.stdout
    print(f"erased (log view) {erased_after:.0f}s, broker files {bytes_gone_after:.0f}s")


def test_forget_refuses_a_window_it_cannot_keep(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    for window, why in (("10s", "from 1m to 30d"), ("soon", "a duration such as")):
        ran = cli("forget", "t", "--yes", "--erase-within", window, check=2)
        assert ran.stderr.strip().startswith(f"error: --erase-within {window!r}: {why}")
    both = cli("forget", "t", "--check", "--erase-within", "1h", check=2)
    assert "does not go with --erase-within" in both.stderr
