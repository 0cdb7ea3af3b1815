"""The keys of sealed resumed turns: written by a sealing worker, read by whoever opens a turn.

A sealing worker (``TURNLOG_SEAL``) replaces each resumed turn it would write with the turn sealed
under a fresh key and that key's record on ``<prefix>keys`` (:func:`seal_outputs`), both in the
partition's transaction: a turn is never on the log without its key, nor a key without its turn.
The key record sits on the thread's partition of the keys topic, as the turn does on resumed.

A reader opens a sealed turn with :class:`KeyRing`: it reads the keys partition from a little
before the turn was written to the partition's end, so a ``forget`` written after the key (a
tombstone under the same name) is seen and the turn refused as :class:`ContentShredded` -- at
once, not when the broker's cleaner removes the key's bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnlog.contracts.events import TurnResumed
from turnlog.errors import BrokerUnavailable, ContentShredded
from turnlog.kafka import clients
from turnlog.kafka.internals import refresh_metadata
from turnlog.kafka.outage import ride_out
from turnlog.kafka.partitioning import partition_for
from turnlog.kafka.reader import close_consumer
from turnlog.kafka.topics import TopicSet, ensure_topics, verify_present
from turnlog.settings import Settings
from turnlog.wire.codec import fingerprint_of
from turnlog.wire.sealing import KEY_BYTES, key_name, new_key, seal, unseal

log = logging.getLogger("turnlog.keys")

Output = tuple[str, bytes, bytes | None]

#: How far before a turn's time its key is looked for. The worker stamps the turn, then appends
#: the key record (its timestamp: the same clock, later), so this is only room for a clock
#: stepped back in between.
LOOKBACK_MS = 60 * 1000
#: A key already read is trusted for this long before the partition is read again for a
#: tombstone written since.
FRESH_SECONDS = 1.0
#: How long a key not yet visible is waited for: the transaction's markers reach the resumed
#: and the keys partitions one after the other, so a reader can meet the turn first.
KEY_WAIT_SECONDS = 10.0
#: Names remembered per ring (about 150 bytes each): a stream reading a backlog finds the keys
#: of the turns after the one it looked up already read.
CACHED = 200_000


async def ensure_keys_topic(settings: Settings, topics: TopicSet) -> None:
    """The keys topic exists (created here unless ``TURNLOG_CREATE_TOPICS`` is false: then
    only looked for), with the topic set's partition count: a sealing worker checks this
    before it owns anything, so a turn is never sealed under a key with nowhere to go."""

    async def attempt() -> None:
        admin = clients.admin(settings, client_id="turnlog-keys")
        try:
            await admin.start()
            if settings.create_topics:
                await ensure_topics(admin, topics, extra=(topics.keys_spec(),))
            else:  # an operator made the topics (``turnlog topics plan``): no config read
                await verify_present(admin, topics.keys_spec(), topics.partitions)
        finally:
            await admin.close()

    await ride_out(attempt, settings=settings, who="keys topic")


def seal_outputs(topics: TopicSet, outputs: Iterable[Output]) -> list[Output]:
    """``outputs`` with every resumed turn sealed under a new key, its key record just before
    it (same partition, same transaction). Expiries and tombstones on resumed are left as they
    are: they carry no content."""
    sealed: list[Output] = []
    turn_header = fingerprint_of("TurnResumed")
    for topic, key, value in outputs:
        if topic != topics.resumed or value is None or not _is_turn(value, turn_header):
            sealed.append((topic, key, value))
            continue
        content_key = new_key()
        name, record = seal(value, content_key)
        sealed.append((topics.keys, name, content_key))
        sealed.append((topic, key, record))
    return sealed


def _is_turn(value: bytes, turn_header: bytes) -> bool:
    """Whether an encoded value is a turn written now (single-object framing names the schema
    in its header; the registry's needs a decode to tell)."""
    if value[:2] == b"\xc3\x01":
        return value[2:10] == turn_header
    from turnlog.wire.codec import decode

    return isinstance(decode(value), TurnResumed)


async def opened(
    settings: Settings, topics: TopicSet, turn: TurnResumed, partition: int | None = None
) -> TurnResumed:
    """``turn``, opened with its key when sealed (a reader of its own, closed after): for a
    one-off read; a stream keeps one :class:`KeyRing`. :class:`ContentShredded` when its
    thread was forgotten."""
    if turn.sealed is None:
        return turn
    ring = KeyRing(settings, topics)
    try:
        return await ring.open(turn, partition)
    finally:
        await ring.close()


class KeyRing:
    """Opens sealed turns, reading their keys from the keys topic as it meets them.

    One Kafka reader, made at the first sealed turn (a deployment that never sealed never
    opens one); :meth:`close` it. Not for concurrent use from several tasks.
    """

    def __init__(self, settings: Settings, topics: TopicSet, *, client_id: str = "") -> None:
        self._settings, self._topics = settings, topics
        self._client_id = client_id or f"turnlog-keys-{uuid.uuid4().hex[:6]}"
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: int | None = None
        self._known: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._read_to: dict[int, int] = {}
        self._read_at: dict[int, float] = {}

    async def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await close_consumer(consumer)

    async def open(self, turn: TurnResumed, partition: int | None = None) -> TurnResumed:
        """``turn`` unsealed (as it is when it is not sealed). :class:`ContentShredded` when its
        key was tombstoned or is nowhere; :class:`DecodeError` for a key or a ciphertext that
        does not fit; :class:`BrokerUnavailable` when the keys could not be read in time."""
        if turn.sealed is None:
            return turn
        key = await self._key(turn, partition)
        if key is None:
            raise ContentShredded(turn.thread_id, turn.event_id)
        return unseal(turn, key)

    async def _key(self, turn: TurnResumed, partition: int | None) -> bytes | None:
        name = key_name(turn)
        if partition is None:
            partition = partition_for(turn.thread_id, await self._partition_count())
        tp = TopicPartition(self._topics.keys, partition)
        fresh = time.monotonic() - self._read_at.get(partition, float("-inf")) < FRESH_SECONDS
        if name in self._known and fresh:
            return self._known[name]
        at_ms = int(turn.occurred_at.timestamp() * 1000) - LOOKBACK_MS
        deadline = time.monotonic() + KEY_WAIT_SECONDS
        again = partition in self._read_to
        while True:
            await self._read(tp, at_ms)
            if name in self._known:
                self._known.move_to_end(name)
                return self._known[name]
            if again:
                # Read on from where this ring was: the key of an older turn (or one no longer
                # remembered) lies before that. Once more from the turn's own time.
                again = False
                self._read_to.pop(partition, None)
                continue
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.2)

    async def _partition_count(self) -> int:
        if self._partitions is None:
            consumer = await self._reader()
            await refresh_metadata(consumer)
            count = len(consumer.partitions_for_topic(self._topics.keys) or ())
            if not count:
                # No keys topic: no turn was ever sealed here, so none can be opened.
                count = len(consumer.partitions_for_topic(self._topics.resumed) or ()) or 1
            self._partitions = count
        return self._partitions

    async def _reader(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = clients.consumer(
                self._settings,
                client_id=self._client_id,
                group_id=None,
                enable_auto_commit=False,
                isolation_level="read_committed",
                auto_offset_reset="earliest",
                fetch_max_wait_ms=50,
            )
            try:
                await consumer.start()
            except BaseException:
                await close_consumer(consumer)
                raise
            self._consumer = consumer
        return self._consumer

    async def _read(self, tp: TopicPartition, at_ms: int) -> None:
        """Read ``tp`` from where this ring stopped (the first time, from ``at_ms``) to its
        end now, remembering every name's last value (a tombstone: ``None``)."""
        consumer = await self._reader()
        if not consumer.partitions_for_topic(tp.topic):
            await refresh_metadata(consumer)
        if not consumer.partitions_for_topic(tp.topic):
            self._read_at[tp.partition] = time.monotonic()
            return  # no keys topic (yet): nothing to remember
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        start = self._read_to.get(tp.partition)
        if start is None or start > end:
            found = (await consumer.offsets_for_times({tp: max(0, at_ms)}))[tp]
            start = end if found is None else found.offset
        if start < end:
            consumer.seek(tp, start)
            deadline = time.monotonic() + self._settings.broker_timeout_seconds
            while await consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(f"the keys on {tp.topic}[{tp.partition}] not read")
                batch = await consumer.getmany(tp, timeout_ms=500)
                for record in batch.get(tp, ()):
                    if record.key is None:
                        continue
                    value = record.value
                    # A value that is not a key opens nothing: remembered as an empty key,
                    # which ``unseal`` refuses by name.
                    self._known[bytes(record.key)] = (
                        None if value is None else (value if len(value) == KEY_BYTES else b"")
                    )
                    self._known.move_to_end(bytes(record.key))
            while len(self._known) > CACHED:
                self._known.popitem(last=False)
        self._read_to[tp.partition] = max(end, self._read_to.get(tp.partition, 0))
        self._read_at[tp.partition] = time.monotonic()
