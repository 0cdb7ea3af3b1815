"""The topic set of a deployment, and making sure the broker has it.

Five topics share one partition count, because every fact of a thread must land on the same
partition number everywhere: the owner of answers partition p restores pauses[p] and
consumptions[p] and nothing else. A topic that exists with another partition count, or a
compacted topic that is not compacted, breaks that silently -- so it is refused by name and
never "fixed" (altering a live topic's partitions would re-home its threads).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from turnlog.errors import BrokerUnavailable, TopicMismatch
from turnlog.kafka import clients
from turnlog.kafka.outage import BrokerSettings, attempt_timeout, ride_out

# Kafka protocol error codes the readiness check reacts to.
_UNKNOWN_TOPIC = 3
_TOPIC_ALREADY_EXISTS = 36

WEEK_MS = 7 * 24 * 3600 * 1000
DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000


class TopicSettings(Protocol):
    """What a topic set is made from (``Settings`` is one); a protocol, so that the Kafka room
    never imports the settings, which import the Kafka room's security value."""

    @property
    def topic_prefix(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def replication_factor(self) -> int: ...
    @property
    def min_insync_replicas(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    role: str
    compacted: bool
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def cleanup_policy(self) -> str:
        return "compact" if self.compacted else "delete"

    def all_configs(self) -> dict[str, str]:
        return {"cleanup.policy": self.cleanup_policy, **self.configs}


@dataclass(frozen=True, slots=True)
class TopicSet:
    """The names and shapes of one deployment's topics."""

    prefix: str
    partitions: int
    replication_factor: int = 1
    #: ``min.insync.replicas`` of every topic; 0 leaves the broker's default.
    min_insync_replicas: int = 0
    retention_ms: int = WEEK_MS
    compacted_configs: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: TopicSettings) -> TopicSet:
        return cls(
            prefix=settings.topic_prefix,
            partitions=settings.partitions,
            replication_factor=settings.replication_factor,
            min_insync_replicas=settings.min_insync_replicas,
        )

    @property
    def pauses(self) -> str:
        return f"{self.prefix}pauses"

    @property
    def answers(self) -> str:
        return f"{self.prefix}answers"

    @property
    def consumptions(self) -> str:
        return f"{self.prefix}consumptions"

    @property
    def resumed(self) -> str:
        return f"{self.prefix}resumed"

    @property
    def rejections(self) -> str:
        return f"{self.prefix}rejections"

    @property
    def keys(self) -> str:
        """The content keys of sealed resumed turns (``TURNLOG_SEAL``): made by a sealing
        worker, not one of :meth:`specs` (a deployment that never seals has none)."""
        return f"{self.prefix}keys"

    def keys_spec(self) -> TopicSpec:
        """Compacted, so ``forget``'s tombstones remove a key; and deleted past the resumed
        turns' retention and a day, when the turns a key opens are gone too. Short segments,
        and compaction at most a day behind, so a tombstoned key's bytes go within a day even
        without ``forget --erase-within`` on a partition that is written to."""
        common = (
            {"min.insync.replicas": str(self.min_insync_replicas)}
            if self.min_insync_replicas
            else {}
        )
        return TopicSpec(
            self.keys,
            "keys",
            True,
            {
                **common,
                "cleanup.policy": "compact,delete",
                "retention.ms": str(self.retention_ms + DAY_MS),
                "segment.ms": str(HOUR_MS),
                "max.compaction.lag.ms": str(DAY_MS),
            },
        )

    def deployed(self, *, seal: bool) -> tuple[TopicSpec, ...]:
        """The topics a deployment runs on: :meth:`specs`, and the keys topic when its workers
        seal (``TURNLOG_SEAL``)."""
        return (*self.specs(), *((self.keys_spec(),) if seal else ()))

    def specs(self) -> tuple[TopicSpec, ...]:
        isr = {"min.insync.replicas": str(self.min_insync_replicas)}
        common = isr if self.min_insync_replicas else {}
        compact = {**common, **self.compacted_configs}
        timed = {**common, "retention.ms": str(self.retention_ms)}
        return (
            TopicSpec(self.pauses, "pauses", True, compact),
            TopicSpec(self.answers, "answers", True, compact),
            TopicSpec(self.consumptions, "consumptions", True, compact),
            TopicSpec(self.resumed, "resumed", False, timed),
            TopicSpec(self.rejections, "rejections", False, timed),
        )


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    partitions: int
    configs: dict[str, str]
    #: The fewest replicas, and the fewest in-sync replicas, of any of its partitions.
    replication: int = 0
    in_sync: int = 0


async def _layout(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, TopicState]:
    """Partition counts and replication of the named topics that exist (no configs: this
    takes only Describe on the topics, which every role has)."""
    states: dict[str, TopicState] = {}
    for topic in await admin.describe_topics(names):
        if topic["error_code"] == 0:
            parts = topic["partitions"] or [{"replicas": [], "isr": []}]
            states[topic["topic"]] = TopicState(
                topic["topic"],
                len(topic["partitions"]),
                {},
                min(len(p["replicas"]) for p in parts),
                min(len(p["isr"]) for p in parts),
            )
    return states


async def describe(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, TopicState]:
    """Partition counts and configs of the named topics that exist."""
    layout = await _layout(admin, names)
    found = {name: state.partitions for name, state in layout.items()}
    replicas = {name: (state.replication, state.in_sync) for name, state in layout.items()}
    if not found:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in found]
    configs: dict[str, dict[str, str]] = {name: {} for name in found}
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            entries = resource["config_entries"]
            configs[resource["resource_name"]] = {
                e["config_names"]: e["config_value"] for e in entries
            }
    return {name: TopicState(name, found[name], configs[name], *replicas[name]) for name in found}


def check(spec: TopicSpec, state: TopicState, partitions: int, replication: int = 1) -> None:
    """Refuse, by name, an existing topic that would break the design's guarantees."""
    policy = state.configs.get("cleanup.policy", "")
    policies = {p.strip() for p in policy.split(",") if p.strip()}
    if spec.compacted and "compact" not in policies:
        raise TopicMismatch(
            "cleanup_policy_mismatch",
            f"{spec.name} must be compacted (one record per fact) "
            f"but has cleanup.policy={policy!r}",
        )
    if not spec.compacted and "compact" in policies:
        raise TopicMismatch(
            "cleanup_policy_mismatch",
            f"{spec.name} is a work stream with time retention but has cleanup.policy={policy!r}",
        )
    if state.partitions != partitions:
        raise TopicMismatch(
            "partition_count_mismatch",
            f"{spec.name} has {state.partitions} partitions and the topic set has {partitions}; "
            "co-partitioning by thread would send a thread's facts to different owners",
        )
    if state.replication and state.replication < replication:
        raise TopicMismatch(
            "replication_factor_mismatch",
            f"{spec.name} has replication factor {state.replication} and the settings ask for "
            f"{replication} (TURNLOG_REPLICATION_FACTOR)",
        )


async def verify_present(admin: AIOKafkaAdminClient, spec: TopicSpec, partitions: int) -> None:
    """Refuse, by name, ``spec``'s topic missing or with another partition count -- with
    ``DESCRIBE`` on it alone (no config read): what a process that makes no topics checks."""
    state = (await _layout(admin, [spec.name])).get(spec.name)
    if state is None:
        raise TopicMismatch(
            "topic_missing",
            f"{spec.name} missing, and this process does not create topics "
            "(TURNLOG_CREATE_TOPICS=false): an operator applies `turnlog topics plan`",
        )
    if state.partitions != partitions:
        raise TopicMismatch(
            "partition_count_mismatch",
            f"{spec.name} has {state.partitions} partitions and the topic set has {partitions}",
        )


async def ensure_topics(
    admin: AIOKafkaAdminClient,
    topics: TopicSet,
    *,
    create: bool = True,
    extra: tuple[TopicSpec, ...] = (),
) -> list[str]:
    """Create the missing topics and verify the existing ones. Returns the names created.

    Every topic must have the topic set's partition count; an existing topic with another count
    is refused rather than adopted, so a process configured differently fails loudly at start
    instead of creating a mismatched sibling. With ``create=False`` (``TURNLOG_CREATE_TOPICS``
    false: operators make the topics) a missing topic is refused by name instead. ``extra``:
    topics beyond the set that this process needs (a sealing worker's keys topic).
    """
    specs = (*topics.specs(), *extra)
    existing = await describe(admin, [s.name for s in specs])
    partitions = topics.partitions
    for spec in specs:
        if spec.name in existing:
            check(spec, existing[spec.name], partitions, topics.replication_factor)
    missing = [s for s in specs if s.name not in existing]
    if missing and not create:
        raise TopicMismatch(
            "topic_missing",
            f"{', '.join(s.name for s in missing)} missing, and this process does not create "
            "topics (TURNLOG_CREATE_TOPICS=false): an operator applies `turnlog topics plan`",
        )
    created: list[str] = []
    if missing:
        response = await admin.create_topics(
            [
                NewTopic(
                    s.name, partitions, topics.replication_factor, topic_configs=s.all_configs()
                )
                for s in missing
            ]
        )
        for name, code, message in response.topic_errors:
            if code == 0:
                created.append(name)
            elif code != _TOPIC_ALREADY_EXISTS:
                raise TopicMismatch(
                    "topic_creation_failed", f"{name}: error {code} {message or ''}".strip()
                )
        # A concurrent creator may have won the race: verify what is there now.
        raced = [s for s in missing if s.name not in created]
        if raced:
            now = await describe(admin, [s.name for s in raced])
            for spec in raced:
                if spec.name in now:
                    check(spec, now[spec.name], partitions, topics.replication_factor)
    await wait_for_leaders(admin, [s.name for s in specs])
    return created


async def wait_for_leaders(
    admin: AIOKafkaAdminClient, names: list[str], timeout: float = 30.0
) -> None:
    """Wait until every partition of the named topics has a leader (creation is asynchronous)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        topics = await admin.describe_topics(names)
        if all(
            t["error_code"] == 0
            and t["partitions"]
            and all(p["leader"] >= 0 and p["error_code"] == 0 for p in t["partitions"])
            for t in topics
        ):
            return
        if loop.time() > deadline:
            raise BrokerUnavailable(f"topics {names} had no leaders after {timeout:.0f}s")
        await asyncio.sleep(0.1)


def lone_replica_warning(states: Mapping[str, TopicState], topics: TopicSet) -> str | None:
    """Why a restart can lose a resume on these topics, or ``None`` when none has one replica.

    A single-replica partition's controlled shutdown can lose a transaction's commit marker the
    broker had acknowledged (KAFKA-20734; ``docs/guarantees.md``): the records of a committed
    transaction are then aborted by the next one, so a resume is lost or a refusal is written
    twice -- what exactly once promises not to do, and nothing a client can prevent. Said once
    at a worker's start, with the way out, so it is not first learnt from a missing resume.

    ``states`` are the topics that exist (:func:`describe`); a missing one counts as it will be
    created, with ``topics.replication_factor`` -- so the answer does not depend on whether a
    worker started just before or just after the first pause created the topics.
    """
    names = [spec.name for spec in topics.specs()]
    single = [
        name
        for name in names
        if (states[name].replication == 1 if name in states else topics.replication_factor == 1)
    ]
    if not single:
        return None
    which = f"the {topics.prefix}* topics" if len(single) == len(names) else ", ".join(single)
    return (
        f"{which} {'has' if len(single) == 1 else 'have'} one replica: a restart of the broker "
        "holding it can lose a transaction's commit marker (KAFKA-20734), and with it a resume "
        "(an answer spent, never resumed) or a refusal written twice; run three brokers with "
        "replication factor 3 and min.insync.replicas=2, or on one node stop the workers "
        "before the broker; check with `turnlog audit`"
    )


#: Where a library worker says, at start, that its topics can lose a resume.
REPLICAS_LOG = logging.getLogger("turnlog.kafka.topics")


async def replication_warning(settings: BrokerSettings, topics: TopicSet) -> str | None:
    """:func:`lone_replica_warning` of the topic set as the broker has it.

    Called before a worker builds its clients, it is also the worker's first contact: an
    address that never answers is ``BrokerUnavailable`` within the first-contact budget
    (:func:`~turnlog.kafka.outage.ride_out`), before a client exists that would need closing.
    It asks only for the topics' metadata, which every role may read.
    """
    names = [spec.name for spec in topics.specs()]

    async def attempt() -> dict[str, TopicState]:
        admin = admin_client(settings)
        try:
            await admin.start()
            return await _layout(admin, names)
        finally:
            await admin.close()

    states = await ride_out(
        attempt, settings=settings, who="resume worker", timeout=attempt_timeout(settings)
    )
    return lone_replica_warning(states, topics)


async def warn_if_lone_replicas(
    settings: BrokerSettings, topics: TopicSet, *, log: logging.Logger = REPLICAS_LOG
) -> str | None:
    """:func:`replication_warning`, logged once at WARNING when there is one; returns it."""
    warning = await replication_warning(settings, topics)
    if warning is not None:
        log.warning("%s", warning)
    return warning


def admin_client(target: clients.Target, **options: Any) -> AIOKafkaAdminClient:
    """An admin client for ``target`` (settings, a connection, or a PLAINTEXT bootstrap)."""
    return clients.admin(target, **options)
