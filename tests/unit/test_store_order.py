"""The store's layout 4: a thread's checkpoints in the log's order, the unfinalized index, and
stores of earlier layouts emptied to be refilled from the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import rocksdict

from turnlog.errors import StoreError
from turnlog.projections import layout
from turnlog.projections.batch import Batch
from turnlog.projections.store import Store, UnfinalizedPause


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "db") as opened:
        yield opened


def put(b: Batch, checkpoint: str, offset: int, token: str, *, unfinalized: bool = False) -> None:
    b.put_pause(
        "t", checkpoint, offset, f"{checkpoint}@{offset}".encode(), token_id=token,
        expires_at_ms=5_000, unfinalized=unfinalized,
    )  # fmt: skip


def test_a_thread_s_checkpoints_are_in_the_order_of_their_offsets(store: Store) -> None:
    """Ids that sort the other way (cp-9 < cp-10 < cp-11 as written, not as text) and the
    caller's sequence play no part: the order is the offset each was written at."""
    with store.batch() as b:
        put(b, "cp-9", 7, "k9")
        put(b, "cp-10", 8, "k10")
        put(b, "cp-11", 12, "k11")
    assert store.list_checkpoints("t") == [b"cp-9@7", b"cp-10@8", b"cp-11@12"]
    assert store.latest("t") == b"cp-11@12"
    with store.batch() as b:  # the same pause again (its finalization): its place is kept
        put(b, "cp-9", 20, "k9")
    assert store.list_checkpoints("t") == [b"cp-9@20", b"cp-10@8", b"cp-11@12"]
    with store.batch() as b:  # a new pause of cp-10 (another token) is written last
        put(b, "cp-10", 21, "k10b")
    assert store.list_checkpoints("t") == [b"cp-9@20", b"cp-11@12", b"cp-10@21"]
    assert store.latest("t") == b"cp-10@21"
    info = store.pause_for_token("k10b")
    assert info is not None and info.order == 21


def test_an_unfinalized_pause_is_indexed_until_a_finalized_write_or_a_tombstone(
    store: Store,
) -> None:
    with store.batch() as b:
        put(b, "cp-1", 1, "k1", unfinalized=True)
        put(b, "cp-2", 2, "k2", unfinalized=True)
        put(b, "cp-3", 3, "k3")
    # b"cp-1@1" is not a pause record: its facts are empty, paused at 0
    assert store.unfinalized() == [
        UnfinalizedPause("k1", "t", 0, 5_000, False),
        UnfinalizedPause("k2", "t", 0, 5_000, False),
    ]
    with store.batch() as b:
        put(b, "cp-1", 4, "k1")  # finalized
        b.put_consumption("t", "k2", "expired", "")
    assert store.unfinalized() == [UnfinalizedPause("k2", "t", 0, 5_000, True)]
    assert store.unfinalized(written_by_ms=-1) == []
    with store.batch() as b:
        b.delete_pause("t", "cp-2")
    assert store.unfinalized() == []


#: The families each earlier layout lacked (layout 2 added the spent index, 3 the waiting
#: index, 4 the unfinalized one).
_LACKED = {1: (layout.SPENT, layout.WAITING, layout.UNFINALIZED), 2: (layout.WAITING,
           layout.UNFINALIZED), 3: (layout.UNFINALIZED,)}  # fmt: skip


@pytest.mark.parametrize("version", sorted(_LACKED))
def test_a_store_of_an_earlier_layout_is_emptied_for_the_log_to_fill_again(
    tmp_path: Path, version: int
) -> None:
    """Layouts 1-3 ordered checkpoints by the caller's sequence and kept no offset per pause:
    nothing in them can be re-keyed, so a read-write open empties the store, offsets included,
    and the next catch-up reads the log from its start (the layout 1 and 2 stores were
    migrated in place before; a migration cannot invent the offsets). A reader cannot write:
    it is told."""
    path = tmp_path / "db"
    with Store.open(path) as store:
        with store.batch() as b:
            put(b, "cp-1", 1, "k1")
            b.put_consumption("t", "k1", "resumed", "a1")
            b.set_offset("turnlog.pauses", 0, 2)
        empty_digest = None
    with Store.open(tmp_path / "empty") as empty:
        empty_digest = empty.digest()
    families = {n: rocksdict.Options(raw_mode=True) for n in layout.ALL_FAMILIES}
    raw = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True), column_families=families)
    for family in _LACKED[version]:
        raw.drop_column_family(family)
    meta = raw.get_column_family(layout.META)
    meta[layout.VERSION_KEY] = str(version).encode()
    meta.close()
    raw.close()

    with pytest.raises(StoreError, match=f"layout version {version}"):
        Store.open_read_only(path)
    with Store.open(path) as store:
        assert store.offsets() == {}
        assert store.latest("t") is None and store.ledger("k1") is None
        assert store.digest() == empty_digest
    with Store.open_read_only(path) as reader:  # layout 4 now
        assert reader.offsets() == {}
