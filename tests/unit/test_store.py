from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import rocksdict
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.contracts.ledger import LedgerEntry
from turnlog.errors import StoreError
from turnlog.projections import layout
from turnlog.projections.batch import Batch
from turnlog.projections.store import OpenPause, PauseInfo, Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "db") as opened:
        yield opened


def pause(b: Batch, thread: str, seq: int, *, token: str | None = None, exp: int = 0) -> None:
    """A pause whose value names it, so assertions read as (thread, sequence)."""
    value = f"{thread}/{seq}".encode()
    if token is None:
        b.put_pause(thread, f"cp-{seq}", seq, value)
    else:
        b.put_pause(thread, f"cp-{seq}", seq, value, token_id=token, expires_at_ms=exp)


def test_batch_commits_data_and_offsets_together(store: Store) -> None:
    with store.batch() as b:
        pause(b, "t", 1, token="k1", exp=100)
        b.set_offset("turnlog.pauses", 0, 11)
    assert store.latest("t") == b"t/1"
    assert store.offsets() == {("turnlog.pauses", 0): 11}

    with pytest.raises(RuntimeError), store.batch() as b:
        pause(b, "t", 2)
        b.put_consumption("t", "k1", "resumed", "a1")
        b.set_offset("turnlog.pauses", 0, 12)
        raise RuntimeError("crash before commit")
    assert store.latest("t") == b"t/1"
    assert not store.is_spent("k1")
    assert store.offset("turnlog.pauses", 0) == 11


def test_a_batch_commits_once(store: Store) -> None:
    b = store.batch()
    b.set_offset("x", 0, 1)
    b.commit()
    with pytest.raises(StoreError, match="once"):
        b.commit()


def test_reopen_keeps_data_and_offsets(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db") as first:
        with first.batch() as b:
            pause(b, "t", 1, token="k1", exp=50)
            b.put_consumption("t", "k1", "expired", "")
            b.set_offset("turnlog.pauses", 3, 7)
            b.set_offset("turnlog.consumptions", 256, 9)  # a partition whose bytes hold NULs
        digest = first.digest()
    with Store.open(tmp_path / "db") as again:
        assert again.list_checkpoints("t") == [b"t/1"]
        assert again.ledger("k1") == LedgerEntry("expired", "", "t")
        assert again.offsets() == {("turnlog.pauses", 3): 7, ("turnlog.consumptions", 256): 9}
        assert again.offset("turnlog.pauses", 4) is None
        assert again.digest() == digest


def test_checkpoints_are_ordered_by_sequence_not_arrival(store: Store) -> None:
    with store.batch() as b:
        for seq in (5, 256, 1, 2, 70000):
            pause(b, "t", seq)
        pause(b, "t1", 999_999)  # "t1" sorts right after "t": must not leak into "t"
        pause(b, "s", 1_000_000)
    with store.batch() as b:
        pause(b, "t", 3)
    assert store.list_checkpoints("t") == [
        b"t/1", b"t/2", b"t/3", b"t/5", b"t/256", b"t/70000",
    ]  # fmt: skip
    assert store.latest("t") == b"t/70000"
    assert store.latest("t1") == b"t1/999999"
    assert store.latest("nobody") is None
    assert store.list_checkpoints("nobody") == []


def test_same_checkpoint_id_replaces_the_pause(store: Store) -> None:
    with store.batch() as b:
        b.put_pause("t", "cp", 1, b"old", token_id="k-old", expires_at_ms=10)
    with store.batch() as b:
        b.put_pause("t", "cp", 4, b"new", token_id="k-new", expires_at_ms=20)
    assert store.list_checkpoints("t") == [b"new"]
    assert store.pause_for_token("k-old") is None
    assert [p.token_id for p in store.expired(100)] == ["k-new"]
    # What the worker tells a replaced pause from one never recorded by (pause_superseded).
    assert store.token_of_checkpoint("t", "cp") == "k-new"
    assert store.token_of_checkpoint("t", "cp-never") is None


def test_token_lookup_and_ledger(store: Store) -> None:
    with store.batch() as b:
        pause(b, "t", 1, token="k1", exp=1_700_000_000_000)
    assert store.pause_for_token("k1") == PauseInfo(
        thread_id="t",
        checkpoint_id="cp-1",
        order=1,
        token_id="k1",
        expires_at_ms=1_700_000_000_000,
        value=b"t/1",
    )
    assert store.ledger("k1") is None
    assert not store.is_spent("k1")
    with store.batch() as b:
        b.put_consumption("t", "k1", "resumed", "answer-1")
    assert store.ledger("k1") == LedgerEntry("resumed", "answer-1", "t")
    assert store.is_spent("k1")
    assert store.pause_for_token("k1") is not None  # spent, still readable for its history
    with pytest.raises(ValueError, match="outcome"), store.batch() as b:
        b.put_consumption("t", "k2", "maybe", "a")
    with pytest.raises(ValueError, match="together"), store.batch() as b:
        b.put_pause("t", "cp", 1, b"v", token_id="k3")


def test_expired_and_pending_split_at_now(store: Store) -> None:
    with store.batch() as b:
        for i, exp in enumerate((300, 100, 200, 400, 200)):
            pause(b, "t", i, token=f"k{i}", exp=exp)
        b.put_consumption("t", "k2", "resumed", "a")  # spent: neither pending nor expired
    assert list(store.expired(200)) == [OpenPause("k1", "t", 100), OpenPause("k4", "t", 200)]
    assert [p.token_id for p in store.pending(200)] == ["k0", "k3"]
    assert list(store.expired(99)) == []
    assert [p.token_id for p in store.pending(0)] == ["k1", "k4", "k0", "k3"]


def test_expired_scan_reads_only_the_expired_entries(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store.batch() as b:
        for i in range(700):  # more than a page, so paging is exercised too
            pause(b, f"t{i}", 1, token=f"k{i:04}", exp=1_000 + i)
    rows_read = 0
    real_scan = Store._scan

    def counting_scan(self: Store, *args: object) -> list[tuple[bytes, bytes]]:
        nonlocal rows_read
        rows = real_scan(self, *args)  # type: ignore[arg-type]
        rows_read += len(rows)
        return rows

    monkeypatch.setattr(Store, "_scan", counting_scan)
    expired = list(store.expired(1_000 + 599))
    assert [p.token_id for p in expired] == [f"k{i:04}" for i in range(600)]
    assert rows_read == 600


def test_an_abandoned_scan_does_not_keep_the_store_locked(tmp_path: Path) -> None:
    opened = Store.open(tmp_path / "db")
    with opened.batch() as b:
        for i in range(600):
            pause(b, "t", i, token=f"k{i}", exp=i)
    scan = opened.expired(10_000)
    assert next(scan).token_id == "k0"
    opened.close()
    with Store.open(tmp_path / "db") as again:
        assert again.latest("t") == b"t/599"
    with pytest.raises(StoreError, match="closed"):
        list(scan)


def test_consumption_before_its_pause_leaves_nothing_pending(store: Store) -> None:
    with store.batch() as b:
        b.put_consumption("t", "k1", "resumed", "a")
    with store.batch() as b:
        pause(b, "t", 1, token="k1", exp=5)
    assert list(store.expired(10)) == []
    assert list(store.pending(0)) == []


def test_tombstones(store: Store) -> None:
    with store.batch() as b:
        pause(b, "t", 1, token="k1", exp=5)
        pause(b, "t", 2, token="k2", exp=5)
        b.put_consumption("t", "k2", "resumed", "a")
    with store.batch() as b:
        b.delete_pause("t", "cp-1")
        b.delete_consumption("t", "k2")
        b.delete_pause("t", "cp-404")
        b.delete_consumption("t", "k404")
    assert store.list_checkpoints("t") == [b"t/2"]
    assert store.pause_for_token("k1") is None
    assert store.ledger("k2") is None
    assert [p.token_id for p in store.expired(10)] == ["k2"]  # unspent again, and past its window


Op = tuple[str, int]
OPS: list[Op] = [("pause", i) for i in range(6)] + [("consume", i) for i in range(0, 6, 2)]


def apply(target: Store, ops: list[Op], groups: list[int]) -> None:
    """Apply ``ops`` in batches of the given sizes, each batch also advancing an offset."""
    at = 0
    for n, size in enumerate(groups):
        with target.batch() as b:
            for kind, i in ops[at : at + size]:
                if kind == "pause":
                    pause(b, f"th{i % 3}", i, token=f"k{i}", exp=1_000 * i)
                else:
                    b.put_consumption(f"th{i % 3}", f"k{i}", "resumed", f"a{i}")
            b.set_offset("turnlog.pauses", 0, n)
        at += size
    with target.batch() as b:
        for kind, i in ops[at:]:
            if kind == "pause":
                pause(b, f"th{i % 3}", i, token=f"k{i}", exp=1_000 * i)
            else:
                b.put_consumption(f"th{i % 3}", f"k{i}", "resumed", f"a{i}")


def test_digest_depends_on_content_only(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        apply(a, OPS, [len(OPS)])
        apply(b, list(reversed(OPS)), [1, 2, 3, 1])
        assert a.digest() == b.digest()
        assert a.offsets() != b.offsets()  # offsets differ and do not count
        with a.batch() as batch:
            batch.set_offset("turnlog.consumptions", 5, 1234)
        assert a.digest() == b.digest()
        with b.batch() as batch:
            batch.put_consumption("th1", "k1", "expired", "")
        assert a.digest() != b.digest()


@settings(max_examples=25, deadline=None)
@given(st.permutations(OPS), st.lists(st.integers(min_value=1, max_value=4), max_size=6))
def test_digest_is_independent_of_arrival_order(ops: list[Op], groups: list[int]) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        Store.open(Path(tmp, "live")) as live,
        Store.open(Path(tmp, "rebuilt")) as rebuilt,
    ):
        apply(live, ops, groups)
        apply(rebuilt, OPS, [])
        assert live.digest() == rebuilt.digest()
        assert sorted(live.pending(0)) == sorted(rebuilt.pending(0))


def test_empty_store_digest_ignores_metadata(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        with a.batch() as batch:
            batch.set_offset("turnlog.pauses", 0, 10)
        assert a.digest() == b.digest()


def test_forget_removes_a_thread_and_nothing_else(tmp_path: Path) -> None:
    def fill(target: Store, threads: tuple[str, ...]) -> None:
        with target.batch() as b:
            for thread in threads:
                pause(b, thread, 1, token=f"{thread}-k1", exp=10)
                pause(b, thread, 2, token=f"{thread}-k2", exp=20)
                b.put_consumption(thread, f"{thread}-k1", "resumed", "a")
                b.put_consumption(thread, f"{thread}-orphan", "expired", "")

    with Store.open(tmp_path / "both") as both, Store.open(tmp_path / "other") as other:
        fill(both, ("t", "t1"))
        fill(other, ("t1",))
        with both.batch() as b:  # forget in the same batch as more writes of the thread
            pause(b, "t", 3, token="t-k3", exp=30)
            b.forget("t")
        assert both.latest("t") is None
        assert both.ledger("t-orphan") is None
        assert both.pause_for_token("t-k2") is None
        assert both.digest() == other.digest()
        assert both.latest("t1") == b"t1/2"
        both.forget("t1")
        with Store.open(tmp_path / "empty") as empty:
            assert both.digest() == empty.digest()


def test_a_refused_record_changes_nothing_and_the_batch_goes_on(store: Store) -> None:
    with store.batch() as b:
        bad_calls: list[Callable[[], None]] = [
            lambda: b.put_consumption("a\x00b", "k1", "resumed", "a"),
            lambda: b.put_consumption("", "k1", "resumed", "a"),
            lambda: b.put_consumption("t", "k1", "nope", "a"),
            lambda: b.put_pause("a\x00b", "cp", 1, b"v", token_id="k2", expires_at_ms=1),
            lambda: b.put_pause("t", "cp", -1, b"v", token_id="k2", expires_at_ms=1),
            lambda: b.put_pause("t", "cp", 1, b"v", token_id="k2", expires_at_ms=-5),
            lambda: b.set_offset("turnlog.pauses", -1, 3),
            lambda: b.set_offset("turnlog.pauses", 0, -3),
        ]
        for call in bad_calls:
            with pytest.raises(ValueError):
                call()
        b.set_offset("turnlog.pauses", 0, 9)
    with Store.open(store.path.parent / "empty") as empty:
        assert store.digest() == empty.digest()
    assert store.ledger("k1") is None
    assert store.offsets() == {("turnlog.pauses", 0): 9}


def test_thread_ids_with_nul_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="NUL"), store.batch() as b:
        pause(b, "a\x00b", 1)
    with pytest.raises(ValueError, match="NUL"):
        store.latest("a\x00b")


def test_second_read_write_open_is_refused(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db"):
        with pytest.raises(StoreError, match="already open read-write"):
            Store.open(tmp_path / "db")
        code = (
            "import sys\nfrom turnlog.projections.store import Store\nfrom turnlog.errors import "
            "StoreError\ntry:\n    Store.open(sys.argv[1])\nexcept StoreError as e:\n    print(e)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "db")],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert "already open read-write" in result.stdout
    with Store.open(tmp_path / "db"):  # closing released the lock
        pass


def test_close_is_idempotent_and_closed_stores_refuse(tmp_path: Path) -> None:
    opened = Store.open(tmp_path / "db")
    opened.close()
    opened.close()
    assert opened.closed
    with pytest.raises(StoreError, match="closed"):
        opened.latest("t")
    with pytest.raises(StoreError, match="closed"):
        opened.batch()


def test_secondary_reader_follows_the_writer(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db") as writer:
        with writer.batch() as b:
            pause(b, "t", 1)
            b.set_offset("turnlog.pauses", 0, 1)
        with Store.open_secondary(tmp_path / "db", tmp_path / "reader") as reader:
            assert reader.latest("t") == b"t/1"
            with writer.batch() as b:
                pause(b, "t", 2, token="k2", exp=9)
                b.set_offset("turnlog.pauses", 0, 2)
            assert reader.offsets() == {("turnlog.pauses", 0): 1}  # not caught up yet
            assert reader.catch_up() == {("turnlog.pauses", 0): 2}
            assert reader.latest("t") == b"t/2"
            assert reader.pause_for_token("k2") is not None
            assert reader.digest() == writer.digest()
            with pytest.raises(StoreError, match="secondary"):
                reader.batch()


def test_read_only_reader_sees_the_store_as_of_its_open(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db") as writer:
        with writer.batch() as b:
            pause(b, "t", 1)
        with Store.open_read_only(tmp_path / "db") as reader:
            with writer.batch() as b:
                pause(b, "t", 2)
            assert reader.latest("t") == b"t/1"
            assert reader.catch_up() == {}
            with pytest.raises(StoreError, match="read-only"):
                reader.batch()


@pytest.mark.parametrize(
    "open_reader",
    [
        lambda p: Store.open_read_only(p / "missing"),
        lambda p: Store.open_secondary(p / "missing", p / "reader"),
    ],
)
def test_readers_refuse_a_missing_store(
    tmp_path: Path, open_reader: Callable[[Path], Store]
) -> None:
    with pytest.raises(StoreError, match="no store"):
        open_reader(tmp_path)
    assert not (tmp_path / "missing").exists()


def test_drop_and_destroy_make_room_for_a_rebuild(tmp_path: Path) -> None:
    opened = Store.open(tmp_path / "db")
    with opened.batch() as b:
        pause(b, "t", 1)
        b.set_offset("turnlog.pauses", 0, 1)
    opened.drop()
    assert not (tmp_path / "db").exists()
    with Store.open(tmp_path / "db") as rebuilt:
        assert rebuilt.latest("t") is None
        assert rebuilt.offsets() == {}
    Store.destroy(tmp_path / "db")
    Store.destroy(tmp_path / "db")  # nothing there: no error
    assert not (tmp_path / "db").exists()


def test_a_store_ahead_of_the_log_is_refused(store: Store) -> None:
    with store.batch() as b:
        b.set_offset("turnlog.pauses", 0, 10)
        b.set_offset("turnlog.pauses", 1, 3)
    store.verify_offsets({("turnlog.pauses", 0): 10, ("turnlog.pauses", 1): 8})
    with pytest.raises(StoreError, match=r"turnlog\.pauses\[0\] store 10 > log end 4"):
        store.verify_offsets({("turnlog.pauses", 0): 4})


def test_another_layout_version_is_refused(tmp_path: Path) -> None:
    Store.open(tmp_path / "db").close()
    families = {name: rocksdict.Options(raw_mode=True) for name in layout.ALL_FAMILIES}
    raw = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True), families)
    meta = raw.get_column_family(layout.META)
    meta[layout.VERSION_KEY] = b"99"
    meta.close()
    raw.close()
    with pytest.raises(StoreError, match="layout version 99"):
        Store.open(tmp_path / "db")
    with pytest.raises(StoreError, match="layout version 99"):  # so the refusal released the lock
        Store.open(tmp_path / "db")
    with pytest.raises(StoreError, match="layout version 99"):
        Store.open_read_only(tmp_path / "db")
