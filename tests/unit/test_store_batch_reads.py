"""The store's batch reads (one RocksDB multi-get per question) answer what the single reads do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.projections.store import Store
from turnlog.wire.skim import StoredPause


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "db") as opened:
        with opened.batch() as b:
            for i in range(6):
                b.put_pause(
                    f"t{i}", "cp-1", 1, f"pause {i}".encode(), token_id=f"k{i}", expires_at_ms=9
                )
            b.put_consumption("t1", "k1", "resumed", "a1")
            b.put_consumption("t4", "k4", "expired", "")
        yield opened


def _values(found: list[StoredPause | None]) -> list[bytes | None]:
    assert all(p is None or p.hint is None for p in found)  # these pauses were put without one
    return [None if p is None else p.value for p in found]


def test_batch_reads_match_single_reads_in_order(store: Store) -> None:
    ids = ["k3", "nope", "k1", "k4", "k1", "k0"]
    values = _values(store.pause_values(ids))
    assert values == [b"pause 3", None, b"pause 1", b"pause 4", b"pause 1", b"pause 0"]
    for token_id, value in zip(ids, values, strict=True):
        single = store.pause_for_token(token_id)
        assert value == (None if single is None else single.value)
    assert store.ledgers(ids) == [store.ledger(t) for t in ids]
    assert store.ledgers(["k1"])[0] is not None
    assert store.pause_values([]) == [] and store.ledgers([]) == []


def test_a_token_whose_checkpoint_is_gone_reads_as_none(store: Store) -> None:
    with store.batch() as b:
        b.delete_pause("t2", "cp-1")
    assert _values(store.pause_values(["k2", "k3"])) == [None, b"pause 3"]


# The store is only read here, so sharing it between examples is safe.
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.sampled_from(["k0", "k1", "k2", "k4", "x", "", "k1\x00"]), max_size=12))
def test_any_mix_of_ids(store: Store, ids: list[str]) -> None:
    assert store.ledgers(ids) == [store.ledger(t) for t in ids]
    assert _values(store.pause_values(ids)) == [
        None if (p := store.pause_for_token(t)) is None else p.value for t in ids
    ]


def test_consumptions_put_together_are_the_consumptions_put_one_by_one(tmp_path: Path) -> None:
    # Read ahead in one multi-get, the ledger and token entries a consumption reads; the batch's
    # own changes still come first (a token spent twice in one batch, a pause put in the batch).
    claim = ("c1", "host:1", 1700000000000, "claimed")
    spent: list[tuple[str, str, str, str, str, tuple[str, str, int, str] | None]] = [
        ("t1", "k1", "resumed", "a1", "", None),  # already spent in the store: its old row goes
        ("t2", "k2", "held", "a2", '{"approved":true}', None),  # a held answer keeps its response
        ("t2", "k2", "expired", "", "", None),  # the same token again, in the same batch
        ("t9", "k9", "resumed", "a9", "", claim),  # a pause put in this very batch, claimed
        ("t7", "nope", "resumed", "a7", "", None),  # no pause anywhere
    ]
    digests = []
    for together in (False, True):
        with Store.open(tmp_path / f"db-{together}") as store:
            with store.batch() as b:
                for i in range(6):
                    b.put_pause(f"t{i}", "cp-1", 1, b"p", token_id=f"k{i}", expires_at_ms=9 + i)
                b.put_consumption("t1", "k1", "resumed", "a0")
            with store.batch() as b:
                b.put_pause("t9", "cp-1", 1, b"p", token_id="k9", expires_at_ms=99)
                if together:
                    b.put_consumptions(spent)
                else:
                    for entry in spent:
                        b.put_consumption(*entry)
            digests.append(store.digest())
            assert store.ledger("k2") is not None and store.ledger("k9") is not None
            claimed = store.ledger("k9")
            assert claimed is not None and claimed.claim_id == "c1"
            assert (claimed.claimant, claimed.claimed_at_ms, claimed.claim_state) == claim[1:]
    assert digests[0] == digests[1]
