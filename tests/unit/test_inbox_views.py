"""The inbox's reading of the projection: what is pending for whom, and one pause's state."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.deployment import sample_checkpoint
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.interactions import ASK_USER
from turnlog.inbox.auth import Viewer
from turnlog.inbox.views import (
    ANSWERED,
    EXPIRED,
    PENDING,
    Question,
    Shown,
    duration,
    pause_view,
    pending_for,
    questions_of,
)
from turnlog.projections.store import Store
from turnlog.wire.codec import encode

NOW = utc_now()
ALICE = Viewer("alice", frozenset({"tenant-a"}))
OPS = Viewer("ops", frozenset({"*"}))


def put(
    store: Store,
    thread: str,
    token: str,
    *,
    scope: str = "tenant-a",
    interaction: str = ASK_USER,
    request: Any = None,
    paused: datetime = NOW,
    expires: datetime = NOW + timedelta(hours=1),
) -> None:
    cp = dataclasses.replace(sample_checkpoint(thread), scope_hash=scope)
    pause = PauseRecorded(
        event_id=f"e-{token}",
        occurred_at=paused,
        package_version="t",
        checkpoint=cp,
        token_id=token,
        request_json=json.dumps(request or {"question": f"about {thread}?"}),
        request_hash="h",
        response_schema=interaction,
        expires_at=expires,
    )
    with store.batch() as batch:
        batch.put_pause(
            thread, cp.checkpoint_id, cp.sequence, encode(pause),
            token_id=token, expires_at_ms=int(expires.timestamp() * 1000),
        )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "projection") as opened:
        put(opened, "old-a", "t1", paused=NOW - timedelta(minutes=5))
        put(opened, "new-a", "t2", paused=NOW - timedelta(minutes=1))
        put(opened, "other-b", "t3", scope="tenant-b")
        put(opened, "spent-a", "t4")
        put(opened, "gone-a", "t5", expires=NOW - timedelta(seconds=1))
        put(
            opened, "call-a", "t6", interaction=APPROVE_TOOL_CALL,
            request={"tool": "deploy", "arguments": {"service": "billing", "notes": "x" * 200}},
        )  # fmt: skip
        with opened.batch() as batch:
            batch.put_consumption("spent-a", "t4", "resumed", "answer-1")
        yield opened


def test_the_list_holds_the_viewer_s_pending_pauses_oldest_first(store: Store) -> None:
    assert [v.thread_id for v in pending_for(store, ALICE, NOW)] == ["old-a", "new-a", "call-a"]
    assert {v.thread_id for v in pending_for(store, OPS, NOW)} == {
        "old-a", "new-a", "call-a", "other-b",
    }  # fmt: skip
    assert pending_for(store, Viewer("nobody", frozenset({"tenant-z"})), NOW) == []


def test_filters_narrow_by_interaction_and_a_part_of_the_thread(store: Store) -> None:
    by_call = pending_for(store, ALICE, NOW, interaction=APPROVE_TOOL_CALL)
    assert [v.thread_id for v in by_call] == ["call-a"]
    assert [v.thread_id for v in pending_for(store, ALICE, NOW, thread="NEW")] == ["new-a"]
    assert pending_for(store, ALICE, NOW, thread="other") == []  # not alice's


def test_one_pause_says_whether_it_is_pending_answered_or_expired(store: Store) -> None:
    states = {t: pause_view(store, t, NOW) for t in ("t1", "t4", "t5", "missing")}
    assert {t: v.status if v else None for t, v in states.items()} == {
        "t1": PENDING, "t4": ANSWERED, "t5": EXPIRED, "missing": None,
    }  # fmt: skip
    later = pause_view(store, "t1", NOW + timedelta(hours=2))
    assert later is not None and later.status == EXPIRED
    with store.batch() as batch:
        batch.put_consumption("old-a", "t1", "expired", "")
    spent = pause_view(store, "t1", NOW)
    assert spent is not None and spent.status == EXPIRED


def test_a_pause_shows_its_question_or_its_call_with_long_values_folded(store: Store) -> None:
    asked = pause_view(store, "t1", NOW)
    assert asked is not None
    assert asked.summary == "about old-a?"
    assert asked.questions == (Question("about old-a?"),)
    assert asked.tool is None and asked.shown_arguments == ()
    assert asked.age(NOW) == timedelta(minutes=5)
    assert asked.time_left(NOW) == timedelta(hours=1)
    assert [m["role"] for m in asked.messages] == ["system", "user", "assistant"]
    call = pause_view(store, "t6", NOW)
    assert call is not None
    assert call.summary == "approve deploy" and call.tool == "deploy"
    service, notes = call.shown_arguments
    assert service == Shown("service", "billing") and not service.folded
    assert notes.folded and notes.short == "x" * 80 + "…"
    assert json.loads(call.arguments_text) == {"service": "billing", "notes": "x" * 200}


def test_questions_are_read_from_either_request_shape() -> None:
    many = questions_of(
        {"questions": [{"question": "Q", "header": "H", "options": ["a", {"label": "b",
         "description": "d"}, 3], "multiSelect": True}, "junk"]}
    )  # fmt: skip
    assert len(many) == 1
    assert many[0].header == "H" and many[0].multi
    assert [(o.label, o.description) for o in many[0].options] == [("a", ""), ("b", "d")]
    assert questions_of({"question": "Free?"}) == (Question("Free?"),)
    assert questions_of("text") == () and questions_of({"questions": "x"}) == ()


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (42, "42s"),
        (423, "7m 3s"),
        (5 * 3600 + 720, "5h 12m"),
        (3 * 86400 + 4 * 3600, "3d 4h"),
    ],
)
def test_durations_read_in_two_units(seconds: int, shown: str) -> None:
    assert duration(timedelta(seconds=seconds)) == shown
