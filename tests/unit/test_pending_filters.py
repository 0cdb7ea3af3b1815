"""A selective filter's first page holds the match (issue 41): ``turnlog pending --session X``
returned an empty page and a "next" cursor while a pause of that session waited, because a
page stopped after reading a fixed number of index entries whatever it had found. The filter
is applied before paging: a page ends full, or at the index's end."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.unit.test_waiting_index import T0, T0_MS, pause_bytes
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.projections.store import MAX_SCAN, Store

#: More pauses of other sessions wait before the one sought than a page once read.
BEFORE = MAX_SCAN + 500


def _fill(store: Store) -> None:
    """``BEFORE`` pauses of session-a (one record's bytes, each its own token and deadline),
    then one of session-b3 (and run-b3), due later than all of them."""
    filler = pause_bytes("a", "unused")
    with store.batch() as b:
        for i in range(BEFORE):
            exp = T0_MS + 60_000 + i
            b.put_pause(f"a{i}", "cp-1", i, filler, token_id=f"k{i:06}", expires_at_ms=exp)
        late = T0 + timedelta(days=2)
        value = pause_bytes("b3", "k-b3", expires=late)  # session-b3, run-b3
        b.put_pause("b3", "cp-1", BEFORE, value, token_id="k-b3",
                    expires_at_ms=int(late.timestamp() * 1000))  # fmt: skip
        # One asking for an approval, in the fillers' scope.
        asks = pause_bytes("d", "k-d", interaction=APPROVE_TOOL_CALL, expires=late)
        b.put_pause("d", "cp-1", BEFORE + 2, asks, token_id="k-d",
                    expires_at_ms=int(late.timestamp() * 1000) + 2)  # fmt: skip
        # And one made three days ago, the only pause older than a day.
        old = pause_bytes("c", "k-c", paused=T0 - timedelta(days=3), expires=late)
        b.put_pause("c", "cp-1", BEFORE + 1, old, token_id="k-c",
                    expires_at_ms=int(late.timestamp() * 1000) + 1)  # fmt: skip


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("pending-filters") / "db"
    with Store.open(path) as store:
        _fill(store)
    yield path


@pytest.mark.parametrize(
    ("wanted", "found"),
    [
        ({"session": "session-b3"}, "k-b3"),
        ({"run": "run-b3"}, "k-b3"),
        ({"session": "session-b3", "call": "call-1"}, "k-b3"),
        ({"older_than_ms": 24 * 3600 * 1000}, "k-c"),
        ({"scope": "tenant-a", "interaction": APPROVE_TOOL_CALL}, "k-d"),
    ],
)
def test_a_selective_filters_first_page_holds_the_match(
    filled: Path, wanted: dict[str, object], found: str
) -> None:
    with Store.open(filled) as store:
        page = store.pending_page(T0_MS, limit=50, **wanted)  # type: ignore[arg-type]
    assert [p.token_id for p in page.items] == [found]
    assert page.next is None  # nothing else matches: no page to go on to


def test_a_filter_matching_nothing_says_so_on_its_first_page(filled: Path) -> None:
    with Store.open(filled) as store:
        page = store.pending_page(T0_MS, session="session-none")
    assert page.items == [] and page.next is None
