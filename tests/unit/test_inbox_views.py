"""The inbox's reading of the projection: what is pending for whom, and one pause's state."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.deployment import sample_checkpoint
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.interactions import ASK_USER
from turnlog.contracts.visible import SUMMARY_CHARS, clip, visible
from turnlog.inbox.auth import Viewer
from turnlog.inbox.views import (
    ANSWERED,
    EXPIRED,
    PENDING,
    Question,
    Shown,
    duration,
    hidden_characters,
    json_text,
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


def test_an_answered_pause_names_who_continues_its_turn_done_or_not(store: Store) -> None:
    assert pause_view(store, "t4", NOW).continued is None  # resumed, nobody claimed it yet
    at_ms = int(datetime(2026, 12, 5, 18, 0, tzinfo=UTC).timestamp() * 1000)
    with store.batch() as batch:
        batch.put_consumption(
            "spent-a", "t4", "resumed", "answer-1", claim=("c-1", "agent-a", at_ms, "claimed")
        )
    view = pause_view(store, "t4", NOW)
    assert view is not None and view.status == ANSWERED
    assert view.continued == (
        "Continued by agent-a since 2026-12-05 18:00:00 UTC, not done yet: still running, or "
        "its process died before it said done"
    )
    with store.batch() as batch:
        batch.put_consumption(
            "spent-a", "t4", "resumed", "answer-1", claim=("c-1", "agent-a", at_ms, "finished")
        )
    done = pause_view(store, "t4", NOW)
    assert done is not None and done.continued == (
        "Continued by agent-a since 2026-12-05 18:00:00 UTC, done"
    )


def test_a_pause_shows_its_question_or_its_call_each_argument_whole(store: Store) -> None:
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
    assert service == Shown("service", "billing") and not service.more
    assert notes.text == "x" * 200  # whole: the page an approval is given on shows it all
    assert notes.preview == "x" * 80 and notes.more == "120 more characters"  # the list says
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


# -- what a pause says, made visible (issue 29: an approval spoofed with Unicode controls) ------

SPOOFED = {
    "to_account": "DE00 1111 \u202e9999 0000",
    "amount_eur": "100\u202e00001",
    "recipient": "bob@\u202emoc.live\u202c.example.com",
}


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("DE00 1111 \u202e9999 0000", "DE00 1111 ⟨U+202E⟩9999 0000"),
        ("100\u202e00001", "100⟨U+202E⟩00001"),
        ("bob@\u202emoc.live\u202c.example.com", "bob@⟨U+202E⟩moc.live⟨U+202C⟩.example.com"),
        ("Delete the \u202etseT database?", "Delete the ⟨U+202E⟩tseT database?"),
        ("a\u2066b\u2069c\u200ed\u200fe\u061cf", "a⟨U+2066⟩b⟨U+2069⟩c⟨U+200E⟩d⟨U+200F⟩e⟨U+061C⟩f"),
        ("pay\u200bpal\u200c\u200d\ufeff", "pay⟨U+200B⟩pal⟨U+200C⟩⟨U+200D⟩⟨U+FEFF⟩"),
        ("soft\u00adhyphen, tag\U000e0041", "soft⟨U+00AD⟩hyphen, tag⟨U+E0041⟩"),
        ("bell\x07 del\x7f c1\x85 nul\x00", "bell⟨U+0007⟩ del⟨U+007F⟩ c1⟨U+0085⟩ nul⟨U+0000⟩"),
        ("line\u2028para\u2029", "line⟨U+2028⟩para⟨U+2029⟩"),
        ("filler\u3164 cgj\u034f", "filler⟨U+3164⟩ cgj⟨U+034F⟩"),
        ("lone \ud800 surrogate", "lone ⟨U+D800⟩ surrogate"),
        ("two\nlines\tand a tab\r", "two⟨U+000A⟩lines⟨U+0009⟩and a tab⟨U+000D⟩"),
        ("plain text, é, 日本, emoji 🎉, nbsp\u00a0", "plain text, é, 日本, emoji 🎉, nbsp\u00a0"),
    ],
)
def test_controls_and_format_characters_are_written_out(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(shown) == shown  # idempotent: a filter applied twice changes nothing more


def test_multi_line_text_keeps_its_newlines_and_tabs_and_nothing_else() -> None:
    assert visible("ls -la\n\trm -rf /", multiline=True) == "ls -la\n\trm -rf /"
    assert visible("a\r\nb\u202e", multiline=True) == "a⟨U+000D⟩\nb⟨U+202E⟩"


def test_every_control_and_format_character_of_unicode_is_marked() -> None:
    """Not only the famous ones: every code point of categories Cc and Cf, in every plane."""
    import sys
    import unicodedata

    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp)) in ("Cc", "Cf"):
            assert visible(chr(cp)) == f"⟨U+{cp:04X}⟩", hex(cp)


def test_the_warning_names_every_hidden_character_at_any_depth() -> None:
    assert hidden_characters({"tool": "transfer_funds", "arguments": SPOOFED}) == (
        "U+202C", "U+202E",
    )  # fmt: skip
    assert hidden_characters({"k\u200b": [1, None, ["x\ufeff"]]}) == ("U+200B", "U+FEFF")
    assert hidden_characters({"q": "two\nlines\tok"}) == ()  # a newline hides nothing


def test_the_text_to_edit_escapes_them_and_decodes_to_the_very_same_value() -> None:
    value = {**SPOOFED, "flag": "\U000e0041", "note": "two\nlines"}
    text = json_text(value)
    assert "\u202e" not in text and "\\u202e" in text and "\\udb40\\udc41" in text
    assert json.loads(text) == value


def test_a_summary_is_clipped_with_an_ellipsis() -> None:
    long = "Q" * 200_000
    assert clip(long) == "Q" * SUMMARY_CHARS + "…"
    assert clip("short") == "short"
    assert clip("x" * SUMMARY_CHARS) == "x" * SUMMARY_CHARS


def test_a_pause_with_hidden_characters_says_which(store: Store) -> None:
    put(
        store, "spoof-a", "t7", interaction=APPROVE_TOOL_CALL,
        request={"tool": "transfer_funds", "arguments": SPOOFED},
    )  # fmt: skip
    spoofed = pause_view(store, "t7", NOW)
    assert spoofed is not None and spoofed.hidden == ("U+202C", "U+202E")
    plain = pause_view(store, "t1", NOW)
    assert plain is not None and plain.hidden == ()
    shell = Shown("cmd", "ls -la\nrm -rf /")
    assert shell.lines == 2 and shell.preview == "ls -la"
    assert shell.more == "9 more characters on 1 more line"
