"""A pause of several calls on the real broker (issue 28, item 3): a turn whose model asked for
an approval and a question pauses once; each call is answered on its own, by a different
publisher, with a worker restart from an empty state directory between the two; the turn
resumes exactly once, when the last is answered, with every call's answer in the order of the
calls -- and answers sent again afterwards resume nothing more."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.worker_support import Follower, keyed_deployment, running_worker, wait_owned
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approve
from turnlog.contracts.axes import Axes
from turnlog.contracts.group import CallToPause
from turnlog.contracts.messages import NOT_DISPATCHED
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder

PARTITIONS = 6
EU = {"answers": [{"selections": ["eu"], "other": None}]}


async def test_two_calls_answered_apart_across_a_worker_restart_resume_the_turn_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    cp = sample_checkpoint(f"group-{names.app}")  # call-1 asks; call-2, call-3 search
    approval = approval_request("search", {"q": 2})
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        question, search = await recorder.record_calls(
            cp,
            [CallToPause("call-2", APPROVE_TOOL_CALL, json.dumps(approval)), CallToPause("call-1")],
        )
    assert (question.pause.checkpoint.tool_call_id, search.pause.checkpoint.tool_call_id) == (
        "call-1",
        "call-2",
    )
    assert question.offset == search.offset  # one record on the log
    follower = Follower(bootstrap, dep.topics)
    await follower.start()
    try:
        async with AnswerPublisher(dep.settings, dep.verifier) as first_publisher:
            approved = first_publisher.build(
                search.token,
                approve("search", {"q": 2}),
                **dict(Axes.of_pause(search.pause.checkpoint)),
            )
            async with running_worker(dep, tmp_path / "w1") as worker:
                await wait_owned([worker], PARTITIONS)
                await first_publisher.publish_unchecked(approved)
                [held] = await follower.wait_for(lambda: follower.consumed(search.token_id))
                assert worker.stats.held == 1 and worker.stats.resumed == 0
        assert (held.outcome, held.answer_id) == ("held", approved.answer_id)
        assert json.loads(held.response_json) == approve("search", {"q": 2})
        assert follower.resumed(search.token_id) == follower.resumed(question.token_id) == []

        # Another worker, from nothing: it learns the held answer from the consumptions topic.
        async with (
            running_worker(dep, tmp_path / "w2") as worker,
            AnswerPublisher(dep.settings, dep.verifier) as second_publisher,
        ):
            await wait_owned([worker], PARTITIONS)
            eu = second_publisher.build(
                question.token, EU, **dict(Axes.of_pause(question.pause.checkpoint))
            )
            await second_publisher.publish_unchecked(eu)
            [turn] = await follower.wait_for(lambda: follower.resumed(question.token_id))

            # Sent again: the held approval (same answer id) and a new answer to the question.
            await second_publisher.publish_unchecked(approved)
            late = second_publisher.build(
                question.token, EU, **dict(Axes.of_pause(question.pause.checkpoint))
            )
            await second_publisher.publish_unchecked(late)
            [refused] = await follower.wait_for(lambda: follower.rejections(late.answer_id))
    finally:
        await follower.stop()
    assert refused.reason == "already_consumed"
    assert [t.answer_id for t in follower.resumed(question.token_id)] == [eu.answer_id]
    assert follower.resumed(search.token_id) == []
    assert [(a["tool_call_id"], a["answer_id"]) for a in turn.answers] == [
        ("call-1", eu.answer_id),
        ("call-2", approved.answer_id),
    ]
    added = turn.history[len(cp.messages) :]
    # call-1's answer; call-2 approved, left for the continuing agent to run; call-3 never ran.
    assert [(m["tool_call_id"], m["content"] == NOT_DISPATCHED) for m in added] == [
        ("call-1", False),
        ("call-3", True),
    ]
    assert "eu" in added[0]["content"]
    assert [c.outcome for c in follower.consumed(question.token_id)] == ["resumed"]
    assert [c.outcome for c in follower.consumed(search.token_id)] == ["held"]
