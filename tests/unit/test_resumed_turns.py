"""Continuing a resumed turn: history conversions and the three entry points."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from tests.deployment import REQUEST, sample_checkpoint
from turnlog.clock import utc_now
from turnlog.consumers.resumed import (
    history_dicts,
    history_langchain,
    resume_run,
    resume_stream,
    resume_stream_typed,
)
from turnlog.contracts.events import AskUserAnswered, TurnResumed
from turnlog.contracts.messages import NOT_DISPATCHED
from turnlog.contracts.rehydration import rehydrate


def _turn(answered: AskUserAnswered | None = None) -> TurnResumed:
    cp = sample_checkpoint("t-1")
    return TurnResumed(
        event_id="e",
        occurred_at=utc_now(),
        package_version="test",
        token_id="tok",
        answer_id="ans",
        run_id=cp.run_id,
        session_id=cp.session_id,
        thread_id=cp.thread_id,
        checkpoint_id=cp.checkpoint_id,
        interrupt_id=cp.interrupt_id,
        tool_call_id="call-1",
        name="ask_user",
        prompt=cp.prompt,
        response_json="{}",
        history=rehydrate(cp, "call-1", "region: eu"),
        answered=answered,
    )


def test_history_dicts_are_openai_shaped() -> None:
    dicts = history_dicts(_turn())
    assert [d["role"] for d in dicts] == ["system", "user", "assistant", "tool", "tool", "tool"]
    calls = dicts[2]["tool_calls"]
    assert [c["id"] for c in calls] == ["call-1", "call-2", "call-3"]
    assert calls[0] == {
        "id": "call-1",
        "type": "function",
        "function": {
            "name": "ask_user",
            "arguments": json.dumps(json.loads(REQUEST), separators=(",", ":"), sort_keys=True),
        },
    }
    assert "tool_calls" not in dicts[0] and "tool_call_id" not in dicts[0]
    assert [(d["tool_call_id"], d["content"]) for d in dicts[3:]] == [
        ("call-1", "region: eu"),
        ("call-2", NOT_DISPATCHED),
        ("call-3", NOT_DISPATCHED),
    ]


def test_history_converts_to_langchain_messages() -> None:
    messages = history_langchain(_turn())
    assert [type(m) for m in messages] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
        ToolMessage,
    ]
    asking = messages[2]
    assert isinstance(asking, AIMessage)
    assert [c["id"] for c in asking.tool_calls] == ["call-1", "call-2", "call-3"]
    assert asking.tool_calls[0]["args"] == json.loads(REQUEST)
    assert [m.tool_call_id for m in messages[3:] if isinstance(m, ToolMessage)] == [
        "call-1",
        "call-2",
        "call-3",
    ]


async def test_resume_run_hands_the_rehydrated_history_to_the_callable() -> None:
    seen: dict[str, Any] = {}

    async def run(prompt: str, **kwargs: Any) -> str:
        seen.update(prompt=prompt, **kwargs)
        return "done"

    turn = _turn()
    assert await resume_run(run, turn, temperature=0) == "done"
    assert seen["prompt"] == turn.prompt
    assert (seen["run_id"], seen["session_id"]) == (turn.run_id, turn.session_id)
    assert seen["history"] == history_dicts(turn)
    assert seen["temperature"] == 0


async def _stream(prompt: str, **kwargs: Any) -> AsyncIterator[str]:
    yield f"first:{len(kwargs['history'])}"
    yield "second"


async def test_resume_stream_projects_the_same_invocation() -> None:
    chunks = [c async for c in resume_stream(_stream, _turn())]
    assert chunks == ["first:6", "second"]


async def test_typed_stream_yields_the_answered_event_first_only_when_owed() -> None:
    answered = AskUserAnswered(("eu",), False, 3.0)
    typed = [e async for e in resume_stream_typed(_stream, _turn(answered))]
    assert typed == [answered, "first:6", "second"]
    plain = [e async for e in resume_stream_typed(_stream, _turn(None))]
    assert plain == ["first:6", "second"]


def test_any_calls_token_finds_the_groups_resumed_turn() -> None:
    """Issue 37: a group's turn carries the token of the call answered last, so a thread read
    with the first call's token waited for a turn it had already been given."""
    import dataclasses

    from turnlog.consumers.resumed import _Wanted
    from turnlog.wire.codec import encode

    answers = [
        {"tool_call_id": f"call-{n}", "interrupt_id": "", "token_id": f"tok-{n}",
         "answer_id": f"ans-{n}", "name": "ask_user", "response_json": "{}"}
        for n in (1, 2)
    ]  # fmt: skip
    turn = dataclasses.replace(_turn(), token_id="tok-2", answer_id="ans-2", answers=answers)
    value, key = encode(turn), turn.thread_id.encode()
    for token in ("tok-1", "tok-2", None):
        found = _Wanted(turn.thread_id, token, None, False).event_of(key, value)
        assert found is not None and found.answer_id == "ans-2", token
    assert _Wanted(turn.thread_id, "tok-3", None, False).event_of(key, value) is None
    single = encode(_turn())
    assert _Wanted("t-1", "tok", None, False).event_of(key, single) is not None
    assert _Wanted("t-1", "tok-1", None, False).event_of(key, single) is None
