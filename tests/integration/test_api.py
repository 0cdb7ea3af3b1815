"""The public API end to end against the real broker: one ``Turnlog`` pauses, answers (pre-checked
against the interaction's schema), waits for the outcome, reads the resumed turn, runs the worker,
and serves the checkpoint service on Kafka and the local store."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.worker_support import KID
from turnlog import (
    RefusalReason,
    Refused,
    Settings,
    Turnlog,
    TurnResumed,
    write_keypair,
)
from turnlog.kafka.topics import admin_client


async def _group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


def api_settings(bootstrap: str, names: Names, root: Path) -> Settings:
    write_keypair(root / "keys", KID)
    return Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=names.prefix,
        application_id=names.app,
        state_dir=root / "state",
        keys_dir=root / "keys",
        partitions=2,
        commit_interval_ms=50,
    )


async def test_pause_answer_outcome_and_resumed_through_one_object(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    cp = sample_checkpoint("api-thread")
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await tl.pause(cp, request=REQUEST)
        assert paused.axes == {
            "scope_hash": "tenant-a",
            "session_id": "session-api-thread",
            "run_id": "run-api-thread",
            "call_id": "call-1",
        }
        # Pre-checked: a response that does not fit ask_user's schema is never published.
        with pytest.raises(Refused) as refused:
            await tl.answer(paused.token, {"answers": [{"picked": ["eu"]}]}, **paused.axes)
        assert refused.value.refusal.reason == RefusalReason.RESPONSE_INVALID

        sent = await tl.answer(paused.token, ANSWER, **paused.axes)
        outcome = await tl.outcome(sent.answer_id, timeout=45)
        assert outcome.accepted and outcome.reason is None
        assert isinstance(outcome.resumed, TurnResumed)
        assert outcome.resumed.token_id == paused.token_id

        # A second answer to the spent token: rejected, with its reason, read by its id alone.
        again = await tl.answer(paused.token, ANSWER, **paused.axes)
        fresh = Turnlog(settings)  # knows nothing of the answer: scans every partition
        try:
            late = await fresh.outcome(again.answer_id, timeout=30)
        finally:
            await fresh.close()
        assert not late.accepted
        assert late.reason == RefusalReason.ALREADY_CONSUMED.value

        # A loop left after its turn commits it first: the group's next reader starts past it.
        async with tl.resumed() as turns:
            delivery = await anext(turns.deliveries())
            await turns.commit()
        turn = delivery.event
        assert isinstance(turn, TurnResumed)
        assert turn.answer_id == sent.answer_id
        group_at = await _group_offsets(bootstrap, f"{names.app}.agents")
        assert group_at[(tl.topics.resumed, delivery.partition)] == delivery.offset + 1
        answered = [m for m in turn.history if m.get("tool_call_id") == "call-1"]
        assert len(answered) == 1 and '"eu"' in answered[0]["content"]

        assert not worker.done()
    assert worker.done() and worker.exception() is None  # close() stopped it gracefully


async def test_outcome_times_out_when_no_worker_decides(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    cp = sample_checkpoint("api-no-worker")
    async with Turnlog(settings) as tl:
        paused = await tl.pause(cp, request=REQUEST)
        sent = await tl.answer(paused.token, ANSWER, **paused.axes)
        with pytest.raises(TimeoutError, match=sent.answer_id):
            await tl.outcome(sent.answer_id, timeout=2)


async def test_the_checkpoint_service_runs_on_kafka_and_the_store(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    first = sample_checkpoint("api-history", checkpoint_id="cp-1", sequence=1)
    second = dataclasses.replace(
        sample_checkpoint("api-history", checkpoint_id="cp-2", sequence=2), safe_boundary=True
    )
    async with Turnlog(settings) as tl:
        service = tl.checkpoints
        assert service.durable and not service.ready
        await service.ensure_ready()
        await service.ensure_ready()  # idempotent
        assert service.ready
        assert await service.latest("api-history") is None
        # Written against their sequences on purpose: the log's order is the history's order,
        # the sequence the caller's own field (issue 39).
        await tl.pause(second, request=REQUEST)
        await tl.pause(first, request=REQUEST)
        latest = await service.latest("api-history")
        history = await service.list_checkpoints("api-history")
        boundary = service.latest_safe_boundary("api-history")
        await service.flush()
        assert service.flush_failures == ()
    assert latest is not None and latest.checkpoint_id == "cp-1"  # the last written
    assert [c.checkpoint_id for c in history] == ["cp-2", "cp-1"]  # oldest first
    assert boundary is not None and boundary.checkpoint_id == "cp-2" and boundary.sequence == 2

    # Another process (a new object, a new store) reads the same history from the topic.
    other = dataclasses.replace(settings, state_dir=tmp_path / "other-state")
    async with Turnlog(other) as again:
        seen = await again.checkpoints.list_checkpoints("api-history")
    assert [c.checkpoint_id for c in seen] == ["cp-2", "cp-1"]
    assert seen[0] == second and seen[0].sequence == 2


async def test_pauses_made_at_once_through_one_object_all_land(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """One recorder, one transactional producer: pauses made concurrently (an agent service
    pausing many threads at once) take their transactions in turn, none inside another's."""
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        paused = await asyncio.gather(
            *(tl.pause(sample_checkpoint(f"at-once-{i}"), request=REQUEST) for i in range(8))
        )
    assert len({p.token_id for p in paused}) == 8
    assert all(p.token for p in paused)
