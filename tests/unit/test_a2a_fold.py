"""The A2A task log's rules without a broker: which records count (compare-and-swap by log
order), what a bad record does, and how a continuing message's text becomes an answer."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.a2a import PauseLink, TaskFold, owner_scope, response_from_text
from turnlog.a2a.fold import CANCEL, CONTINUED, DELETE, PAUSE, SAVE, BadTaskRecord, Entry
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, arguments_hash
from turnlog.contracts.interactions import ASK_USER


def _save(task: str, prev: int, write: str, *, owner: str = "alice", state: str = "") -> Entry:
    return Entry(SAVE, task, owner, write, prev=prev, state=state or "TASK_STATE_WORKING",
                 task=write.encode(), event=b"ev-" + write.encode())  # fmt: skip


def _fold(*entries: Entry) -> tuple[TaskFold, list[bool]]:
    fold = TaskFold()
    counted = [fold.apply(e, 0, offset, f"{e.task_id}/{e.write_id}".encode())
               for offset, e in enumerate(entries)]  # fmt: skip
    return fold, counted


def test_of_two_saves_from_one_version_the_first_on_the_log_counts_and_the_second_is_void() -> None:
    fold, counted = _fold(_save("t", 0, "w0"), _save("t", 1, "a"), _save("t", 1, "b"))
    assert counted == [True, True, False]
    stored = fold.tasks["t"]
    assert (stored.version, stored.task) == (2, b"a")  # version = the counted record's offset + 1
    assert [v for v, _ in stored.events] == [1, 2]  # the void save's event is nobody's
    # The loser may derive again from what won, and then counts.
    fold.apply(_save("t", 2, "b2"), 0, 3)
    assert (fold.tasks["t"].version, fold.tasks["t"].task) == (4, b"b2")


def test_two_first_writes_of_one_task_id_and_a_stale_or_unknown_version_are_void() -> None:
    _, counted = _fold(_save("t", 0, "a"), _save("t", 0, "b"), _save("t", 7, "c"),
                       _save("u", 3, "d"))  # fmt: skip
    assert counted == [True, False, False, False]


def test_another_owner_writes_nothing_over_a_task_and_reads_nothing_of_it() -> None:
    fold, counted = _fold(
        _save("t", 0, "a"),
        _save("t", 1, "m", owner="mallory"),
        Entry(CANCEL, "t", "mallory", "c", state="TASK_STATE_CANCELED"),
        Entry(DELETE, "t", "mallory", "d"),
        Entry(PAUSE, "t", "mallory", "p", link=PauseLink("tok", "jti", "c1", ASK_USER)),
    )
    assert counted == [True, False, False, False, False]
    assert fold.owned("t", "mallory") is None and fold.owned("t", "alice") is not None
    assert fold.link("t", "alice") is None and fold.link("t", "mallory") is None


def test_a_cancel_overwrites_an_unfinished_task_without_a_version_and_never_a_finished_one() -> (
    None
):
    cancel = Entry(CANCEL, "t", "alice", "c1", prev=0, state="TASK_STATE_CANCELED")
    fold, counted = _fold(_save("t", 0, "a"), _save("t", 1, "b"), cancel)
    assert counted == [True, True, True] and fold.tasks["t"].state == "TASK_STATE_CANCELED"
    done = _save("u", 0, "x", state="TASK_STATE_COMPLETED")
    _, late = _fold(done, Entry(CANCEL, "u", "alice", "c2", state="TASK_STATE_CANCELED"))
    assert late == [True, False]
    _, unknown = _fold(Entry(CANCEL, "v", "alice", "c3", state="TASK_STATE_CANCELED"))
    assert unknown == [False]


def test_a_writer_learns_its_outcome_from_the_fold_and_delete_forgets_every_key() -> None:
    fold = TaskFold()
    fold.awaited["b"] = None
    fold.awaited["a"] = None
    for offset, entry in enumerate([_save("t", 0, "a"), _save("t", 0, "b")]):
        fold.apply(entry, 0, offset, f"k{offset}".encode())
    assert fold.awaited == {"a": 1, "b": 0}
    link = PauseLink("tok", "jti", "c1", APPROVE_TOOL_CALL, "deploy", "{}")
    fold.apply(Entry(PAUSE, "t", "alice", "p", link=link), 0, 2, b"k2")
    assert fold.link("t", "alice") == link
    assert fold.keys["t"] == [b"k0", b"k1", b"k2"]
    assert fold.apply(Entry(DELETE, "t", "alice", "d"), 0, 3, b"k3")
    assert "t" not in fold.tasks and fold.link("t", "alice") is None and "t" not in fold.keys
    assert fold.applied == {0: 4}


@given(
    st.lists(
        st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 6), st.sampled_from(["a", "m"])),
        max_size=30,
    )
)
def test_every_replica_folding_the_same_log_agrees_and_versions_only_grow(
    writes: list[tuple[str, int, str]],
) -> None:
    entries = [_save(task, prev, f"w{i}", owner=owner) for i, (task, prev, owner) in
               enumerate(writes)]  # fmt: skip
    one, _ = _fold(*entries)
    two, _ = _fold(*entries)
    assert {k: (v.version, v.task) for k, v in one.tasks.items()} == {
        k: (v.version, v.task) for k, v in two.tasks.items()
    }
    for stored in one.tasks.values():
        versions = [v for v, _ in stored.events]
        assert versions == sorted(set(versions)) and versions[-1] == stored.version


def test_an_envelope_round_trips_and_anything_else_is_refused_by_name() -> None:
    link = PauseLink("tok", "jti", "c1", APPROVE_TOOL_CALL, "deploy", '{"service":"b"}')
    entry = Entry(PAUSE, "t", "alice", "p", link=link, task=b"\x00\xff", event=b"\x01")
    assert Entry.decode(entry.encode()) == entry
    for bad, words in [
        (b"not json", "unreadable"),
        (json.dumps({"v": 99}).encode(), "version 1"),
        (json.dumps({"v": 1, "kind": "merge"}).encode(), "unknown record kind 'merge'"),
        (json.dumps({"v": 1, "kind": "save"}).encode(), "unreadable"),
    ]:
        with pytest.raises(BadTaskRecord, match=words):
            Entry.decode(bad)
    fold = TaskFold()
    fold.skip(1, 41)
    assert fold.applied == {1: 42} and not fold.tasks


def test_a_continuing_messages_text_is_an_approval_a_rejection_an_answer_or_nothing() -> None:
    arguments = {"service": "billing", "region": "eu"}
    link = PauseLink("tok", "jti", "c1", APPROVE_TOOL_CALL, "deploy", json.dumps(arguments))
    approved = response_from_text(link, "Approve.")
    assert approved is not None and approved["decision"] == "approve"
    assert approved["arguments_hash"] == arguments_hash(arguments)
    rejected = response_from_text(link, "reject, not on a Friday")
    assert rejected is not None and rejected["decision"] == "reject"
    assert rejected["message"] == "reject, not on a Friday"
    for nothing in ("maybe", "", "   ", "approval pending?"):
        assert response_from_text(link, nothing) is None
    question = PauseLink("tok", "jti", "c2", ASK_USER)
    assert response_from_text(question, " eu-west ") == {
        "answers": [{"selections": [], "other": "eu-west"}]
    }
    assert response_from_text(question, "  ") is None


def test_the_pause_scope_is_a_digest_of_the_owner() -> None:
    assert owner_scope("alice") == owner_scope("alice") != owner_scope("mallory")
    assert "alice" not in owner_scope("alice") and owner_scope("").startswith("a2a-")


def test_which_message_continued_which_pause_is_kept_for_the_tasks_owner_only() -> None:
    first = PauseLink("tok-1", "jti-1", "c1", ASK_USER)
    second = PauseLink("tok-2", "jti-2", "c2", APPROVE_TOOL_CALL, "deploy", "{}")
    fold, counted = _fold(
        Entry(CONTINUED, "t", "alice", "x0", link=first, message_id="m-1"),  # no task yet
        _save("t", 0, "a"),
        Entry(CONTINUED, "t", "alice", "x1", link=first, message_id="m-1"),
        Entry(CONTINUED, "t", "mallory", "x2", link=second, message_id="m-2"),
        Entry(CONTINUED, "t", "alice", "x3", link=second, message_id=""),
        Entry(CONTINUED, "t", "alice", "x4", link=second, message_id="m-2"),
    )
    assert counted == [False, True, True, False, False, True]
    assert fold.continued_pause("t", "alice", "m-1") == "jti-1"
    assert fold.continued_pause("t", "alice", "m-2") == "jti-2"
    assert fold.continued_pause("t", "mallory", "m-1") is None
    assert fold.continued_pause("t", "alice", "m-3") is None


def test_a_tombstone_of_a_tasks_record_drops_the_task_and_another_tasks_stays() -> None:
    """What ``turnlog forget`` writes: no replica serves the task from memory afterwards."""
    fold, _ = _fold(_save("t", 0, "w0"), _save("u", 0, "x0"))
    fold.apply(Entry(PAUSE, "t", "alice", "p", link=PauseLink("tok", "tid", "c", ASK_USER)), 0, 2,
               b"t\x00p")  # fmt: skip
    fold.tombstone(b"u\x00unknown", 0, 3)  # a key the fold never saw: nothing dropped
    assert set(fold.tasks) == {"t", "u"}
    fold.tombstone(b"t\x00p", 0, 4)
    assert set(fold.tasks) == {"u"} and "t" not in fold.links and "t" not in fold.keys
    assert fold.applied[0] == 5
