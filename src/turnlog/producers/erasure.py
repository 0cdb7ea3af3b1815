"""Erasure on time: what makes the broker actually compact a forgotten thread away, and the check
that it did.

A tombstone makes a thread unreachable; its bytes go only when the log cleaner rewrites the
segments that hold them, and the cleaner never touches the *active* segment of a partition --
the one the tombstones were just appended to. Kafka closes the active segment only when a new
record arrives after ``segment.ms``: on a quiet partition nothing arrives, and nothing is ever
erased, whatever ``max.compaction.lag.ms`` says. So erasure within a window ``W`` takes three
things, all done here without anyone else's writes:

- the compacted topics' configs at most ``segment.ms = W/4`` and ``max.compaction.lag.ms =
  W/2`` (and ``min.compaction.lag.ms`` no higher than ``W/4``): lowered, never raised, every
  other topic-level setting kept (the broker's AlterConfigs replaces a topic's whole set);
- after ``segment.ms``, the thread's tombstones written again on its partition: a record that
  arrives late enough rolls the segment, so the first tombstones, and everything they delete,
  now lie in closed segments (a tombstone again is harmless: every reader already forgot);
- the cleaner then compacts the partition once its oldest dirty record is ``W/2`` old, at its
  next pass (``log.cleaner.backoff.ms``, 15 s by default), and unlinks the old files after
  ``file.delete.delay.ms`` (lowered to ``W/8``, at most its default minute): done in about
  ``7W/8`` plus the pass.

:func:`remaining` is the check: it reads the thread's partition of each compacted topic from
its start with ``read_uncommitted`` (so an aborted transaction's copies count too) and counts
the records under the thread's keys that still hold a value. The tombstones themselves -- keys
without values, naming the thread and its checkpoint, answer and token ids -- stay for
``delete.retention.ms`` so that every store sees them, then go at a later cleaning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from aiokafka import TopicPartition
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from turnlog.errors import DecodeError
from turnlog.kafka import clients
from turnlog.kafka.outage import ride_out
from turnlog.kafka.partitioning import partition_for, split_key
from turnlog.kafka.topics import TopicSet, describe
from turnlog.notify import undelivered
from turnlog.producers.forget import present_thread_topics
from turnlog.settings import Settings

#: The shortest window: the cleaner's pass (15 s by default) and a roll must fit in it.
MIN_WINDOW: Final = timedelta(minutes=1)
MAX_WINDOW: Final = timedelta(days=30)
#: ``config_source`` of a setting made on the topic itself (DescribeConfigs v1+).
_TOPIC_SOURCE: Final = 1


@dataclass(frozen=True, slots=True)
class Plan:
    """The topic settings that erase within ``window``."""

    window: timedelta

    @property
    def segment_ms(self) -> int:
        return max(1, int(self.window.total_seconds() * 1000 / 4))

    @property
    def max_lag_ms(self) -> int:
        return max(1, int(self.window.total_seconds() * 1000 / 2))

    @property
    def file_delete_delay_ms(self) -> int:
        """A cleaned segment's old file lingers this long (``.deleted``) before it is unlinked:
        at most a minute (the broker's default), at most an eighth of the window."""
        return max(1, min(60_000, int(self.window.total_seconds() * 1000 / 8)))

    def targets(self) -> dict[str, int]:
        return {
            "segment.ms": self.segment_ms,
            "max.compaction.lag.ms": self.max_lag_ms,
            "min.compaction.lag.ms": self.segment_ms,
            "file.delete.delay.ms": self.file_delete_delay_ms,
        }

    def changes(self, effective: Mapping[str, str]) -> dict[str, str]:
        """The settings to lower: each target above which the topic's effective value lies."""
        lowered: dict[str, str] = {}
        for name, target in self.targets().items():
            try:
                current = int(effective.get(name, ""))
            except ValueError:
                current = target + 1  # unknown: set it
            if current > target:
                lowered[name] = str(target)
        return lowered


async def apply_plan(settings: Settings, topics: TopicSet, plan: Plan) -> dict[str, dict[str, str]]:
    """Lower the compacted topics' settings to ``plan``'s; returns what changed, per topic.

    AlterConfigs (the version aiokafka speaks) replaces every topic-level setting of a topic,
    so each topic's own settings are read first and sent back with the lowered ones."""
    names = await present_thread_topics(settings, topics)
    admin = clients.admin(settings, client_id="turnlog-forget")
    changed: dict[str, dict[str, str]] = {}
    try:
        await admin.start()
        notices = undelivered.topic_name(settings)
        names += list(await describe(admin, [notices]))  # when a notifier ran
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        alter: list[ConfigResource] = []
        for response in await admin.describe_configs(resources):
            for resource in response.to_object()["resources"]:
                entries = resource["config_entries"]
                effective = {e["config_names"]: e["config_value"] for e in entries}
                own = {
                    e["config_names"]: e["config_value"]
                    for e in entries
                    if e.get("config_source") == _TOPIC_SOURCE and e["config_value"] is not None
                }
                lowered = plan.changes(effective)
                if lowered:
                    changed[resource["resource_name"]] = lowered
                    alter.append(
                        ConfigResource(
                            ConfigResourceType.TOPIC,
                            resource["resource_name"],
                            {**own, **lowered},
                        )
                    )
        if alter:
            for response in await admin.alter_configs(alter):
                for item in response.to_object()["resources"]:
                    if item["error_code"]:
                        raise PermissionError(
                            f"{item['resource_name']}: the broker refused the topic settings "
                            f"(error {item['error_code']}: {item['error_message'] or ''})"
                        )
    finally:
        await admin.close()
    return changed


async def remaining(settings: Settings, topics: TopicSet, thread_id: str) -> dict[str, int]:
    """How many records under ``thread_id``'s keys still hold a value, per compacted topic --
    aborted transactions' copies included (``read_uncommitted``) -- and how many of the
    notifier's records hold a notice of the thread (when a notifier ran)."""
    found = await _remaining_compacted(settings, topics, thread_id)
    notices = await undelivered.of_thread(settings, thread_id)
    if notices is not None:
        found[undelivered.topic_name(settings)] = notices.holding
    return found


async def _remaining_compacted(
    settings: Settings, topics: TopicSet, thread_id: str
) -> dict[str, int]:
    names = await present_thread_topics(settings, topics)
    consumer = clients.consumer(
        settings,
        client_id="turnlog-forget-check",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_uncommitted",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
    )
    found = dict.fromkeys(names, 0)
    try:
        await consumer.start()
        await consumer._client.force_metadata_update()
        tps = [
            TopicPartition(
                name, partition_for(thread_id, len(consumer.partitions_for_topic(name) or {0}))
            )
            for name in names
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                return found
            if loop.time() > deadline:
                raise TimeoutError(f"the check did not reach the end of {tps} within 120s")
            batch = await consumer.getmany(*tps, timeout_ms=200)
            for tp, records in batch.items():
                for record in records:
                    if record.value is None or record.key is None:
                        continue
                    try:
                        thread, _ = split_key(record.key)
                    except DecodeError:
                        continue
                    if thread == thread_id:
                        found[tp.topic] += 1
    finally:
        await consumer.stop()


@dataclass(frozen=True, slots=True)
class Erased:
    """What :func:`erase` did and found."""

    #: the settings lowered, per topic
    lowered: dict[str, dict[str, str]]
    #: records of the thread still holding a value, per topic, at the last check
    left: dict[str, int]
    #: seconds from the tombstones to the last check
    seconds: float

    @property
    def done(self) -> bool:
        return not any(self.left.values())


async def erase(
    settings: Settings,
    topics: TopicSet,
    thread_id: str,
    plan: Plan,
    *,
    forget: Callable[[], Awaitable[dict[str, set[bytes]]]],
    again: Callable[[dict[str, set[bytes]]], Awaitable[None]],
) -> Erased:
    """Lower the topics' settings, ``forget`` (tombstones; returns the keys), roll the
    partition once ``segment.ms`` has passed (``again``: a tombstone written again), and check
    until nothing of the thread holds a value or ``plan.window`` has passed."""
    lowered = await ride_out(
        lambda: apply_plan(settings, topics, plan), settings=settings, who="forget"
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    keys = await forget()
    notifier_topic = undelivered.topic_name(settings)
    # A record under one key of each topic rolls the thread's partition; the notifier's topic
    # is partitioned by key, so one under each of the thread's keys there.
    rolls = {t: {min(found)} for t, found in keys.items() if found and t != notifier_topic}
    notices = await ride_out(
        lambda: undelivered.of_thread(settings, thread_id), settings=settings, who="forget"
    )
    if notices is not None and notices.every:
        rolls[notifier_topic] = set(notices.every)
    if rolls:  # a thread of no key: nothing to roll away
        # Kafka rolls on the time a record arrives: this wait is the condition itself.
        await asyncio.sleep(plan.segment_ms / 1000 + 1)
        await again(rolls)
    deadline = began + plan.window.total_seconds()
    while True:
        left = await ride_out(
            lambda: remaining(settings, topics, thread_id), settings=settings, who="forget"
        )
        if not any(left.values()) or loop.time() >= deadline:
            return Erased(lowered, left, loop.time() - began)
        await asyncio.sleep(min(2.0, max(0.0, deadline - loop.time())))
