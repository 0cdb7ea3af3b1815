"""A catch-up from the log says what it reads (issue 41), on the real broker: the CLI's
``caught_up`` -- what ``pending``, ``status`` and ``show`` run first on a store of their own --
tells its reader how many records it must apply before it applies them, and what it applied.
(The threshold is lowered here; ``tests/unit/test_catch_up_report.py`` holds the report.)"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Names
from tests.integration.chaos_support import record_pauses
from tests.integration.worker_support import keyed_deployment
from turnlog.cli.common import caught_up
from turnlog.projections.store import Store


async def test_a_catch_up_says_how_many_records_it_reads_and_what_it_applied(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path, partitions=3)
    await record_pauses(dep, 12, "said", writers=3)
    said: list[str] = []
    with Store.open(tmp_path / "fresh") as store:
        applied = await caught_up(store, dep.settings, say=said.append, threshold=1)
        again = await caught_up(store, dep.settings, say=said.append, threshold=1)
    assert applied == 12 and again == 0
    first, *_, last = said
    assert str(tmp_path / "fresh") in first and "offsets of the pauses and consumptions" in first
    assert last.startswith("caught up: 12 records applied in ")
    assert len(said) == 2  # the second catch-up had nothing to read, and said nothing
