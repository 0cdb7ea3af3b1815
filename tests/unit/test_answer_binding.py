"""The worker binds each answer to the request its pause recorded (issue 28): on the path it
really takes -- pauses read skimmed from the store's bytes, one at a time or a batch at once --
a mismatched answer is refused ``response_mismatch`` with what does not match, the token stays
unspent, and the right answer still resumes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_handler_bytes import (
    PARTITIONS,
    TOPICS,
    DecodedView,
    SkimmedView,
    comparable,
    handler,
    record,
)
from tests.unit.test_resume import (
    NOW,
    VERIFIER,
    make_answer,
    make_checkpoint,
    make_pause,
    token_for,
)
from turnlog.consumers.handler import AnswerHandler, Handled
from turnlog.contracts.events import AnswerRejected, PauseRecorded, TurnResumed
from turnlog.contracts.interactions import default_interactions
from turnlog.contracts.ledger import LedgerEntry
from turnlog.contracts.refusals import RefusalReason
from turnlog.contracts.resume import request_hash
from turnlog.wire.codec import decode

REGION = json.dumps({"questions": [{"question": "Which region?", "options": ["eu", "us"]}]})


def region_pause(token_id: str = "tok-region") -> PauseRecorded:
    return make_pause(request_json=REGION, request_hash=request_hash(REGION), token_id=token_id)


def rejected(handled: Handled) -> AnswerRejected:
    [(topic, _, value)] = handled.outputs
    assert topic == TOPICS.rejections
    return decode(value, AnswerRejected)


@pytest.mark.parametrize(
    ("response", "detail"),
    [
        (
            {"answers": [{"selections": ["mars"]}]},
            "answers[0].selections[0]: text of 4 characters, not one of question 1's 2 offered "
            "options",
        ),
        (
            {"answers": [{"selections": ["eu"]}, {"selections": ["eu"]}]},
            "answers: 2 answers to 1 question; each question takes exactly one answer, in the "
            "order asked",
        ),
    ],
    ids=["not-offered", "two-answers-to-one-question"],
)
@pytest.mark.parametrize("view", [DecodedView, SkimmedView], ids=["decoded", "skimmed"])
async def test_the_worker_refuses_an_answer_to_another_question(
    view: type[DecodedView | SkimmedView], response: dict[str, Any], detail: str
) -> None:
    pause = region_pause()
    answer = make_answer(token=token_for(pause), response_json=json.dumps(response))
    handled = await handler(view([pause], {})).handle(record(answer), {}, NOW)
    assert handled.refusal is not None and not handled.resumed
    event = rejected(handled)
    assert (event.reason, event.step, event.detail) == ("response_mismatch", 4, detail)

    right = make_answer(
        answer_id="ans-right",
        token=token_for(pause),
        response_json=json.dumps({"answers": [{"selections": ["eu"], "other": None}]}),
    )
    resumed = await handler(view([pause], {})).handle(record(right), {}, NOW)
    assert resumed.resumed, resumed.refusal
    [_, (_, _, value)] = resumed.outputs
    [told] = [m for m in decode(value, TurnResumed).history if m.get("tool_call_id") == "call-1"]
    assert told["content"] == 'The person answered.\nanswer 1: selected "eu"'


async def test_a_batch_binds_each_answer_to_its_own_pause() -> None:
    """Two pauses asking different questions in one batch: each answer is held to its own."""
    size = json.dumps({"questions": [{"question": "Which size?", "options": ["S", "L"]}]})
    other = make_pause(
        make_checkpoint(checkpoint_id="cp-2"),
        token_id="tok-size",
        request_json=size,
        request_hash=request_hash(size),
    )
    region = region_pause()
    answers = [
        make_answer(token=token_for(region), response_json='{"answers": [{"selections": ["S"]}]}'),
        make_answer(
            answer_id="ans-2",
            token=token_for(other),
            response_json='{"answers": [{"selections": ["S"]}]}',
        ),
    ]
    view = SkimmedView([region, other], {})
    handled = await handler(view).handle_batch(
        [record(a, i) for i, a in enumerate(answers)], {}, NOW
    )
    assert view.calls == ["ledgers", "pause_values"]
    assert [h.resumed for h in handled] == [False, True]
    assert rejected(handled[0]).reason == RefusalReason.RESPONSE_MISMATCH.value


async def test_the_decoded_and_skimmed_paths_refuse_alike() -> None:
    pause = region_pause()
    answer = make_answer(
        token=token_for(pause), response_json='{"answers": [{"selections": ["eu", "eu"]}]}'
    )
    decoded = await handler(DecodedView([pause], {})).handle(record(answer), {}, NOW)
    skimmed = await handler(SkimmedView([pause], {})).handle(record(answer), {}, NOW)
    assert comparable(skimmed) == comparable(decoded)
    assert rejected(skimmed).detail == (
        "answers[0].selections[1]: the same option as an earlier selection (each option is "
        "selected once)"
    )


def _answers_true(request: Any, response: Any) -> Any:
    return True


def _raises(request: Any, response: Any) -> str | None:
    raise KeyError("dates")


@pytest.mark.parametrize(
    ("check", "named"),
    [(_answers_true, "TypeError"), (_raises, "KeyError")],
    ids=["true", "raises"],
)
async def test_a_registered_check_that_breaks_refuses_the_answer_and_never_stops_the_worker(
    check: Any, named: str
) -> None:
    """A check that raises, or answers neither ``None`` nor text, is a bug in the deployment:
    the answer is refused ``answer_unprocessable`` naming the exception, and the next record is
    handled as usual."""
    interactions = default_interactions()
    interactions.register(
        "pick_date",
        {"type": "record", "name": "PickDate", "fields": [{"name": "date", "type": "string"}]},
        check_response=check,
    )
    cp = make_checkpoint(name="pick_date")
    pause = make_pause(cp, response_schema="pick_date", token_id="tok-date")
    answer = make_answer(token=token_for(pause), response_json='{"date": "2026-05-01"}')
    worker = AnswerHandler(
        topics=TOPICS,
        partitions=PARTITIONS,
        verifier=VERIFIER,
        interactions=interactions,
        view=SkimmedView([pause, region_pause()], {}),
        catch_up=_nothing,
        max_record_bytes=1_000_000,
    )
    handled = await worker.handle(record(answer), {}, NOW)
    event = rejected(handled)
    assert event.reason == "answer_unprocessable" and named in event.detail, event.detail
    good = make_answer(
        answer_id="ans-next",
        token=token_for(region_pause()),
        response_json='{"answers": [{"selections": ["us"]}]}',
    )
    pending: dict[str, LedgerEntry] = {}
    assert (await worker.handle(record(good), pending, NOW)).resumed


async def _nothing(partition: int) -> None:
    return None
