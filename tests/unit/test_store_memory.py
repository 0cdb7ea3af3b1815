"""A store's memtables share one budget, whatever it holds and however many families fill.

RocksDB's default is 64 MiB of memtable per column family (twice over while one flushes), so a
worker restoring a million pauses held hundreds of MB of them across its nine families, and its
peak RSS grew with what was pending (bench/README.md, the scale table). One write buffer budget
for the whole store makes RocksDB flush whichever family fills it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from turnlog.projections import layout
from turnlog.projections.store import MEMTABLE_BUDGET, Store

#: Families written to, each with less than RocksDB's per-family default (64 MiB) but together
#: half as much again as the store's budget: without the budget nothing would ever flush.
FAMILIES = (layout.PAUSES, layout.CHECKPOINTS, layout.DEADLINES, layout.WAITING)
PER_FAMILY = MEMTABLE_BUDGET * 3 // (2 * len(FAMILIES))


def _memtables(store: Store) -> int:
    return sum(
        store._cf[name].property_int_value("rocksdb.cur-size-all-mem-tables") or 0
        for name in layout.ALL_FAMILIES
    )


def test_the_memtables_of_every_family_share_one_budget(tmp_path: Path) -> None:
    value = os.urandom(4096)
    with Store.open(tmp_path / "store") as store:
        for name in FAMILIES:
            family = store._cf[name]
            for i in range(PER_FAMILY // len(value)):
                family[name.encode() + i.to_bytes(8, "big")] = value
        # Flushes run in RocksDB's background threads: give them the time they take.
        deadline = time.monotonic() + 30
        while _memtables(store) > MEMTABLE_BUDGET and time.monotonic() < deadline:
            time.sleep(0.05)
        held = _memtables(store)
        written = PER_FAMILY * len(FAMILIES)
        assert held <= MEMTABLE_BUDGET, (held, written)
        # Nothing was lost on the way: every family still reads back what it was given.
        for name in FAMILIES:
            assert store._cf[name][name.encode() + (0).to_bytes(8, "big")] == value
