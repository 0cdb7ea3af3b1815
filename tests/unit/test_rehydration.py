"""Rebuilding a paused turn: the answer on its call, "not dispatched" on the round's others."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.messages import NOT_DISPATCHED, normalize_message
from turnlog.contracts.refusals import RefusalReason, Refused
from turnlog.contracts.rehydration import rehydrate

TRANSCRIPT = [
    {"role": "system", "content": "You help people pick colours."},
    {"role": "user", "content": "Paint my kitchen."},
]


def checkpoint(*call_ids: str, transcript: list[dict[str, Any]] | None = None) -> TurnCheckpoint:
    requests = [ReservedCall(c, "ask_user" if c == "ask" else f"tool_{c}", {}) for c in call_ids]
    messages = captured_messages(
        TRANSCRIPT if transcript is None else transcript, "Let me ask.", requests
    )
    return TurnCheckpoint(thread_id="t", checkpoint_id="cp", messages=messages)


def tool(call_id: str, name: str, content: str) -> dict[str, Any]:
    return normalize_message(
        {"role": "tool", "content": content, "tool_call_id": call_id, "name": name}
    )


def test_one_reserved_call_gets_the_answer() -> None:
    cp = checkpoint("ask")
    history = rehydrate(cp, "ask", 'answer 1: selected "Blue"')
    assert history[: len(cp.messages)] == tuple(dict(m) for m in cp.messages)
    assert history[len(cp.messages) :] == (tool("ask", "ask_user", 'answer 1: selected "Blue"'),)


def test_three_reserved_calls_answered_on_the_second() -> None:
    cp = checkpoint("c1", "ask", "c3")
    history = rehydrate(cp, "ask", "the answer")
    assert history[len(cp.messages) :] == (
        tool("ask", "ask_user", "the answer"),
        tool("c1", "tool_c1", NOT_DISPATCHED),
        tool("c3", "tool_c3", NOT_DISPATCHED),
    )


@given(
    ids=st.lists(
        st.text(st.characters(codec="ascii"), min_size=1, max_size=8),
        min_size=1,
        max_size=6,
        unique=True,
    ),
    data=st.data(),
)
def test_every_reserved_call_gets_exactly_one_result(ids: list[str], data: st.DataObject) -> None:
    answered = data.draw(st.sampled_from(ids))
    cp = checkpoint(*ids)
    added = rehydrate(cp, answered, "the answer")[len(cp.messages) :]
    results = [m["tool_call_id"] for m in added]
    assert sorted(results) == sorted(ids)
    assert added[0]["tool_call_id"] == answered and added[0]["content"] == "the answer"
    assert all(m["content"] == NOT_DISPATCHED for m in added[1:])
    assert answered not in results[1:]


def test_a_call_that_already_has_a_result_keeps_only_that_one() -> None:
    cp = checkpoint("c1", "ask")
    done = TurnCheckpoint(
        thread_id="t", checkpoint_id="cp", messages=(*cp.messages, tool("c1", "tool_c1", "ran"))
    )
    added = rehydrate(done, "ask", "answer")[len(done.messages) :]
    assert added == (tool("ask", "ask_user", "answer"),)


def test_the_last_round_with_calls_is_the_asking_round() -> None:
    earlier: list[dict[str, Any]] = [
        *TRANSCRIPT,
        {"role": "assistant", "content": "", "tool_calls": [{"id": "old", "name": "search"}]},
        {"role": "tool", "content": "found", "tool_call_id": "old"},
    ]
    cp = checkpoint("ask", transcript=earlier)
    added = rehydrate(cp, "ask", "answer")[len(cp.messages) :]
    assert [m["tool_call_id"] for m in added] == ["ask"]


def refused(cp: TurnCheckpoint, call_id: str) -> Refused:
    with pytest.raises(Refused) as caught:
        rehydrate(cp, call_id, "answer")
    assert caught.value.reason is RefusalReason.ASKING_ROUND_MISSING
    assert caught.value.refusal.step == 5
    return caught.value


def test_checkpoint_without_an_asking_round_is_refused_by_name() -> None:
    refused(TurnCheckpoint(thread_id="t", checkpoint_id="cp", messages=tuple(TRANSCRIPT)), "ask")


def test_answered_call_outside_the_asking_round_is_refused_by_name() -> None:
    refused(checkpoint("c1", "c2"), "ask")
    refused(checkpoint("c1"), "")


def test_answered_call_that_already_has_a_result_is_refused_by_name() -> None:
    cp = checkpoint("ask")
    done = TurnCheckpoint(
        thread_id="t", checkpoint_id="cp", messages=(*cp.messages, tool("ask", "ask_user", "x"))
    )
    refused(done, "ask")
