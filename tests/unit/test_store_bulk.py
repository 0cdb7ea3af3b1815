"""A rebuild's bulk store: the same store as a live one, and a consistent one after a crash.

A bulk store skips RocksDB's write-ahead log. What makes that safe is that each batch holds its
data and its offsets, and that the column families are flushed together: a load interrupted at
any moment leaves the state as of one whole batch. The index values it writes are formatted by
hand for speed and must be the very bytes of the general encoder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_store import OPS, apply
from turnlog.projections import layout
from turnlog.projections.store import Store

texts = st.text()  # every code point but surrogates: quotes, controls, non-ASCII
numbers = st.integers(min_value=0, max_value=2**64 - 1)


@given(numbers, st.none() | texts, st.none() | numbers)
def test_a_locator_is_the_general_encoders_bytes(
    order: int, token_id: str | None, expires_at: int | None
) -> None:
    expected = layout.dump({"order": order, "token_id": token_id, "expires_at": expires_at})
    assert layout.dump_locator(order, token_id, expires_at) == expected


@given(texts, numbers)
def test_an_unfinalized_entry_is_the_general_encoders_bytes(thread_id: str, at: int) -> None:
    expected = layout.dump({"thread_id": thread_id, "paused_at": at})
    assert layout.dump_unfinalized(thread_id, at) == expected


@given(texts, texts, numbers, texts, numbers)
def test_a_token_entry_is_the_general_encoders_bytes(
    thread_id: str, checkpoint_id: str, order: int, token_id: str, expires_at: int
) -> None:
    expected = layout.dump(
        {
            "thread_id": thread_id,
            "checkpoint_id": checkpoint_id,
            "order": order,
            "token_id": token_id,
            "expires_at": expires_at,
        }
    )
    assert layout.dump_token(thread_id, checkpoint_id, order, token_id, expires_at) == expected


@given(
    texts,
    texts,
    numbers,
    texts,
    numbers,
    st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=30),
)
def test_a_token_entry_with_a_hint_reads_as_the_entry_and_gives_the_hint_back(
    thread_id: str,
    checkpoint_id: str,
    sequence: int,
    token_id: str,
    expires_at: int,
    hint: list[int],
) -> None:
    plain = layout.dump_token(thread_id, checkpoint_id, sequence, token_id, expires_at)
    hinted = layout.dump_token(thread_id, checkpoint_id, sequence, token_id, expires_at, hint)
    # The entry's first line is the entry without a hint; readers of the entry see no change.
    assert hinted.partition(b"\n")[0] == plain and layout.load(hinted) == layout.load(plain)
    assert layout.token_hint(hinted) == tuple(hint)
    assert layout.token_hint(plain) is None
    assert layout.token_hint(plain + b"\nnot,numbers") is None
    assert layout.token_hint(plain + b"\nabc") is None  # not whole 32-bit numbers
    # A number outside 32 bits leaves no hint rather than a wrong one.
    outside = layout.dump_token(thread_id, checkpoint_id, sequence, token_id, expires_at, [2**32])
    assert outside == plain


@given(st.sampled_from(["resumed", "expired"]) | texts, texts, texts)
def test_a_ledger_entry_is_the_general_encoders_bytes(
    outcome: str, answer_id: str, thread_id: str
) -> None:
    expected = layout.dump({"outcome": outcome, "answer_id": answer_id, "thread_id": thread_id})
    assert layout.dump_ledger(outcome, answer_id, thread_id) == expected


def test_a_bulk_load_is_the_same_store_once_closed(tmp_path: Path) -> None:
    with Store.open(tmp_path / "bulk", bulk=True) as bulk:
        apply(bulk, OPS, [2, 3, 1])
        digest, offsets = bulk.digest(), bulk.offsets()
    with Store.open(tmp_path / "live") as live:
        apply(live, OPS, [2, 3, 1])
        assert (live.digest(), live.offsets()) == (digest, offsets)
    with Store.open(tmp_path / "bulk") as reopened:  # without the log: closing flushed it
        assert (reopened.digest(), reopened.offsets()) == (digest, offsets)


_CRASHING_LOAD = """
import os, sys
from turnlog.projections.store import Store

store = Store.open(sys.argv[1], bulk=True)
# Enough data for RocksDB to flush its memtables on its own several times.
for n in range(1, 121):
    with store.batch() as batch:
        for i in range(100):
            batch.put_pause(
                f"t{n}-{i}", "cp", n, os.urandom(10_000), token_id=f"k{n}-{i}", expires_at_ms=n
            )
        batch.set_offset("pauses", 0, n)
os._exit(0)  # killed: no close, so no final flush
"""


def test_an_interrupted_bulk_load_leaves_whole_batches_and_their_offsets(tmp_path: Path) -> None:
    path = tmp_path / "store"
    subprocess.run([sys.executable, "-c", _CRASHING_LOAD, str(path)], check=True, timeout=300)
    with Store.open(path) as store:
        last = store.offset("pauses", 0)
        assert last is not None, "no flush happened: the test wrote too little to say anything"
        assert last < 120
        for n in range(1, 121):
            for i in (0, 99):  # a batch's first and last pause, with its token index
                here = store.latest(f"t{n}-{i}") is not None
                indexed = store.pause_for_token(f"k{n}-{i}") is not None
                assert here == indexed == (n <= last), (n, i, last)
