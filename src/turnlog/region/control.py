"""Region B's control topic: the operator's promotion, the one thing that moves turnlog to B.

Passive workers in B keep warm copies of the mirrored partitions and never join the answers
group on their own: nothing they can observe -- A unreachable, the mirror quiet -- tells a lost
region from a network blip, and two regions resuming the same answers is the one failure no
audit can undo. ``turnlog region promote`` writes one :class:`Promotion` (who, when, why) on
``<prefix>region`` in B; every passive worker reads that topic from its start and takes over
when it finds a promotion there, a worker started later included. MirrorMaker mirrors only the
five topics by name, so a promotion never travels to another region.

A record on the topic that is not a promotion (another tool's, or damaged) promotes nothing:
it is skipped and logged, never guessed at.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import NewTopic

from turnlog.errors import BrokerUnavailable
from turnlog.kafka import clients
from turnlog.kafka.reader import LogReader, Record
from turnlog.kafka.topics import wait_for_leaders

log = logging.getLogger(__name__)

#: The control topic's name after the deployment's prefix.
CONTROL_SUFFIX = "region"
#: What a promotion record says it is (a record without it promotes nothing).
KIND = "turnlog.region.promotion"
_TOPIC_ALREADY_EXISTS = 36


def control_topic(prefix: str) -> str:
    """``<prefix>region``: B's own, never in MirrorMaker's topic list."""
    return f"{prefix}{CONTROL_SUFFIX}"


@dataclass(frozen=True, slots=True)
class Promotion:
    """The operator's decision that this region's workers own the answers from now on."""

    #: the region's name as the operator gave it (``turnlog region promote --region``)
    region: str
    #: who decided (a person or a runbook's id): said by every worker that takes over
    by: str
    #: when, in milliseconds since the epoch (UTC)
    at_ms: int
    #: why, in the operator's words (may be empty)
    reason: str = ""

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.at_ms / 1000, UTC)

    def encode(self) -> bytes:
        body = {"kind": KIND, "region": self.region, "by": self.by, "at_ms": self.at_ms}
        if self.reason:
            body["reason"] = self.reason
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes | None) -> Promotion | None:
        """The promotion ``value`` holds, or ``None`` for anything else (never a guess)."""
        if not value:
            return None
        try:
            body: Any = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(body, dict) or body.get("kind") != KIND:
            return None
        region, by, at_ms = body.get("region"), body.get("by"), body.get("at_ms")
        reason = body.get("reason", "")
        if not (isinstance(region, str) and isinstance(by, str) and by and isinstance(reason, str)):
            return None
        if not isinstance(at_ms, int) or isinstance(at_ms, bool) or at_ms <= 0:
            return None
        return cls(region, by, at_ms, reason)

    def line(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return (
            f"region {self.region} promoted by {self.by} at "
            f"{self.at.isoformat(timespec='seconds').replace('+00:00', 'Z')}{why}"
        )


async def ensure_control_topic(target: clients.Target, name: str, replication: int = 1) -> None:
    """One partition (a total order of decisions), kept forever (a worker started a year
    after the promotion must still find it)."""
    admin = clients.admin(target, client_id="turnlog-region")
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, 1, replication, topic_configs={"retention.ms": "-1"})]
        )
        for topic, code, message in response.topic_errors:
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                raise BrokerUnavailable(f"could not create {topic}: error {code} {message or ''}")
        await wait_for_leaders(admin, [name])
    finally:
        await admin.close()


async def publish(target: clients.Target, name: str, promotion: Promotion) -> int:
    """Write ``promotion`` on the control topic (acks from every in-sync replica); its offset."""
    producer = clients.producer(
        target, client_id="turnlog-region", acks="all", enable_idempotence=True
    )
    await producer.start()
    try:
        meta = await producer.send_and_wait(
            name, promotion.encode(), key=b"promotion", partition=0, timestamp_ms=promotion.at_ms
        )
        return int(meta.offset)
    finally:
        await producer.stop()


def first_promotion(records: list[Record]) -> Promotion | None:
    """The first promotion among ``records``; anything else on the topic is skipped (logged)."""
    for record in records:
        found = Promotion.decode(record.value)
        if found is not None:
            return found
        log.warning(
            "skipped a record on the region control topic at offset %d: not a promotion",
            record.offset,
        )
    return None


async def read_promotion(
    target: clients.Target, name: str, timeout: float = 30.0
) -> Promotion | None:
    """The control topic's first promotion, read to its end now (``None``: not promoted, or
    no control topic yet)."""
    reader = LogReader(target, client_id="turnlog-region")
    await reader.start()
    try:
        try:
            await reader.partitions_of(name, timeout=min(timeout, 3.0))
        except BrokerUnavailable:
            return None  # no control topic: nobody ever promoted this region
        await reader.assign({TopicPartition(name, 0): None})
        found: list[Promotion] = []

        async def take(records: Any) -> None:
            one = first_promotion(list(records))
            if one is not None and not found:
                found.append(one)

        await reader.read_to_end(take, timeout=timeout)
        return found[0] if found else None
    finally:
        await reader.stop()


class PromotionWatch:
    """Follows the control topic until a promotion is on it (a passive worker's wait).

    A missing control topic is waited for, not an error: it is made by the first promotion.
    """

    def __init__(self, target: clients.Target, name: str, *, poll_seconds: float = 0.5) -> None:
        self.name = name
        self._reader = LogReader(target, client_id="turnlog-region-watch")
        self._poll = poll_seconds
        self._assigned = False

    async def start(self) -> None:
        await self._reader.start()

    async def stop(self) -> None:
        await self._reader.stop()

    async def check(self) -> Promotion | None:
        """One look: what the topic holds since the last look, if a promotion is among it."""
        if not self._assigned:
            try:
                await self._reader.partitions_of(self.name, timeout=self._poll)
            except BrokerUnavailable:
                return None  # not created yet
            await self._reader.assign({TopicPartition(self.name, 0): None})
            self._assigned = True
        return first_promotion(await self._reader.poll(timeout_ms=int(self._poll * 1000)))

    async def wait(self, stopping: asyncio.Event) -> Promotion | None:
        """Until a promotion is read (returned) or ``stopping`` is set (``None``)."""
        while not stopping.is_set():
            found = await self.check()
            if found is not None:
                return found
            if not self._assigned:
                await _pause(stopping, self._poll)
        return None


async def _pause(stopping: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        return
