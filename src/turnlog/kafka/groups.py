"""Where a consumer group stands on a topic: committed offset, end and lag per partition, and
which member owns which partitions -- what ``turnlog status`` shows an operator.

The end is the last stable offset (what a ``read_committed`` reader can reach), so answers still
inside an open transaction do not count as lag. A partition the group never committed on lags
by everything from its earliest offset (the worker starts there).

Decoding a member's assignment uses aiokafka's ``ConsumerProtocolMemberAssignment`` (its
module is not underscored, but the admin client returns the raw bytes and documents no
decoder); ``tests/integration/test_status.py`` reads a live group with it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import UnknownTopicOrPartitionError

from turnlog.kafka import clients
from turnlog.kafka.internals import refresh_metadata


@dataclass(frozen=True, slots=True)
class PartitionLag:
    partition: int
    committed: int | None
    end: int
    lag: int


@dataclass(frozen=True, slots=True)
class Member:
    client_id: str
    host: str
    instance_id: str | None
    partitions: list[int]


@dataclass(frozen=True, slots=True)
class GroupStatus:
    group: str
    topic: str
    state: str
    partitions: list[PartitionLag] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


async def group_status(
    bootstrap_servers: clients.Target, group: str, topic: str, *, timeout: float = 30.0
) -> GroupStatus:
    """``group``'s position on every partition of ``topic``, and its members' assignments."""
    return await asyncio.wait_for(_status(bootstrap_servers, group, topic), timeout)


async def _status(bootstrap_servers: clients.Target, group: str, topic: str) -> GroupStatus:
    consumer = clients.consumer(
        bootstrap_servers,
        isolation_level="read_committed",
        enable_auto_commit=False,
        client_id="turnlog-status",
    )
    admin = clients.admin(bootstrap_servers, client_id="turnlog-status")
    try:
        # Each start inside its try: a start that fails (the broker is away, retried by the
        # caller) must still close its client, or every retry leaves one behind.
        await consumer.start()
        try:
            await admin.start()
            parts = await _partitions(consumer, topic)
            tps = [TopicPartition(topic, p) for p in parts]
            ends = await consumer.end_offsets(tps)
            starts = await consumer.beginning_offsets(tps)
            offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
            described = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
    finally:
        await consumer.stop()
    lags = []
    for tp in tps:
        meta = offsets.get(tp)
        committed = meta.offset if meta is not None and meta.offset >= 0 else None
        base = committed if committed is not None else starts[tp]
        lags.append(PartitionLag(tp.partition, committed, ends[tp], max(0, ends[tp] - base)))
    state, members = _members(described, group, topic)
    return GroupStatus(group, topic, state, lags, members)


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    while True:  # bounded by the caller's timeout
        found = consumer.partitions_for_topic(topic)
        if found:
            return sorted(found)
        if not await refresh_metadata(consumer):
            await asyncio.sleep(0.2)
        elif consumer.partitions_for_topic(topic) is None:
            raise UnknownTopicOrPartitionError(f"no topic {topic}")


def _members(described: list[Any], group: str, topic: str) -> tuple[str, list[Member]]:
    """The group's state and members from raw DescribeGroups responses (any version)."""
    for response in described:
        for entry in response.to_object()["groups"]:
            if entry["group"] != group:
                continue
            members = []
            for m in entry["members"]:
                raw = m.get("member_assignment") or b""
                owned: list[int] = []
                if raw:
                    assignment = ConsumerProtocolMemberAssignment.decode(raw)
                    owned = sorted(
                        tp.partition for tp in assignment.partitions() if tp.topic == topic
                    )
                members.append(
                    Member(m["client_id"], m["client_host"], m.get("group_instance_id"), owned)
                )
            return str(entry.get("state") or "Empty"), sorted(members, key=lambda x: x.partitions)
    return "Dead", []
