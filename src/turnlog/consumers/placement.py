"""Where answers partitions go in a worker group: an owner each, and warm copies elsewhere.

The group's leader places every partition on one member (its owner) and, when the group asks
for standbys, on up to N other members that keep a warm, read-only copy of its state (they apply
pauses[p] and consumptions[p] as they are written, and never answer, expire or retire for p).
When an owner dies, the leader gives its partitions to the members that held them warm, so the
next owner's restore reads only what was written since its copy's position instead of the whole
partition -- Kafka Streams' standby replicas (``num.standby.replicas``) and its sticky,
state-aware task assignment, on the classic consumer protocol.

Each member says in its subscription's user data what it holds: the partitions it owned before
this rebalance (the eager protocol revokes everything first), the ones it keeps warm, and how
many standbys it wants per partition. The leader's placement is a pure function of those
(:func:`place`), so it is tested without a broker; every member's standby list travels back in
its assignment's user data. User data from another member is read defensively: what does not
parse counts as holding nothing, never as a reason to fail the rebalance.

The rules, in order, with what each buys:

* balance first -- every member ends with ``floor(P/M)`` or ``ceil(P/M)`` partitions, as with
  the round-robin assignor the group used before;
* a member keeps what it owned (no restore at all), then a partition goes to a member that held
  it warm (a short restore), then to the least-loaded member;
* a partition's standbys are never on its owner (a copy in the owner's process dies with it),
  prefer members already warm for it, and spread evenly.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

log = logging.getLogger(__name__)

#: The protocol name every turnlog worker offers first (round-robin second, for a group that
#: still has a member of an older build: the coordinator picks what every member offers).
PROTOCOL = "turnlog-standby"
#: Most standby copies per partition a member may ask for.
MOST_STANDBYS = 8
#: User data longer than this is not read (a member's is a few hundred bytes).
_MOST_USER_DATA = 64 * 1024


@dataclass(frozen=True)
class Holding:
    """What one member says it holds when it joins."""

    owned: frozenset[int] = frozenset()
    warm: frozenset[int] = frozenset()
    standbys: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": 1,
                "owned": sorted(self.owned),
                "warm": sorted(self.warm),
                "standbys": self.standbys,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> Holding:
        """A member's holding from its user data; nothing held when it does not parse."""
        if not data or len(data) > _MOST_USER_DATA:
            return cls()
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict) or raw.get("v") != 1:
                return cls()
            standbys = raw.get("standbys", 0)
            if not isinstance(standbys, int) or isinstance(standbys, bool):
                return cls()
            return cls(_partitions(raw.get("owned")), _partitions(raw.get("warm")),
                       max(0, min(MOST_STANDBYS, standbys)))  # fmt: skip
        except (ValueError, TypeError):
            return cls()


def _partitions(raw: Any) -> frozenset[int]:
    if not isinstance(raw, list):
        raise TypeError("not a list of partitions")
    found = set()
    for p in raw:
        if not isinstance(p, int) or isinstance(p, bool) or p < 0:
            raise TypeError("not a partition")
        found.add(p)
    return frozenset(found)


@dataclass
class Placement:
    """One member's share: the partitions it owns, and those it keeps warm for others."""

    active: list[int] = field(default_factory=list)
    standby: list[int] = field(default_factory=list)


def place(partitions: Iterable[int], members: Mapping[str, Holding]) -> dict[str, Placement]:
    """Owners and standbys for ``partitions`` across ``members`` (the rules of the module).

    The number of standbys per partition is the most any member asks for, capped at the
    members other than the owner that ask for any (only those read copies). Deterministic:
    the same holdings give the same placement.
    """
    ids = sorted(members)
    placed = {m: Placement() for m in ids}
    todo = sorted(set(partitions))
    if not ids:
        return placed
    floor, extra = divmod(len(todo), len(ids))
    load = dict.fromkeys(ids, 0)

    def may_take(m: str) -> bool:
        if load[m] < floor:
            return True
        at_ceiling = sum(1 for n in ids if load[n] > floor)
        return load[m] == floor and at_ceiling < extra

    owner: dict[int, str] = {}

    def give(p: int, m: str) -> None:
        owner[p] = m
        load[m] += 1
        placed[m].active.append(p)

    for prefer in ("owned", "warm"):
        for p in todo:
            if p in owner:
                continue
            holders = [m for m in ids if p in getattr(members[m], prefer) and may_take(m)]
            if holders:
                give(p, min(holders, key=lambda m: (load[m], m)))
    for p in todo:
        if p not in owner:
            give(p, min((m for m in ids if may_take(m)), key=lambda m: (load[m], m)))

    # Only a member that asks for standbys keeps copies: one without has no reader for them.
    hosts = [m for m in ids if members[m].standbys > 0]
    copies = max((members[m].standbys for m in hosts), default=0)
    standby_load = dict.fromkeys(ids, 0)
    for p in todo:
        others = [m for m in hosts if m != owner[p]]
        # Warm first (its copy is current), then the fewest standbys so far, then the id.
        others.sort(key=lambda m: (p not in members[m].warm and p not in members[m].owned,
                                   standby_load[m], m))  # fmt: skip
        for m in others[:copies]:
            placed[m].standby.append(p)
            standby_load[m] += 1
    for share in placed.values():
        share.active.sort()
        share.standby.sort()
    return placed


def encode_standby(standby: Mapping[str, Iterable[int]]) -> bytes:
    """An assignment's user data: this member's standby partitions, per topic."""
    return json.dumps({"v": 1, "standby": {t: sorted(ps) for t, ps in standby.items()}}).encode()


def decode_standby(data: bytes | None) -> dict[str, frozenset[int]]:
    """The standby partitions per topic in an assignment's user data (none if unreadable)."""
    if not data or len(data) > _MOST_USER_DATA:
        return {}
    try:
        raw = json.loads(data)
        named = raw.get("standby") if isinstance(raw, dict) and raw.get("v") == 1 else None
        if not isinstance(named, dict):
            return {}
        return {str(topic): _partitions(ps) for topic, ps in named.items()}
    except (ValueError, TypeError):
        return {}


class StandbyAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """The group protocol of :func:`place`. aiokafka calls assignors on the class, so each
    worker gets its own subclass (:func:`assignor_for`) bound to its holding and its callback."""

    name = PROTOCOL
    version = 0
    holding: ClassVar[Callable[[], Holding]] = staticmethod(Holding)
    on_standby: ClassVar[Callable[[Mapping[str, frozenset[int]]], None]] = staticmethod(
        lambda standby: None
    )

    @classmethod
    def assign(
        cls, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        holdings = {m: Holding.decode(meta.user_data) for m, meta in members.items()}
        topics = sorted({t for meta in members.values() for t in meta.subscription})
        shares: dict[str, dict[str, Placement]] = {}
        for topic in topics:
            found = cluster.partitions_for_topic(topic)
            if found is None:
                log.warning("no partition metadata for topic %s", topic)
                continue
            subscribed = {m: h for m, h in holdings.items() if topic in members[m].subscription}
            shares[topic] = place(found, subscribed)
        result = {}
        for m in members:
            active = [(t, s[m].active) for t, s in shares.items() if m in s and s[m].active]
            standby = {t: s[m].standby for t, s in shares.items() if m in s and s[m].standby}
            result[m] = ConsumerProtocolMemberAssignment(
                cls.version, sorted(active), encode_standby(standby)
            )
        return result

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(cls.version, list(topics), cls.holding().encode())

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        cls.on_standby(decode_standby(assignment.user_data))


def assignor_for(
    holding: Callable[[], Holding], on_standby: Callable[[Mapping[str, frozenset[int]]], None]
) -> type[StandbyAssignor]:
    """A :class:`StandbyAssignor` of one worker: ``holding`` is asked at every join, and
    ``on_standby`` told this member's standby partitions at every assignment."""
    return type(
        "WorkerStandbyAssignor",
        (StandbyAssignor,),
        {"holding": staticmethod(holding), "on_standby": staticmethod(on_standby)},
    )
