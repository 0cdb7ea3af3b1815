"""A pause of several calls, without a broker: one record with a token per call, each answer
bound to its own call, the answers before the last held, and one resume with every call's
observation in the order of the calls."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import pytest

from tests.unit.test_handler import Harness, Rec, rejection
from tests.unit.test_resume import ISSUER, NOW, T0, VERIFIER, make_answer
from turnlog.consumers.handler import Handled
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approve, reject
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import AnswerSubmitted, PauseRecorded, TokenConsumed, TurnResumed
from turnlog.contracts.group import CallToPause, calls_of, rehydrate_calls, view_for_token
from turnlog.contracts.interactions import ASK_USER
from turnlog.contracts.ledger import LedgerEntry, Outcome
from turnlog.contracts.messages import NOT_DISPATCHED
from turnlog.errors import PauseInvalid
from turnlog.kafka.partitioning import pause_key
from turnlog.kafka.topics import TopicSet
from turnlog.producers.pauses import PauseRecorder
from turnlog.projections.applier import StoreApplier
from turnlog.projections.store import Store
from turnlog.settings import Settings
from turnlog.tokens import PauseClaims
from turnlog.wire.codec import decode, encode
from turnlog.wire.skim import skim_pause

ARGS = {"item": "paint", "litres": 5}
QUESTION = {"questions": [{"question": "Which colour?", "options": ["Red", "Blue"]}]}
BLUE = json.dumps({"answers": [{"selections": ["Blue"], "other": None}]})
SAID_BLUE = 'The person answered.\nanswer 1: selected "Blue"'


def checkpoint() -> TurnCheckpoint:
    messages = captured_messages(
        [{"role": "user", "content": "Paint my kitchen."}],
        "Two things before I start.",
        [
            ReservedCall("c0", "measure", {}),
            ReservedCall("call-1", ASK_USER, QUESTION),
            ReservedCall("c2", "buy", ARGS),
        ],
    )
    return TurnCheckpoint(
        run_id="run-1",
        session_id="sess-1",
        thread_id="thread-1",
        checkpoint_id="cp-1",
        scope_hash="tenant-a",
        messages=messages,
        created_at=T0,
    )


def recorder() -> PauseRecorder:
    return PauseRecorder(Settings(topic_prefix="t."), ISSUER, clock=lambda: T0)


CALLS = [  # given out of order: the pause orders them as the model made them
    CallToPause("c2", APPROVE_TOOL_CALL, json.dumps(approval_request("buy", ARGS))),
    CallToPause("call-1"),
]


def group_pause() -> PauseRecorded:
    pause, _, _ = recorder().prepare_calls(checkpoint(), CALLS, ttl=timedelta(hours=1))
    return pause


def token_of(pause: PauseRecorded, token_id: str) -> str:
    view = view_for_token(pause, token_id)
    return ISSUER.issue(PauseClaims.for_pause(view, pause_partition=0, pause_offset=0))


def answer_to(pause: PauseRecorded, call_id: str, response: str, answer_id: str) -> AnswerSubmitted:
    call = next(c for c in calls_of(pause) if c.tool_call_id == call_id)
    return make_answer(
        answer_id=answer_id,
        token=token_of(pause, call.token_id),
        call_id=call_id,
        response_json=response,
    )


APPROVED = json.dumps(approve("buy", ARGS))


# -- the pause --------------------------------------------------------------------------------


def test_one_record_holds_every_call_in_the_order_of_the_calls_each_with_its_token() -> None:
    pause = group_pause()
    calls = calls_of(pause)
    assert [c.tool_call_id for c in calls] == ["call-1", "c2"]
    assert [c.response_schema for c in calls] == [ASK_USER, APPROVE_TOOL_CALL]
    assert len({c.token_id for c in calls}) == 2
    # The top level is the first call's, as a pause of one call would have it.
    assert (pause.token_id, pause.checkpoint.tool_call_id) == (calls[0].token_id, "call-1")
    assert json.loads(pause.request_json) == QUESTION  # left out: the call's own arguments
    # Each call's token is bound to its own call, request and interaction.
    for call in calls:
        claims = VERIFIER.verify(token_of(pause, call.token_id), NOW)
        assert (claims.tool_call_id, claims.interaction, claims.request_hash) == (
            call.tool_call_id,
            call.response_schema,
            call.request_hash,
        )
    assert decode(encode(pause), PauseRecorded) == pause
    assert skim_pause(encode(pause)).group == pause.group


@pytest.mark.parametrize(
    ("calls", "field", "words"),
    [
        ([CallToPause("call-1")], "calls", "two or more"),
        ([CallToPause("call-1"), CallToPause("nope")], "calls[1].tool_call_id", "not a call"),
        ([CallToPause("call-1"), CallToPause("call-1")], "calls[1].tool_call_id", "twice"),
        ([CallToPause("call-1"), CallToPause("c0")], "call c0: interaction", "'measure'"),
        (
            [CallToPause("call-1"), CallToPause("c2", APPROVE_TOOL_CALL)],
            "call c2",
            "",
        ),
    ],
)
def test_a_group_no_answer_could_complete_is_refused_naming_the_call(
    calls: list[CallToPause], field: str, words: str
) -> None:
    with pytest.raises(PauseInvalid) as raised:
        recorder().prepare_calls(checkpoint(), calls)
    assert raised.value.field.startswith(field)
    assert words in str(raised.value)


def test_a_pause_of_one_call_is_a_group_of_one_and_unchanged_on_the_wire() -> None:
    one = dataclasses.replace(checkpoint(), tool_call_id="call-1", name=ASK_USER)
    pause, _, _ = recorder().prepare(one)
    assert pause.group == ()
    assert [c.token_id for c in calls_of(pause)] == [pause.token_id]
    assert view_for_token(pause, pause.token_id) is pause


# -- answering it -----------------------------------------------------------------------------


def harness(pause: PauseRecorded) -> Harness:
    h = Harness()
    for call in calls_of(pause):
        h.view.pauses[call.token_id] = pause
    return h


def consumption(handled: Handled) -> TokenConsumed:
    [(_, _, value)] = [o for o in handled.outputs if o[0].endswith("consumptions")]
    return decode(value, TokenConsumed)


def resumed(handled: Handled) -> TurnResumed:
    [(_, _, value)] = [o for o in handled.outputs if o[0].endswith("resumed")]
    return decode(value, TurnResumed)


async def test_the_first_answer_is_held_and_the_last_resumes_once_with_every_observation() -> None:
    pause = group_pause()
    h = harness(pause)
    pending: dict[str, LedgerEntry] = {}
    first = await h.answer(answer_to(pause, "c2", APPROVED, "a-approve"), pending=pending)
    assert first.held and not first.resumed and first.refusal is None
    held = consumption(first)
    assert (held.outcome, held.response_json) == ("held", APPROVED)
    assert not [o for o in first.outputs if o[0].endswith("resumed")]

    # The last call, answered in a later transaction: the held row is in the store by then.
    h.view.ledgers.update(pending)
    last = await h.answer(answer_to(pause, "call-1", BLUE, "a-blue"), pending={})
    assert last.resumed and consumption(last).outcome == "resumed"
    turn = resumed(last)
    assert (turn.tool_call_id, turn.answer_id, turn.response_json) == ("call-1", "a-blue", BLUE)
    added = turn.history[len(pause.checkpoint.messages) :]
    # In the order of the calls: c0 waited on nobody; call-1's answer; c2 approved, left open
    # for the continuing agent to run (no result yet).
    assert [(m["tool_call_id"], m["content"]) for m in added] == [
        ("c0", NOT_DISPATCHED),
        ("call-1", SAID_BLUE),
    ]
    assert [(a["tool_call_id"], a["answer_id"], a["response_json"]) for a in turn.answers] == [
        ("call-1", "a-blue", BLUE),
        ("c2", "a-approve", APPROVED),
    ]
    assert turn.answered is not None and turn.answered.selected_labels == ("Blue",)


async def test_two_answers_in_one_transaction_complete_the_group_through_its_pending_rows() -> None:
    pause = group_pause()
    h = harness(pause)
    pending: dict[str, LedgerEntry] = {}
    assert (await h.answer(answer_to(pause, "call-1", BLUE, "a1"), pending=pending)).held
    last = await h.answer(answer_to(pause, "c2", APPROVED, "a2"), pending=pending)
    assert last.resumed
    assert [a["answer_id"] for a in resumed(last).answers] == ["a1", "a2"]


async def test_a_rejection_is_folded_in_as_its_calls_result() -> None:
    pause = group_pause()
    h = harness(pause)
    pending: dict[str, LedgerEntry] = {}
    no = json.dumps(reject("buy", ARGS, "not today"))
    assert (await h.answer(answer_to(pause, "c2", no, "a1"), pending=pending)).held
    turn = resumed(await h.answer(answer_to(pause, "call-1", BLUE, "a2"), pending=pending))
    results = {m["tool_call_id"]: m["content"] for m in turn.history if m["role"] == "tool"}
    assert "not today" in results["c2"]
    assert results["call-1"] == SAID_BLUE


async def test_a_held_answer_sent_again_is_a_duplicate_and_another_is_refused() -> None:
    pause = group_pause()
    h = harness(pause)
    pending: dict[str, LedgerEntry] = {}
    answer = answer_to(pause, "c2", APPROVED, "a1")
    assert (await h.answer(answer, pending=pending)).held
    again = await h.answer(answer, pending=pending)
    assert again.duplicate and again.outputs == []
    other = await h.answer(answer_to(pause, "c2", APPROVED, "a-other"), pending=pending)
    refused = rejection(other)
    assert refused.reason == "already_consumed" and "held" in refused.detail


async def test_an_answer_for_one_call_cannot_answer_another() -> None:
    pause = group_pause()
    h = harness(pause)
    call_1 = next(c for c in calls_of(pause) if c.tool_call_id == "call-1")
    # call-1's token, stating c2 as its call: refused by the axis, not resumed into c2.
    crossed = make_answer(token=token_of(pause, call_1.token_id), call_id="c2", answer_id="x")
    assert rejection(await h.answer(crossed)).reason == "call_mismatch"
    # c2's approval sent with call-1's token: call-1 is an ask_user question.
    wrong = make_answer(
        token=token_of(pause, call_1.token_id), call_id="call-1", response_json=APPROVED
    )
    assert rejection(await h.answer(wrong)).reason in ("response_invalid", "response_mismatch")


async def test_once_a_call_expired_the_group_can_no_longer_resume() -> None:
    pause = group_pause()
    h = harness(pause)
    c2 = next(c for c in calls_of(pause) if c.tool_call_id == "c2")
    h.view.ledgers[c2.token_id] = LedgerEntry(Outcome.EXPIRED, "", "thread-1")
    refused = rejection(await h.answer(answer_to(pause, "call-1", BLUE, "a1")))
    assert refused.reason == "pause_expired"


def test_rehydrating_several_answers_edits_the_approved_calls_arguments() -> None:
    from turnlog.contracts.group import Observed

    cp = checkpoint()
    history = rehydrate_calls(cp, [Observed("c2", "", '{"item":"paint","litres":2}')])
    asking = history[len(cp.messages) - 1]
    assert [c["arguments"] for c in asking["tool_calls"] if c["id"] == "c2"] == [
        '{"item":"paint","litres":2}'
    ]
    added = history[len(cp.messages) :]
    assert [(m["tool_call_id"], m["content"]) for m in added] == [
        ("c0", NOT_DISPATCHED),
        ("call-1", NOT_DISPATCHED),
    ]


# -- the store --------------------------------------------------------------------------------


def test_the_store_finds_the_pause_by_each_token_and_expires_each_call_as_its_own(
    tmp_path: Path,
) -> None:
    pause = group_pause()
    with Store.open(tmp_path / "s") as store:
        applier = StoreApplier(store, _topic_set())
        key = pause_key("thread-1", "cp-1")
        applier.apply_now([Rec(applier.topics.pauses, 0, 0, key, encode(pause))])
        calls = calls_of(pause)
        for call in calls:
            found = applier.pause(call.token_id)
            assert found is not None
            assert (found.token_id, found.checkpoint.tool_call_id) == (
                call.token_id,
                call.tool_call_id,
            )
        # Each call waits in the pages as its own question, with its own call and interaction.
        now_ms = int(T0.timestamp() * 1000)
        page = store.pending_page(now_ms)
        assert sorted((w.token_id, w.call, w.interaction) for w in page.items) == sorted(
            (c.token_id, c.tool_call_id, c.response_schema) for c in calls
        )
        assert store.pending_count(now_ms) == 2
        assert [w.call for w in store.pending_page(now_ms, interaction=ASK_USER).items] == [
            "call-1"
        ]
        # One call held: its row keeps the response; only the other is left to expire.
        applier.record_consumptions(
            {calls[1].token_id: LedgerEntry(Outcome.HELD, "a1", "thread-1", APPROVED)}
        )
        assert store.ledger(calls[1].token_id) == LedgerEntry(
            Outcome.HELD, "a1", "thread-1", APPROVED
        )
        assert [w.call for w in store.pending_page(now_ms).items] == ["call-1"]  # held: answered
        assert store.pending_count(now_ms) == 1
        due = applier.expired(NOW + timedelta(days=2))
        assert [(p.token_id, p.checkpoint.tool_call_id) for p in due] == [
            (calls[0].token_id, "call-1")
        ]
        # A tombstone of the pause takes every token's index with it.
        applier.apply_now([Rec(applier.topics.pauses, 0, 1, key, None)])
        assert all(store.pause_for_token(c.token_id) is None for c in calls)
        assert store.pending_page(now_ms).items == [] and store.pending_count(now_ms) == 0


def _topic_set() -> TopicSet:
    return TopicSet.from_settings(Settings(topic_prefix="t."))


# -- the notifier -----------------------------------------------------------------------------


def test_the_notifier_tells_of_each_call_as_a_question_of_its_own() -> None:
    from turnlog.notify import payload
    from turnlog.notify.book import Book

    pause = group_pause()
    notices = payload.recorded_calls(pause)
    calls = calls_of(pause)
    assert [(n.token_id, n.interaction) for n in notices] == [
        (c.token_id, c.response_schema) for c in calls
    ]
    assert len({n.event_id for n in notices}) == 2  # a receiver's dedupe keeps both
    book = Book()
    for view in payload.each_call(pause):
        book.learn(payload.facts_of(view), 0, b"key")
    assert all(book.is_open(c.token_id) for c in calls)
    book.forget(b"key")  # the thread forgotten: every call of it goes
    assert not any(book.is_open(c.token_id) for c in calls)
    # A single pause is told once, with its own event id, as before groups.
    one = dataclasses.replace(checkpoint(), tool_call_id="call-1", name=ASK_USER)
    single, _, _ = recorder().prepare(one)
    assert [n.event_id for n in payload.recorded_calls(single)] == [single.event_id]
