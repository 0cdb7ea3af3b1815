"""What a person answering from the command line sees of a pause, without a broker (issue 37,
items 3 and 4): what each call asks -- the tool and its arguments, or the question and its
options -- marked and clipped as the inbox shows it; where a pause of several calls stands
(held, then resumed); an answer's outcome as the records read so far tell it (held with the
calls still waiting, then the group's resumed turn); and the response ``answer --approve /
--edit / --reject`` writes for the call a token binds."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import pytest

from tests.unit.test_group_pause import ARGS, group_pause
from tests.unit.test_resume import T0
from turnlog.audit.trail import entries_of, entry_of
from turnlog.cli.answering import call_rows, decision_response
from turnlog.consumers.outcomes import Decisions, answer_ids, waiting_calls
from turnlog.contracts.approvals import (
    APPROVE_TOOL_CALL,
    approval_mismatch,
    approve,
    arguments_hash,
    edit,
    reject,
)
from turnlog.contracts.asked import TABLE_CHARS, asked
from turnlog.contracts.events import AnswerRejected, TokenConsumed, TurnResumed
from turnlog.contracts.group import call_state, calls_of, group_state
from turnlog.contracts.interactions import ASK_USER
from turnlog.contracts.visible import SUMMARY_CHARS
from turnlog.inbox.views import pause_view
from turnlog.projections.store import Store
from turnlog.tokens import PauseClaims
from turnlog.wire.codec import encode

META = {"event_id": "e", "occurred_at": T0, "package_version": "test"}


# -- what a call asks ---------------------------------------------------------------------------


def test_an_approval_shows_its_tool_and_arguments() -> None:
    shown = asked(APPROVE_TOOL_CALL, json.dumps({"tool": "deploy", "arguments": {"env": "prod"}}))
    assert (shown.tool, shown.arguments) == ("deploy", '{"env": "prod"}')
    assert shown.text == 'approve deploy {"env": "prod"}'
    assert shown.as_dict() == {
        "interaction": APPROVE_TOOL_CALL,
        "tool": "deploy",
        "arguments": '{"env": "prod"}',
        "asks": 'approve deploy {"env": "prod"}',
    }


def test_a_question_shows_its_first_question_and_options() -> None:
    request = {
        "questions": [
            {"question": "Which region?", "options": [{"label": "eu"}, "us"]},
            {"question": "When?", "options": []},
        ]
    }
    shown = asked(ASK_USER, json.dumps(request))
    assert (shown.tool, shown.arguments) == (None, None)
    assert shown.text == "ask_user: Which region? [eu / us] (+1 more)"


def test_any_other_request_is_shown_as_compact_json() -> None:
    assert asked("sign_off", '{"doc": "q3"}').text == 'sign_off: {"doc": "q3"}'
    assert asked("sign_off", "not json").text == "sign_off: not json"


def test_control_and_bidi_characters_are_marked_and_a_line_stays_a_line() -> None:
    request = {"tool": "pay\u202e", "arguments": {"iban": "DE00 \u202e9999 0000", "note": "a\nb"}}
    shown = asked(APPROVE_TOOL_CALL, json.dumps(request))
    assert shown.tool == "pay⟨U+202E⟩"
    assert "\u202e" not in shown.text and "\n" not in shown.text
    assert "DE00 ⟨U+202E⟩9999 0000" in shown.text
    # json.dumps writes the newline as \n: two characters, no line break.
    assert "a\\nb" in shown.text
    question = asked(ASK_USER, json.dumps({"questions": [{"question": "one\ntwo\u200b"}]}))
    assert question.text == "ask_user: one⟨U+000A⟩two⟨U+200B⟩"


def test_what_is_asked_is_clipped() -> None:
    long = asked(APPROVE_TOOL_CALL, json.dumps({"tool": "t", "arguments": {"x": "y" * 500}}))
    assert len(long.text) <= SUMMARY_CHARS + 1 and long.text.endswith("…")
    assert len(long.arguments or "") <= SUMMARY_CHARS + 1
    short = asked(ASK_USER, json.dumps({"questions": [{"question": "q" * 80}]}), limit=TABLE_CHARS)
    assert len(short.text) == TABLE_CHARS + 1 and short.text.endswith("…")


# -- where a pause of several calls stands ------------------------------------------------------


@pytest.mark.parametrize(
    ("outcomes", "group", "calls"),
    [
        ([None, None], "pending", ["pending", "pending"]),
        (["held", None], "held", ["held", "pending"]),
        (["held", "resumed"], "resumed", ["resumed", "resumed"]),
        (["held", "expired"], "expired", ["expired", "expired"]),
        (["resumed"], "resumed", ["resumed"]),
        ([None], "pending", ["pending"]),
    ],
)
def test_a_group_is_held_while_calls_wait_and_resumed_once_its_turn_resumed(
    outcomes: list[str | None], group: str, calls: list[str]
) -> None:
    assert group_state(outcomes) == group
    assert [call_state(group, o) for o in outcomes] == calls


def test_show_lists_each_call_with_what_it_asks_and_its_state() -> None:
    pause = group_pause()
    question, purchase = calls_of(pause)
    rows = call_rows(pause, {purchase.token_id: "held"})
    assert [(r["call"], r["state"], r["asks"]) for r in rows] == [
        ("call-1", "pending", "ask_user: Which colour? [Red / Blue]"),
        ("c2", "held", 'approve buy {"item": "paint", "litres": 5}'),
    ]
    rows = call_rows(pause, {purchase.token_id: "held", question.token_id: "resumed"})
    assert [r["state"] for r in rows] == ["resumed", "resumed"]


def test_the_trail_shows_a_pause_of_several_calls_as_one_entry_a_call() -> None:
    pause = group_pause()
    entries = entries_of(pause)
    assert [e.token_id for e in entries] == [c.token_id for c in calls_of(pause)]
    assert entries[0].detail.startswith("ask_user: Which colour? [Red / Blue] -- call call-1 ")
    assert entries[1].detail.startswith('approve buy {"item": "paint", "litres": 5} -- call c2 ')


def test_the_trail_shows_a_claim_row_as_who_continues_the_turn_not_a_second_spend() -> None:
    row = dataclasses.replace(
        _held("a-last", "k-last"), outcome="resumed", claim_id="c-1", claimant="agent\u202ea",
        claimed_at_ms=1, claim_state="claimed",
    )  # fmt: skip
    claimed = entry_of(row)
    assert claimed is not None and claimed.what == "claimed"
    assert claimed.detail == "claimed by agent⟨U+202E⟩a (claim c-1), not said done yet"
    done = entry_of(dataclasses.replace(row, claim_state="finished"))
    assert done is not None and done.what == "finished"
    assert done.detail == "continued by agent⟨U+202E⟩a (claim c-1), said done"
    spent = entry_of(dataclasses.replace(row, claim_state=""))
    assert spent is not None and spent.what == "spent"


def test_the_inbox_names_who_continues_a_group_s_turn_on_its_held_call_too(
    tmp_path: Path,
) -> None:
    pause = group_pause()
    question, purchase = calls_of(pause)
    at_ms = int(T0.timestamp() * 1000)
    with Store.open(tmp_path / "projection") as store:
        with store.batch() as batch:
            batch.put_pause(
                "thread-1", "cp-1", 1, encode(pause), token_id=pause.token_id,
                expires_at_ms=int(pause.expires_at.timestamp() * 1000),
                group_tokens=[c.token_id for c in calls_of(pause)],
            )  # fmt: skip
            batch.put_consumption("thread-1", purchase.token_id, "held", "a-1", "{}")
            batch.put_consumption(
                "thread-1", question.token_id, "resumed", "a-2",
                claim=("c-1", "agent-a", at_ms, "claimed"),
            )  # fmt: skip
        for token in (question.token_id, purchase.token_id):
            view = pause_view(store, token, T0)
            assert view is not None and view.continued is not None
            assert view.continued.startswith("Continued by agent-a since ")
            assert view.continued.endswith("not done yet: still running, or its process died "
                                           "before it said done")  # fmt: skip


# -- an answer's outcome, as read so far --------------------------------------------------------


def _held(answer_id: str, token_id: str) -> TokenConsumed:
    return TokenConsumed(
        **META, token_id=token_id, answer_id=answer_id, thread_id="thread-1",
        checkpoint_id="cp-1", outcome="held", response_json="{}",
    )  # fmt: skip


def _resumed(answer_id: str, answers: tuple[str, ...]) -> TurnResumed:
    return TurnResumed(
        **META, token_id="k-last", answer_id=answer_id, run_id="r", session_id="s",
        thread_id="thread-1", checkpoint_id="cp-1", interrupt_id="", tool_call_id="call-1",
        name="ask_user", prompt="", response_json="{}",
        answers=tuple({"answer_id": a, "tool_call_id": f"c-{a}"} for a in answers),
    )  # fmt: skip


def test_an_answer_held_for_its_group_is_held_until_the_group_resumes() -> None:
    seen = Decisions("a-first")
    seen.add(_held("a-first", "k-first"))
    found = seen.outcome()
    assert found is not None and found.held is not None and found.resumed is None
    assert found.accepted and found.reason is None
    seen.add(_resumed("a-last", ("a-first", "a-last")))  # the group's turn folds it in
    found = seen.outcome()
    assert found is not None and found.resumed is not None and found.held is None
    assert found.accepted and found.resumed.answer_id == "a-last"
    assert answer_ids(found.resumed) == ("a-last", "a-first", "a-last")


def test_a_copy_of_a_held_answer_refused_later_is_not_its_fate() -> None:
    seen = Decisions("a-first")
    copy = AnswerRejected(
        **META, answer_id="a-first", token_id="k-first", thread_id="thread-1",
        reason="already_consumed", step=5, detail="",
    )  # fmt: skip
    seen.add(copy)
    refused = seen.outcome()
    assert refused is not None and not refused.accepted and refused.reason == "already_consumed"
    seen.add(_held("a-first", "k-first"))
    held = seen.outcome()
    assert held is not None and held.held is not None and held.accepted


def test_another_answer_s_records_decide_nothing() -> None:
    seen = Decisions("mine")
    seen.add(_held("other", "k-other"))
    seen.add(_resumed("other", ("other",)))
    assert seen.outcome() is None and seen.spent == {"k-other"}


def test_the_calls_still_waiting_are_those_whose_token_nothing_spent() -> None:
    pause = group_pause()
    question, purchase = calls_of(pause)
    assert waiting_calls(pause, set()) == ("call-1", "c2")
    assert waiting_calls(pause, {purchase.token_id}) == ("call-1",)
    assert waiting_calls(pause, {purchase.token_id, question.token_id}) == ()


# -- answer --approve / --edit / --reject -------------------------------------------------------


def _claims(interaction: str = APPROVE_TOOL_CALL) -> PauseClaims:
    approval = interaction == APPROVE_TOOL_CALL
    return PauseClaims(
        token_id="k", scope_hash="s", session_id="s", run_id="r", tool_call_id="c2",
        interrupt_id="", thread_id="t", checkpoint_id="cp", interaction=interaction,
        request_hash="h", issued_at=T0, not_before=T0, expires_at=T0 + timedelta(hours=1),
        tool_name="buy" if approval else "",
        arguments_hash=arguments_hash(ARGS) if approval else "",
    )  # fmt: skip


def _decide(**kw: object) -> dict[str, object]:
    options: dict[str, object] = {"approve": False, "edit": None, "reject": None, "message": None}
    options.update(kw)
    response: dict[str, object] = json.loads(decision_response(_claims(), **options))  # type: ignore[arg-type]
    return response


def test_the_decisions_write_what_the_python_helpers_write_for_the_bound_call() -> None:
    assert _decide(approve=True) == approve("buy", ARGS)
    assert _decide(approve=True, message="go") == approve("buy", ARGS, message="go")
    edited = {"litres": 2, "item": "paint"}
    assert _decide(edit=json.dumps(edited)) == edit("buy", ARGS, edited)
    assert _decide(reject="not today") == reject("buy", ARGS, "not today")
    for response in (_decide(approve=True), _decide(edit='{"a": 1}'), _decide(reject="no")):
        assert approval_mismatch(response, "buy", arguments_hash(ARGS)) is None


def test_a_decision_for_a_question_or_edited_arguments_not_json_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="this one asks ask_user: answer it with --response"):
        decision_response(_claims(ASK_USER), approve=True, edit=None, reject=None, message=None)
    with pytest.raises(ValueError, match="--edit takes the arguments as JSON"):
        _decide(edit="{litres: 2}")
