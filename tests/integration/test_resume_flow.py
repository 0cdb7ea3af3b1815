"""Pause -> answer -> resume through the real broker, end to end."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, axes, make_deployment, sample_checkpoint
from tests.integration.worker_support import running_worker
from tests.kafka_helpers import eventually, read_to_end, wait_until_consumed
from turnlog.contracts.events import AnswerRejected, TokenConsumed, TurnResumed
from turnlog.contracts.messages import NOT_DISPATCHED
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.wire.codec import decode


async def test_answer_resumes_turn_with_rehydrated_history(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path / "state")
    cp = sample_checkpoint("thread-1")
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST)
    async with (
        running_worker(dep, tmp_path / "worker"),
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        sent = await publisher.publish(pause.token, ANSWER, **axes(cp))
        await publisher.publish(pause.token, ANSWER, **axes(cp), answer_id=sent.answer_id)

        async def resumed() -> list[TurnResumed]:
            records = await read_to_end(bootstrap, dep.topics.resumed)
            return [decode(r.value, TurnResumed) for r in records]

        turns = await eventually(resumed)
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
        turns = await resumed()
    consumed = await read_to_end(bootstrap, dep.topics.consumptions)
    rejected = await read_to_end(bootstrap, dep.topics.rejections)
    assert len(turns) == 1
    assert [decode(r.value, TokenConsumed).token_id for r in consumed] == [pause.token_id]
    assert [decode(r.value, AnswerRejected).reason for r in rejected] == []
    turn = turns[0]
    assert turn.thread_id == "thread-1"
    history = list(turn.history)
    assert history[: len(cp.messages)] == list(cp.messages)
    tail = history[len(cp.messages) :]
    assert [m["tool_call_id"] for m in tail] == ["call-1", "call-2", "call-3"]
    assert "eu" in tail[0]["content"]
    assert [m["content"] for m in tail[1:]] == [NOT_DISPATCHED, NOT_DISPATCHED]
    assert turn.answered is not None and turn.answered.selected_labels == ("eu",)
