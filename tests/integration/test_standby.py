"""Standby copies (``turnlog worker --standby N``): a worker keeps warm, read-only copies of the
partitions another worker owns, and when that owner is SIGKILLed it is ready from its copy --
its restore reads a handful of records, not the partitions -- and the exactly-once guarantee
holds across the takeover: an answer the dead owner consumed is refused, not resumed again."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path

from aiokafka import TopicPartition

from tests.conftest import Names
from tests.deployment import ANSWER, axes
from tests.integration.chaos_support import record_pauses
from tests.integration.worker_proc import Proc, common_options, spawn
from tests.integration.worker_support import committed_events, keyed_deployment, of_type
from tests.kafka_helpers import eventually, wait_until_consumed
from turnlog.contracts.events import AnswerRejected, TokenConsumed, TurnResumed
from turnlog.kafka import clients
from turnlog.kafka.partitioning import partition_for
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import RecordedPause

PARTITIONS = 4
_OWNING = re.compile(r"(owning|released) answers partition (\d+)")
_CURRENT = re.compile(r"standby copies of answers partitions \[([\d, ]*)\] are current: (\{.*\})")


def _owned(proc: Proc) -> set[int]:
    owned: set[int] = set()
    for change, p in _OWNING.findall(proc.text()):
        (owned.add if change == "owning" else owned.discard)(int(p))
    return owned


def _current_at(proc: Proc) -> dict[str, int]:
    """The offsets of the worker's last 'standby copies ... are current' line."""
    found = _CURRENT.findall(proc.text())
    return json.loads(found[-1][1]) if found else {}


async def _ends(bootstrap: str, tps: list[TopicPartition]) -> dict[str, int]:
    consumer = clients.consumer(bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {f"{tp.topic}[{tp.partition}]": n for tp, n in ends.items()}


async def _answer(publisher: AnswerPublisher, pauses: list[RecordedPause], tag: str) -> None:
    await asyncio.gather(
        *(
            publisher.publish(
                p.token, ANSWER, **axes(p.pause.checkpoint), answer_id=f"{tag}-{p.token_id}"
            )
            for p in pauses
        )
    )


async def test_a_standby_takes_over_a_killed_owner_from_its_warm_copy(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, keys = keyed_deployment(
        bootstrap, names.prefix, names.app, tmp_path, partitions=PARTITIONS
    )
    topics = dep.topics
    pauses = await record_pauses(dep, 400, "standby")
    first, rest = pauses[::2], pauses[1::2]
    options = common_options(
        bootstrap, dep.settings.topic_prefix, dep.settings.application_id, keys, PARTITIONS
    )

    def start(name: str) -> Proc:
        return spawn(
            "worker",
            tmp_path / f"{name}.log",
            *options,
            *("--standby", "1", "--session-timeout-ms", "6000", "--expiry-interval", "0.5"),
            *("--state", str(tmp_path / name), "--stats", str(tmp_path / f"{name}.json")),
        )

    a, b = start("a"), start("b")
    try:

        async def split() -> bool:
            owned_a, owned_b = _owned(a), _owned(b)
            return bool(owned_a and owned_b) and sorted(owned_a | owned_b) == list(
                range(PARTITIONS)
            ) and not owned_a & owned_b  # fmt: skip

        await eventually(split, timeout=90, interval=0.2)
        victim = sorted(_owned(a))
        async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
            await _answer(publisher, first, "first")
            await wait_until_consumed(bootstrap, names.app, topics.answers, timeout=120)
            # b's copies of a's partitions hold every pause and every consumption a wrote.
            warm = [
                TopicPartition(t, p) for p in victim for t in (topics.pauses, topics.consumptions)
            ]
            ends = await _ends(bootstrap, warm)

            async def b_is_current() -> bool:
                at = _current_at(b)
                return all(at.get(name, -1) >= end for name, end in ends.items())

            await eventually(b_is_current, timeout=60, interval=0.1)
            # Offsets on a's partitions' pauses and consumptions (records and commit markers).
            held = sum(ends.values())
            a.kill()
            killed = time.monotonic()

            async def b_owns_all() -> bool:
                return sorted(_owned(b)) == list(range(PARTITIONS))

            await eventually(b_owns_all, timeout=60, interval=0.05)
            ready_after = time.monotonic() - killed
            # The replays of a's consumed answers (new answer ids) and the rest, answered once.
            await _answer(publisher, first, "again")
            await _answer(publisher, rest, "rest")
            await wait_until_consumed(bootstrap, names.app, topics.answers, timeout=120)
        assert await b.terminate() == 0, b.tail()
    finally:
        for proc in (a, b):
            if proc.alive():
                proc.kill()

    stats = json.loads((tmp_path / "b.json").read_text())
    # The take of a's partitions (with b's own, taken again: the eager protocol revokes all).
    take = {int(p): n for p, n in stats["takes"][-1]["records"].items()}
    restored = sum(take[p] for p in victim)
    print(
        f"\nstandby takeover: {restored} records restored of {held} offsets on the partitions, "
        f"owned {ready_after:.1f}s after the SIGKILL (session timeout 6 s); "
        f"{stats['standby_records']} records applied to standby copies"
    )
    assert sorted(take) == list(range(PARTITIONS))
    # From its copy: at most a few records written after b's copy was current (a's aborted
    # transaction leaves none that read_committed returns).
    assert held > 300
    assert restored <= held // 20, (restored, held, b.tail())
    assert stats["takes"][-1]["warm"] == victim  # taken from the copies b kept

    consumed = of_type(await committed_events(bootstrap, topics.consumptions), TokenConsumed)
    resumed = of_type(await committed_events(bootstrap, topics.resumed), TurnResumed)
    rejected = of_type(await committed_events(bootstrap, topics.rejections), AnswerRejected)
    assert {t: n for t, n in Counter(c.token_id for c in consumed).items() if n != 1} == {}
    assert Counter(t.token_id for t in resumed) == Counter(p.token_id for p in pauses)
    expected = {p.token_id: f"first-{p.token_id}" for p in first}
    expected.update({p.token_id: f"rest-{p.token_id}" for p in rest})
    assert {c.token_id: c.answer_id for c in consumed} == expected
    # Every replay refused as spent -- those of a's partitions by b, from its standby's ledger.
    assert Counter(r.reason for r in rejected) == Counter({"already_consumed": len(first)})
    on_victim = [
        p for p in first if partition_for(p.pause.checkpoint.thread_id, PARTITIONS) in victim
    ]
    assert on_victim


async def test_a_worker_that_places_partitions_another_way_than_its_group_is_refused_by_name(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """A worker offers one group protocol: the standby placement with ``--standby``, round-robin
    without (aiokafka joins once per protocol offered, see ``consumers/worker.py``). A worker
    joining a group of the other kind is refused at its join with a line that says what to
    change; the group goes on without it, and every answer resumes once."""
    dep, keys = keyed_deployment(
        bootstrap, names.prefix, names.app, tmp_path, partitions=PARTITIONS
    )
    pauses = await record_pauses(dep, 40, "mixed")
    options = common_options(
        bootstrap, dep.settings.topic_prefix, dep.settings.application_id, keys, PARTITIONS
    )

    def start(name: str, *extra: str) -> Proc:
        return spawn(
            "worker",
            tmp_path / f"{name}.log",
            *options,
            *extra,
            *("--session-timeout-ms", "6000", "--state", str(tmp_path / name)),
        )

    keeper = start("keeper", "--standby", "1")
    plain: Proc | None = None
    try:

        async def keeper_owns_all() -> bool:
            return sorted(_owned(keeper)) == list(range(PARTITIONS))

        await eventually(keeper_owns_all, timeout=90, interval=0.2)
        plain = start("plain")
        assert await plain.wait(timeout=90) != 0, plain.tail()
        async with AnswerPublisher(dep.settings, dep.verifier) as publisher:
            await _answer(publisher, pauses, "mixed")
        await wait_until_consumed(bootstrap, names.app, dep.topics.answers, timeout=120)
        assert sorted(_owned(keeper)) == list(range(PARTITIONS))
        assert await keeper.terminate() == 0, keeper.tail()
    finally:
        for proc in (keeper, plain):
            if proc is not None and proc.alive():
                proc.kill()

    said = plain.text()
    assert (
        f"the worker group {names.app} places its partitions another way than this worker: the "
        "group's workers keep standby copies (--standby) and this worker does not"
    ) in said, said
    assert _owned(plain) == set()
    resumed = of_type(await committed_events(bootstrap, dep.topics.resumed), TurnResumed)
    assert Counter(t.token_id for t in resumed) == Counter(p.token_id for p in pauses)
