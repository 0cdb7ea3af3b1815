"""An answer that does not answer what its pause asked is refused by the worker (issue 28), on
the real broker.

Before: a pause offering ``["eu", "us"]`` resumed on ``{"selections": ["mars"]}``, and on two
answers to its one question -- step 4 checked the response's schema only. Here the answers are
published raw, past every check a publisher makes, so the worker alone decides: each is refused
``response_mismatch`` with what does not match, nothing is consumed, and the right answer then
resumes the turn exactly once.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Names
from tests.deployment import REQUEST, axes, sample_checkpoint
from tests.integration.worker_support import Follower, keyed_deployment, running_worker, wait_owned
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder

PARTITIONS = 6


async def test_the_worker_refuses_an_answer_to_another_question_and_the_right_one_resumes(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    cp = sample_checkpoint(f"bound-{names.app}")
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST)  # "Which region?": eu or us
    follower = Follower(bootstrap, dep.topics)
    await follower.start()
    try:
        async with (
            running_worker(dep, tmp_path / "w") as worker,
            AnswerPublisher(dep.settings, dep.verifier) as publisher,
        ):
            await wait_owned([worker], PARTITIONS)
            mars = publisher.build(
                pause.token, {"answers": [{"selections": ["mars"], "other": None}]}, **axes(cp)
            )
            twice = publisher.build(
                pause.token,
                {"answers": [{"selections": ["eu"]}, {"selections": ["eu"]}]},
                **axes(cp),
            )
            for wrong in (mars, twice):
                await publisher.publish_unchecked(wrong)
            refused = {}
            for wrong in (mars, twice):
                answer_id = wrong.answer_id
                refused[answer_id] = await follower.wait_for(
                    lambda: follower.rejections(answer_id)  # noqa: B023 - awaited at once
                )
            assert follower.consumed(pause.token_id) == []

            right = publisher.build(
                pause.token, {"answers": [{"selections": ["us"], "other": None}]}, **axes(cp)
            )
            await publisher.publish_unchecked(right)
            turns = await follower.wait_for(lambda: follower.resumed(pause.token_id))
            consumed = await follower.wait_for(lambda: follower.consumed(pause.token_id))
    finally:
        await follower.stop()
    assert [(r.reason, r.step, r.detail) for r in refused[mars.answer_id]] == [
        (
            "response_mismatch",
            4,
            "answers[0].selections[0]: text of 4 characters, not one of question 1's 2 offered "
            "options",
        )
    ]
    assert [(r.reason, r.step, r.detail) for r in refused[twice.answer_id]] == [
        (
            "response_mismatch",
            4,
            "answers: 2 answers to 1 question; each question takes exactly one answer, in the "
            "order asked",
        )
    ]
    assert [t.answer_id for t in turns] == [right.answer_id]
    assert [(c.answer_id, c.outcome) for c in consumed] == [(right.answer_id, "resumed")]
    assert turns[0].answered is not None and turns[0].answered.selected_labels == ("us",)
