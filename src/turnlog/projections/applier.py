"""Records of the pauses and consumptions topics turned into store changes.

One fetched batch becomes one atomic store write holding both the facts and the next offset of
every partition it touched, so a crash at any moment leaves data and offsets agreeing. A record
that is not a turnlog record is counted, logged with its partition and offset, and skipped: one
bad record must never stop the projection of everything behind it. Pauses are refused or taken
at the door from a skim (:mod:`turnlog.wire.skim`): the same refusals as a decode, without
building the messages the store keeps as the record's own bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from turnlog.contracts.events import PauseRecorded, TokenConsumed
from turnlog.contracts.group import view_for_token
from turnlog.contracts.ledger import LedgerEntry, claim_of
from turnlog.errors import DecodeError
from turnlog.kafka.finalization import is_unfinalized
from turnlog.kafka.partitioning import split_key
from turnlog.kafka.reader import Record
from turnlog.kafka.topics import TopicSet
from turnlog.projections.batch import facts_of, group_facts_of
from turnlog.projections.store import Batch, Store
from turnlog.wire.codec import decode
from turnlog.wire.skim import messages_hint, skim_pause

__all__ = ["ApplyStats", "StoreApplier"]

log = logging.getLogger(__name__)


@dataclass
class ApplyStats:
    applied: int = 0
    skipped: int = 0
    skipped_at: list[tuple[str, int, int, str]] = field(default_factory=list)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class StoreApplier:
    """Turns records of the pauses and consumptions topics into store changes."""

    def __init__(
        self,
        store: Store,
        topics: TopicSet,
        *,
        messages_hints: bool = False,
        scrub_forgotten: bool = False,
    ) -> None:
        self.store = store
        self.topics = topics
        self.stats = ApplyStats()
        #: Keep beside each pause where its skim found the messages (the resume worker's store:
        #: a resume then reads the pause without walking them again). Off for a projection that
        #: only serves reads, so a rebuild does not pay for it.
        self.messages_hints = messages_hints
        #: Scrub the store's files after a forget (:meth:`Store.scrub`): on for the worker's
        #: store and a projector's. After the forced flush and compaction a running RocksDB
        #: secondary (the inbox follows a projection so) no longer saw the writer's changes
        #: until it was opened again; the scrub says so in the store's directory, and a
        #: secondary opens the store again at its next catch-up (:meth:`Store.catch_up`).
        self.scrub_forgotten = scrub_forgotten
        #: Whether the batch being applied forgot a thread (then the store is scrubbed).
        self._forgot = False

    async def apply(self, records: Sequence[Record]) -> None:
        deleted = self._apply(records)
        if deleted is not None and self.scrub_forgotten:
            # On a thread: RocksDB's compaction lets go of the GIL, and it takes a second or
            # two on a store of 100,000 pauses -- the event loop goes on meanwhile.
            await asyncio.to_thread(self.store.scrub, deleted)

    def apply_now(self, records: Iterable[Record]) -> None:
        deleted = self._apply(records)
        if deleted is not None and self.scrub_forgotten:
            self.store.scrub(deleted)

    def _apply(self, records: Iterable[Record]) -> dict[str, list[bytes]] | None:
        """Apply ``records`` in one batch; what it deleted when it forgot a thread: a thread
        forgotten leaves no copy in the store's files either (:meth:`Store.scrub`)."""
        ends: dict[tuple[str, int], int] = {}
        self._forgot = False
        with self.store.batch() as batch:
            for record in records:
                self._apply_one(batch, record)
                ends[record.topic, record.partition] = record.offset + 1
            # The same atomic batch: one offset per partition, the last one applied.
            for (topic, partition), end in ends.items():
                batch.set_offset(topic, partition, end)
        return batch.deleted() if self._forgot else None

    def _apply_one(self, batch: Batch, record: Record) -> None:
        try:
            if record.topic == self.topics.pauses:
                self._pause(batch, record)
            elif record.topic == self.topics.consumptions:
                self._consumption(batch, record)
            else:
                raise DecodeError("unexpected_topic", f"{record.topic} is not projected here")
        except (DecodeError, ValueError) as exc:
            self.stats.skipped += 1
            where = (record.topic, record.partition, record.offset, str(exc))
            if len(self.stats.skipped_at) < 1000:
                self.stats.skipped_at.append(where)
            log.warning(
                "skipping %s[%d]@%d: %s", record.topic, record.partition, record.offset, exc
            )
            return
        self.stats.applied += 1

    def _pause(self, batch: Batch, record: Record) -> None:
        if record.value is None:
            if record.key is None:
                raise DecodeError("tombstone_without_key", "a pauses tombstone must have a key")
            # ``forget`` writes one per checkpoint: once the thread holds none, it goes whole
            # (its ledger rows too, a held answer's text with them), and the store remembers
            # it was forgotten (a marker counts only while no checkpoint of the thread is left).
            thread_id, checkpoint_id = split_key(record.key)
            deadlines = [batch.delete_pause(thread_id, checkpoint_id)]
            if not batch.holds_thread(thread_id):
                deadlines.append(batch.forget(thread_id))
            stamp = getattr(record, "timestamp", None)
            at_ms = stamp if isinstance(stamp, int) and stamp > 0 else int(time.time() * 1000)
            batch.mark_forgotten(thread_id, at_ms, max((d for d in deadlines if d), default=None))
            self._forgot = True
            return
        # Skimmed, not decoded: the same refusals at the door, without building the messages
        # the store keeps as the record's own bytes.
        pause = skim_pause(record.value)
        cp = pause.checkpoint
        batch.put_pause(
            cp.thread_id,
            cp.checkpoint_id,
            record.offset,  # the log's order of writes (a thread's partition is one)
            record.value,
            token_id=pause.token_id,
            expires_at_ms=pause.expires_at_ms,
            # offsets into record.value, which it skimmed
            messages_hint=messages_hint(cp) if self.messages_hints else None,
            group_tokens=[call["token_id"] for call in pause.group],
            facts=facts_of(pause),
            group_facts=group_facts_of(pause),
            unfinalized=is_unfinalized(getattr(record, "headers", None)),
        )

    def _consumption(self, batch: Batch, record: Record) -> None:
        if record.value is None:
            if record.key is None:
                raise DecodeError("tombstone_without_key", "a consumptions tombstone needs a key")
            thread_id, token_id = split_key(record.key)
            batch.delete_consumption(thread_id, token_id)
            return
        consumed = decode(record.value, TokenConsumed)
        batch.put_consumption(
            consumed.thread_id,
            consumed.token_id,
            consumed.outcome,
            consumed.answer_id,
            consumed.response_json,
            claim_of(consumed),
        )

    # -- reads used by the resume worker --------------------------------------------------------

    def pause(self, token_id: str) -> PauseRecorded | None:
        info = self.store.pause_for_token(token_id)
        if info is None:
            return None
        # A pause of several calls, as the token's own call sees it.
        return view_for_token(decode(info.value, PauseRecorded), token_id)

    def ledger(self, token_id: str) -> LedgerEntry | None:
        return self.store.ledger(token_id)

    def expired(
        self, now: datetime, since_ms: int = 0, *, keep: Callable[[str], bool] | None = None
    ) -> list[PauseRecorded]:
        """The pauses due to expire; ``keep`` (a thread id's test) picks them before any is
        read, so a worker reads only its own partitions' pauses."""
        found = []
        for open_pause in self.store.expired(_ms(now), since_ms):
            if keep is not None and not keep(open_pause.thread_id):
                continue
            pause = self.pause(open_pause.token_id)
            if pause is not None:
                found.append(pause)
        return found

    def record_consumptions(self, spent: Mapping[str, LedgerEntry]) -> None:
        """What a committed transaction consumed; written after the commit, never before."""
        if not spent:
            return
        with self.store.batch() as batch:
            batch.put_consumptions(
                (
                    entry.thread_id,
                    token_id,
                    entry.outcome,
                    entry.answer_id,
                    entry.response_json,
                    claim_of(entry),
                )
                for token_id, entry in spent.items()
            )
