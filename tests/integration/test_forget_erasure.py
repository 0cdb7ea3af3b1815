"""``turnlog forget --erase-within``: the thread's bytes gone from every broker file of the
compacted topics within the window, on a deployment made with turnlog's own topic settings and
no other write to the thread's partition -- the broker's files grepped for the thread's
markers, the kept thread's markers still there; ``--check`` says what holds content."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import REQUEST, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.test_api import api_settings
from turnlog import Paused, Turnlog
from turnlog.kafka.partitioning import partition_for

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
    """Every file of the topics' ``partition`` directories whose bytes hold ``marker``."""
    found = []
    for topic in topics:
        for path in (log_dir / f"{topic}-{partition}").glob("*"):
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


@pytest.mark.timeout(240)
async def test_forget_erase_within_leaves_no_byte_of_the_thread_in_any_broker_file(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path).with_(partitions=3)
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
    compacted = [f"{names.prefix}{t}" for t in ("pauses", "answers", "consumptions")]
    p = partition_for(gone, 3)
    assert _holding(log_dir, compacted, p, gone_marker.encode()), "the markers were never written"

    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    before = json.loads(cli("forget", gone, "--check", "--json", check=1).stdout)
    assert before["erased"] is False and set(before["left"].values()) == {1}
    began = time.time()
    ran = cli("forget", gone, "--yes", "--erase-within", f"{WINDOW_SECONDS}s", timeout=180)
    erased_after = time.time() - began
    lines = ran.stdout.splitlines()
    assert "1 tombstone(s) on " + compacted[0] in lines, lines
    assert any(line.startswith(f"lowered on {compacted[0]}: ") for line in lines), lines
    assert lines[-1].startswith("erased: no record of thread"), lines

    # The broker's files too: the cleaned segments' old files are unlinked within the window.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, began + WINDOW_SECONDS - time.time())
    while held := _holding(log_dir, compacted, p, gone_marker.encode()):
        if loop.time() > deadline:
            raise AssertionError(f"the forgotten thread's bytes are still in {held}")
        await asyncio.sleep(0.5)
    bytes_gone_after = time.time() - began
    assert bytes_gone_after <= WINDOW_SECONDS, bytes_gone_after
    assert _holding(log_dir, compacted, p, kept_marker.encode())  # the other thread is untouched
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
