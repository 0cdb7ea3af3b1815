"""The waiting index and its counts: the pages of pending pauses and how many wait.

A pause is in the waiting index exactly while it is in the deadline index (it exists, its token
unspent), with the facts a page filters on; the counts change only when a pause enters or
leaves, so a replay of the same records leaves them as they were. Each rule is checked against
the deadline index's own answer (``Store.pending``), which walks every pause.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.deployment import sample_checkpoint
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.interactions import ASK_USER
from turnlog.projections import layout
from turnlog.projections.batch import Batch
from turnlog.projections.store import Store
from turnlog.wire.codec import encode

T0 = datetime(2026, 3, 1, 9, 59, 30, tzinfo=UTC)  # half a minute before an hour turns
T0_MS = int(T0.timestamp() * 1000)


def pause_bytes(
    thread: str,
    token: str,
    *,
    checkpoint: str = "cp-1",
    scope: str = "tenant-a",
    interaction: str = ASK_USER,
    paused: datetime = T0,
    expires: datetime = T0 + timedelta(hours=1),
) -> bytes:
    cp = dataclasses.replace(sample_checkpoint(thread, checkpoint_id=checkpoint), scope_hash=scope)
    return encode(
        PauseRecorded(
            event_id=f"e-{token}", occurred_at=paused, package_version="t", checkpoint=cp,
            token_id=token, request_json=json.dumps({"question": "?"}), request_hash="h",
            response_schema=interaction, expires_at=expires,
        )
    )  # fmt: skip


def put(b: Batch, thread: str, token: str, *, checkpoint: str = "cp-1", **kw: object) -> int:
    expires = kw.get("expires", T0 + timedelta(hours=1))
    assert isinstance(expires, datetime)
    exp = int(expires.timestamp() * 1000)
    value = pause_bytes(thread, token, checkpoint=checkpoint, **kw)  # type: ignore[arg-type]
    b.put_pause(thread, checkpoint, 1, value, token_id=token, expires_at_ms=exp)
    return exp


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "db") as opened:
        yield opened


def listed(store: Store, now_ms: int = T0_MS, **filters: object) -> list[str]:
    """Every page, followed to its end, as token ids (each page at most two)."""
    tokens: list[str] = []
    after = None
    while True:
        page = store.pending_page(now_ms, after=after, limit=2, **filters)  # type: ignore[arg-type]
        tokens += [p.token_id for p in page.items]
        if page.next is None:
            return tokens
        after = page.next


def walked(store: Store, now_ms: int = T0_MS) -> list[str]:
    return [p.token_id for p in store.pending(now_ms)]


def agrees(store: Store, now_ms: int = T0_MS) -> None:
    assert listed(store, now_ms) == walked(store, now_ms)
    assert store.pending_count(now_ms) == len(walked(store, now_ms))


def test_a_recorded_pause_waits_with_its_facts_and_is_counted(store: Store) -> None:
    with store.batch() as b:
        put(b, "t1", "k1", paused=T0 - timedelta(minutes=5))
    page = store.pending_page(T0_MS)
    assert page.next is None
    (one,) = page.items
    assert (one.token_id, one.thread_id, one.checkpoint_id) == ("k1", "t1", "cp-1")
    assert (one.interaction, one.scope, one.session, one.run, one.call) == (
        ASK_USER, "tenant-a", "session-t1", "run-t1", "call-1",
    )  # fmt: skip
    assert one.paused_at_ms == T0_MS - 300_000
    assert store.pending_count(T0_MS) == 1
    agrees(store)


def test_spent_and_expired_pauses_leave_the_index_and_the_count(store: Store) -> None:
    with store.batch() as b:
        for i in range(4):
            put(b, f"t{i}", f"k{i}")
    with store.batch() as b:
        b.put_consumption("t1", "k1", "resumed", "a-1")
        b.put_consumption("t2", "k2", "expired", "")
    assert listed(store) == ["k0", "k3"]
    agrees(store)
    assert store.pending_count(T0_MS) == 2


def test_a_superseding_pause_of_the_same_checkpoint_replaces_the_older(store: Store) -> None:
    with store.batch() as b:
        put(b, "t", "k-old")
    with store.batch() as b:
        put(b, "t", "k-new", expires=T0 + timedelta(hours=2))
    assert listed(store) == ["k-new"]
    agrees(store)
    assert store.pending_count(T0_MS) == 1


def test_a_tombstone_and_a_forget_take_pauses_out(store: Store) -> None:
    with store.batch() as b:
        put(b, "t1", "k1")
        put(b, "t2", "k2")
    with store.batch() as b:
        b.delete_pause("t1", "cp-1")
    store.forget("t2")
    assert listed(store) == []
    assert store.pending_count(T0_MS) == 0
    assert store.pending_count(0) == 0


def test_a_retired_row_puts_its_pause_back_below_now_not_in_the_pages(store: Store) -> None:
    """Retirement tombstones the ledger row: the pause is unspent again (the content says so),
    at a deadline long past, so no page and no count at a later ``now`` sees it."""
    old = T0 - timedelta(days=9)
    with store.batch() as b:
        put(b, "t-old", "k-old", paused=old - timedelta(hours=1), expires=old)
        put(b, "t-open", "k-open")
    with store.batch() as b:
        b.put_consumption("t-old", "k-old", "expired", "")
    with store.batch() as b:
        b.delete_consumption("t-old", "k-old")
    assert listed(store) == ["k-open"]
    agrees(store)
    old_ms = int(old.timestamp() * 1000)
    # Back in the index with its facts, where a page from before its deadline finds it.
    (back, _) = store.pending_page(old_ms - 1).items
    assert (back.token_id, back.interaction, back.scope) == ("k-old", ASK_USER, "tenant-a")
    assert store.pending_count(old_ms - 1) == 2


def test_the_same_records_applied_again_change_no_count_and_no_index(tmp_path: Path) -> None:
    exp = T0_MS + 3_600_000
    values = {
        "k1": pause_bytes("t1", "k1"),
        "k2": pause_bytes("t2", "k2", interaction=APPROVE_TOOL_CALL),
        "k3": pause_bytes("t3", "k3", scope="tenant-b"),
    }

    def apply(b: Batch) -> None:  # the same records each time (a checkpoint's bytes hold a time)
        for token, value in values.items():
            thread = f"t{token[1:]}"
            b.put_pause(thread, "cp-1", 1, value, token_id=token, expires_at_ms=exp)
            if token == "k2":
                b.put_consumption("t2", "k2", "resumed", "a-2")

    with Store.open(tmp_path / "once") as once, Store.open(tmp_path / "thrice") as thrice:
        with once.batch() as b:
            apply(b)
        for _ in range(2):
            with thrice.batch() as b:  # again in a batch of its own
                apply(b)
        with thrice.batch() as b:  # and twice within one batch
            apply(b)
            apply(b)
        assert thrice.digest() == once.digest()
        assert thrice.pending_count(T0_MS) == once.pending_count(T0_MS) == 2
        assert _counts(thrice) == _counts(once)
        assert listed(thrice) == listed(once) == ["k1", "k3"]


def _counts(store: Store) -> dict[bytes, bytes]:
    low, high = b"count\x00", b"count\x01"
    return dict(store._scan(layout.META, low, high))


def test_the_count_agrees_with_the_walk_at_any_moment(store: Store) -> None:
    """Deadlines over a few hours, on and around minute and hour edges; counted at moments
    on, before and after them, with pauses spent and retired in between."""
    rng = random.Random(31)
    tokens = []
    with store.batch() as b:
        for i in range(300):
            exp = T0 + timedelta(milliseconds=rng.choice([0, 1, 59_999, 60_000, 3_599_999]))
            exp += timedelta(minutes=rng.randrange(0, 240))
            put(b, f"t{i}", f"k{i}", expires=exp)
            tokens.append((f"t{i}", f"k{i}", int(exp.timestamp() * 1000)))
    with store.batch() as b:
        for thread, token, _ in tokens[::7]:
            b.put_consumption(thread, token, "resumed", "a")
    with store.batch() as b:
        for thread, token, _ in tokens[::14]:
            b.delete_consumption(thread, token)
    moments = [T0_MS, 0] + [exp + d for _, _, exp in tokens[:60] for d in (-1, 0, 1)]
    for now_ms in moments:
        assert store.pending_count(now_ms) == len(walked(store, now_ms)), now_ms


def test_pages_filter_by_scope_interaction_age_and_the_other_axes(store: Store) -> None:
    with store.batch() as b:
        put(b, "a1", "k1", paused=T0 - timedelta(hours=2))
        put(b, "a2", "k2", interaction=APPROVE_TOOL_CALL, expires=T0 + timedelta(hours=2))
        put(b, "b1", "k3", scope="tenant-b", paused=T0 - timedelta(hours=3))
        put(b, "c1", "k4", scope="tenant-c", interaction=APPROVE_TOOL_CALL)
        put(b, "gone", "k5", expires=T0 - timedelta(seconds=1))  # its window closed
    assert listed(store) == ["k1", "k3", "k4", "k2"]
    assert listed(store, scope="tenant-a") == ["k1", "k2"]
    assert listed(store, scope={"tenant-a", "tenant-c"}) == ["k1", "k4", "k2"]
    assert listed(store, scope=()) == []
    assert listed(store, interaction=APPROVE_TOOL_CALL) == ["k4", "k2"]
    assert listed(store, scope="tenant-a", interaction=APPROVE_TOOL_CALL) == ["k2"]
    assert listed(store, older_than_ms=3_600_000) == ["k1", "k3"]
    assert listed(store, session="session-a2") == ["k2"]
    assert listed(store, run="run-b1", scope="tenant-b") == ["k3"]
    assert listed(store, call="call-9") == []
    assert listed(store, where=lambda p: p.thread_id.startswith("c")) == ["k4"]


def test_a_page_reads_no_more_than_it_may_and_says_where_to_go_on(store: Store) -> None:
    with store.batch() as b:
        for i in range(30):
            put(b, f"a{i:02}", f"k{i:02}", expires=T0 + timedelta(minutes=i + 1))
        put(b, "z", "k-b", scope="tenant-b", expires=T0 + timedelta(hours=3))
    short = store.pending_page(T0_MS, scope="tenant-a", run="run-z", max_scan=10)
    assert short.items == [] and short.next is not None
    rest = store.pending_page(T0_MS, run="run-z", after=short.next)
    assert [p.token_id for p in rest.items] == ["k-b"] and rest.next is None


def test_a_cursor_that_is_not_one_is_refused_by_name(store: Store) -> None:
    for bad in ("", "!!!", "AAAA", "a" * 7, "not-a-cursor"):
        with pytest.raises(ValueError, match="not a page cursor"):
            store.pending_page(T0_MS, after=bad)
    with pytest.raises(ValueError, match="at least one"):
        store.pending_page(T0_MS, limit=0)


def test_one_thread_s_waiting_pauses_are_read_through_its_own_keys(store: Store) -> None:
    with store.batch() as b:
        put(b, "t", "k1", checkpoint="cp-1", expires=T0 + timedelta(hours=2))
        put(b, "t", "k2", checkpoint="cp-2")
        put(b, "t", "k3", checkpoint="cp-3")
        put(b, "t", "k4", checkpoint="cp-4", expires=T0 - timedelta(seconds=1))
        put(b, "other", "k5")
        b.put_consumption("t", "k3", "resumed", "a")
    assert [p.token_id for p in store.waiting_of_thread("t", T0_MS)] == ["k2", "k1"]
    assert store.waiting_of_thread("no\x00such", T0_MS) == []


def test_the_changes_feed_says_what_entered_and_left_netted_per_batch(store: Store) -> None:
    start = store.changes_next()
    with store.batch() as b:
        put(b, "t1", "k1")
        put(b, "t2", "k2", scope="tenant-b")
        put(b, "t3", "k3")
        put(b, "t4", "k4")
    with store.batch() as b:
        b.put_consumption("t1", "k1", "resumed", "a")
        b.put_consumption("t2", "k2", "expired", "")
        b.delete_pause("t3", "cp-1")
    value = pause_bytes("t4", "k4")
    with store.batch() as b:  # the same pause recorded again: it left and came back
        b.put_pause("t4", "cp-1", 1, value, token_id="k4", expires_at_ms=T0_MS + 3_600_000)
    changes = store.changes(start)
    assert changes is not None
    assert [(c.kind, c.token_id) for c in changes] == [
        ("added", "k1"), ("added", "k2"), ("added", "k3"), ("added", "k4"),
        ("answered", "k1"), ("expired", "k2"), ("gone", "k3"),
    ]  # fmt: skip
    assert [c.number for c in changes] == list(range(start, start + 7))
    assert (changes[1].scope, changes[1].thread_id, changes[1].interaction) == (
        "tenant-b", "t2", ASK_USER,
    )  # fmt: skip
    assert store.changes(start + 5) == changes[5:]
    assert store.changes(store.changes_next()) == []
    assert store.changes(store.changes_next() + 1) is None  # past the end: read the pages


def test_the_feed_keeps_its_last_entries_only(store: Store) -> None:
    with store.batch() as b:
        for i in range(layout.CHANGES_KEPT + 5):
            b.put_pause(f"t{i}", "cp", 1, b"x", token_id=f"k{i}", expires_at_ms=T0_MS + i)
    end = store.changes_next()
    assert end == layout.CHANGES_KEPT + 5
    assert store.changes(4) is None
    kept = store.changes(5)
    assert kept is not None and len(kept) == layout.CHANGES_KEPT and kept[0].token_id == "k5"


def test_a_bulk_load_writes_no_feed_and_windows_closing_are_a_range(tmp_path: Path) -> None:
    with Store.open(tmp_path / "bulk", bulk=True) as bulk:
        with bulk.batch() as b:
            for i in range(5):
                put(b, f"t{i}", f"k{i}", expires=T0 + timedelta(minutes=i))
        assert bulk.changes_next() == 0
        closing = bulk.waiting_between(T0_MS, T0_MS + 120_000)
        assert [p.token_id for p in closing] == ["k1", "k2"]
        assert bulk.waiting_between(T0_MS, T0_MS) == []
