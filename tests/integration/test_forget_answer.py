"""An answer to a forgotten thread, on the real broker: refused as ``forgotten`` by the worker
that owns the partition, the answer's record tombstoned in the refusal's transaction, and
nothing of the answer's text on any topic a reader can read -- even when the worker's store
still held the forgotten pause when the answer came (the race the answers topic's forget mark
closes: the mark is on the answers partition before any answer published after ``forget``)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Names
from tests.deployment import REQUEST, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.test_api import api_settings
from tests.kafka_helpers import read_to_end
from turnlog import Paused, Turnlog
from turnlog.kafka.partitioning import answer_key, partition_for
from turnlog.producers.forget import forget_thread, thread_keys


async def _partition_records(bootstrap: str, topic: str, partition: int) -> list[Any]:
    """Every committed record of ``topic[partition]``, in order."""
    return [r for r in await read_to_end(bootstrap, topic) if r.partition == partition]


def _holding(root: Path, marker: bytes) -> list[str]:
    """Every file under ``root`` (the stores' directories) whose bytes hold ``marker``."""
    return sorted(
        str(f.relative_to(root))
        for f in root.rglob("*")
        if f.is_file() and marker in f.read_bytes()
    )


def _same_partition(thread: str, partitions: int) -> str:
    p = partition_for(thread, partitions)
    return next(t for i in range(1000) if partition_for(t := f"kept-{i}", partitions) == p)


async def _pause(tl: Turnlog, thread: str, marker: str) -> Paused:
    cp = dataclasses.replace(sample_checkpoint(thread), prompt=f"Continue {marker}-prompt")
    return await tl.pause(cp, request=REQUEST)


def _answer(marker: str) -> dict[str, object]:
    return {"answers": [{"selections": ["eu"], "other": f"{marker}-answer"}]}


@pytest.mark.timeout(120)
async def test_an_answer_after_forget_is_refused_forgotten_and_leaves_no_content(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    gone = f"forget-answer-{names.app}"
    kept = _same_partition(gone, settings.partitions)
    p = partition_for(gone, settings.partitions)
    marker = f"LATE{uuid.uuid4().hex}"
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        try:
            forgotten = await _pause(tl, gone, marker)
            # A later pause on the partition, answered: the worker catches its store up and so
            # holds the forgotten thread's pause when forget runs -- the race with forget.
            other = await _pause(tl, kept, "KEPT")
            sent = await tl.answer(other.token, _answer("KEPT"), **other.axes)
            assert (await tl.outcome(sent.answer_id, timeout=60)).accepted
            [running] = tl._workers  # the worker's store, looked at in place
            assert running.store.pause_for_token(forgotten.token_id) is not None
            assert _holding(tmp_path / "state", marker.encode())  # in its write-ahead log

            await forget_thread(settings, tl.topics, gone)
            late = await tl.answer(forgotten.token, _answer(marker), **forgotten.axes)
            result = await tl.outcome(late.answer_id, timeout=60)
            assert result.rejected is not None, result
            assert (result.reason, result.rejected.step) == ("forgotten", 5), result
            assert marker not in (result.detail or "")

            # The worker's store, still open, holds nothing of the thread in any of its files
            # (write-ahead log flushed, the deleted ranges compacted); nor does a projection's.
            assert _holding(tmp_path / "state", marker.encode()) == []

            # The thread's pause is answered again after it was forgotten: still refused.
            again = await tl.answer(forgotten.token, _answer(marker), **forgotten.axes)
            assert (await tl.outcome(again.answer_id, timeout=60)).reason == "forgotten"

            # The other thread of the partition is untouched.
            kept_late = await _pause(tl, kept, "KEPT2")
            fine = await tl.answer(kept_late.token, _answer("KEPT2"), **kept_late.axes)
            assert (await tl.outcome(fine.answer_id, timeout=60)).accepted
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

        # The answers' records are tombstoned (the last record of each key has no value) ...
        answers = await _partition_records(bootstrap, tl.topics.answers, p)
        last = {r.key: r.value for r in answers}
        for answer_id in (late.answer_id, again.answer_id):
            key = answer_key(gone, answer_id)
            assert key in last and last[key] is None, answer_id
        # ... so no live key of the thread is left on the compacted topics (compaction removes
        # the bytes: test_forget_erasure.py),
        live = await thread_keys(settings, tl.topics, gone)
        assert not any(live.values()), live
        # and neither the rejections nor the resumed turns echo the answer's text.
        for topic in (tl.topics.rejections, tl.topics.resumed):
            for record in await _partition_records(bootstrap, topic, p):
                assert marker.encode() not in (record.value or b""), topic


@pytest.mark.timeout(180)
async def test_trail_show_and_pending_say_forgotten_at_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Right after ``forget`` -- the topics not compacted yet, the resumed and rejections topics
    keeping the conversation for their retention -- ``trail`` says the thread was forgotten and
    prints nothing of its history, ``show`` says forgotten (not "unknown"), ``pending`` lists
    none of it; a later pause of another thread is shown as ever."""
    settings = api_settings(bootstrap, names, tmp_path).with_(partitions=3)
    answered, waiting = f"forget-cli-a-{names.app}", f"forget-cli-w-{names.app}"
    marker = f"CLI{uuid.uuid4().hex}"
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        try:
            first = await _pause(tl, answered, marker)
            sent = await tl.answer(first.token, _answer(marker), **first.axes)
            assert (await tl.outcome(sent.answer_id, timeout=60)).accepted
            pending = await _pause(tl, waiting, marker)
            before = cli("trail", answered).stdout
            assert first.token_id in before and "resumed" in before, before
            listed = cli.json("pending")
            assert isinstance(listed, dict)
            assert pending.token_id in {r["token_id"] for r in listed["pending"]}

            for thread in (answered, waiting):
                cli("forget", thread, "--yes")
            late = await tl.answer(pending.token, _answer(marker), **pending.axes)
            assert (await tl.outcome(late.answer_id, timeout=60)).reason == "forgotten"
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    for thread, token in ((answered, first.token_id), (waiting, pending.token_id)):
        trail = cli("trail", thread).stdout
        lines = trail.strip().splitlines()
        assert len(lines) == 1 and "forgotten" in lines[0], trail
        assert token not in trail and marker not in trail, trail
        [entry] = cli.json("trail", thread)["trail"]  # type: ignore[index]
        assert entry["what"] == "forgotten"
        shown = cli("show", thread, check=1)
        assert shown.stdout == "" and shown.stderr.startswith(
            f"error: thread {thread!r} was forgotten (turnlog forget): nothing of it is kept"
        ), shown.stderr
    listed = cli.json("pending")
    assert isinstance(listed, dict)
    assert all(r["thread_id"] not in (answered, waiting) for r in listed["pending"]), listed
    # Neither the worker's store nor the CLI's projection holds the forgotten threads' text in
    # any of its files.
    assert _holding(tmp_path / "state", marker.encode()) == []
    # never heard of: still "unknown"
    unknown = cli("show", f"never-{names.app}", check=1)
    assert "no checkpoint recorded" in unknown.stderr
