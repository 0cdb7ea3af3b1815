"""Sealed resumed turns on the real broker (``TURNLOG_SEAL``): the resumed topic holds no byte
of the conversation, every reader of turnlog hands the turn out whole, and ``forget`` makes every
copy unreadable at once by tombstoning the turn's key -- the copies a tombstone on ``resumed``
could never reach (its retention, a mirror, a backup)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import Names
from tests.deployment import REQUEST, sample_checkpoint
from tests.integration.test_api import api_settings
from tests.kafka_helpers import read_to_end
from turnlog import Turnlog
from turnlog.consumers.resumed import ResumedTurns, read_thread_turn
from turnlog.contracts.events import TurnResumed
from turnlog.errors import ContentShredded
from turnlog.kafka.partitioning import partition_for
from turnlog.producers.forget import forget_keys
from turnlog.wire.codec import decode
from turnlog.wire.sealing import KEY_BYTES, content_key_name


def _snippet() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "open_sealed_turn.py"
    spec = importlib.util.spec_from_file_location("open_sealed_turn", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _records(bootstrap: str, topic: str, partition: int) -> list[Any]:
    """Every committed record of ``topic[partition]``, in order."""
    return [r for r in await read_to_end(bootstrap, topic) if r.partition == partition]


@pytest.mark.timeout(180)
async def test_a_sealed_turn_is_opened_by_readers_and_shredded_by_forget(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path).with_(seal=True)
    thread = f"sealed-{names.app}"
    marker = f"SEAL{uuid.uuid4().hex}"
    p = partition_for(thread, settings.partitions)
    cp = dataclasses.replace(sample_checkpoint(thread), prompt=f"Continue {marker}-prompt")
    answer = {"answers": [{"selections": ["eu"], "other": f"{marker}-answer"}]}
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        try:
            paused = await tl.pause(cp, request=REQUEST)
            sent = await tl.answer(paused.token, answer, **paused.axes)
            outcome = await tl.outcome(sent.answer_id, timeout=60)
            assert outcome.resumed is not None, outcome
            # Every reader of turnlog hands the turn out opened, the answer folded in.
            assert outcome.resumed.sealed is None
            assert marker in outcome.resumed.prompt
            assert marker in outcome.resumed.response_json
            turn = await tl.peek_resumed_turn(thread, token_id=paused.token_id, timeout=60)
            assert turn.sealed is None and turn == outcome.resumed
            assert any(marker in str(m.get("content")) for m in turn.history)
            stream = ResumedTurns(settings, group_id=f"{names.app}-sealed", topics=tl.topics)
            async with stream:
                async for delivered in stream:
                    assert delivered == turn
                    await stream.commit()
                    break
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

        # On the log: the turn's ids in the clear, its content nowhere but in ``sealed``.
        [raw] = [r for r in await _records(bootstrap, tl.topics.resumed, p) if r.value is not None]
        assert marker.encode() not in raw.value
        on_log = decode(raw.value, TurnResumed)
        assert on_log.sealed is not None and on_log.history == () and on_log.prompt == ""
        assert (on_log.token_id, on_log.answer_id) == (paused.token_id, sent.answer_id)
        name = content_key_name(thread, on_log.event_id)
        [key] = [r for r in await _records(bootstrap, tl.topics.keys, p) if r.key == name]
        assert key.value is not None and len(key.value) == KEY_BYTES

        # A reader with no turnlog -- a Kafka client, Avro and AES-GCM, the page's recipe --
        # opens it too.
        snippet = _snippet()
        keys = snippet.keys_of(snippet.read_partition(bootstrap, tl.topics.keys, p))
        opened = snippet.open_turn(raw.value, keys)
        assert opened is not None and marker in opened["prompt"]
        assert len(opened["history"]) == len(turn.history)
        assert opened["answer_id"] == sent.answer_id and opened["sealed"] is None

        # forget tombstones the key: no reader can open the turn any more -- at once, while
        # the sealed bytes are still on resumed.
        tombstoned = await forget_keys(settings, tl.topics, thread)
        assert tombstoned[tl.topics.keys] == {name}
        with pytest.raises(ContentShredded):
            await read_thread_turn(settings, tl.topics, thread, token_id=paused.token_id)
        keys = snippet.keys_of(snippet.read_partition(bootstrap, tl.topics.keys, p))
        assert snippet.open_turn(raw.value, keys) is None
        assert [r for r in await _records(bootstrap, tl.topics.resumed, p) if r.value is not None]
        later = ResumedTurns(settings, group_id=f"{names.app}-after", topics=tl.topics)
        async with later:
            # Nothing of it is handed out; the stream goes on past it (nothing else is there).
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(aiter(later)), 5)
            assert later.skipped == 1  # passed over, as any record that is no turn
