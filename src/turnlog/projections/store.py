"""The local RocksDB store the projector writes and the resume worker and CLI read.

It holds what the log says, indexed for the questions the resume path asks: a thread's
checkpoints in the log's order, the pause behind a token, the spent-token ledger, the pauses whose
window has closed, and the next offset of every topic-partition applied. Every change, offsets
included, is one RocksDB write batch, so after a crash data and offsets never disagree and replay
restarts exactly where the data stops. Values are the caller's opaque encoded bytes; index entries
use the fixed layout of :mod:`turnlog.projections.layout`. Nothing is pickled.

The indexes are a function of the content (the pauses and the ledger), never of the order it
arrived in, so a live store and one rebuilt from the compacted topics have the same digest.

A read-write open records its owner (pid, host, program, since when) in :data:`OWNER_FILE`
inside the store directory, and removes it on close: RocksDB's LOCK says only *that* a writer
holds the store, and with several processes on one state directory a refusal must say *which*.

It is one module, over the usual length, because every open mode, read and write goes through
the one RocksDB handle it owns, and the owner record lives and dies with the read-write open; the
index rules live in :mod:`~turnlog.projections.batch` and the key layout in
:mod:`~turnlog.projections.layout`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import itertools
import json
import os
import re
import socket
import struct
import sys
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple

import rocksdict

from turnlog.clock import utc_now
from turnlog.contracts.ledger import LedgerEntry, Outcome
from turnlog.errors import StoreError
from turnlog.projections import forgotten, layout
from turnlog.projections.batch import Batch
from turnlog.wire.skim import StoredPause

__all__ = [
    "OWNER_FILE",
    "Batch",
    "Change",
    "OpenPause",
    "PauseInfo",
    "PendingPage",
    "Store",
    "StoreLocked",
    "UnfinalizedPause",
    "WaitingPause",
    "page_bound",
]

Mode = Literal["read-write", "read-only", "secondary"]
_PAGE = 256

#: The most waiting-index entries one page of :meth:`Store.pending_page` tested by ``where``
#: (a caller's own test, run on every entry's decoded facts) reads: such a page whose test
#: matches little ends there, with a cursor to go on from, rather than decode every pause.
MAX_SCAN = 20_000

#: What all of a store's memtables may hold together. RocksDB's default is 64 MiB per column
#: family, twice over, with nine families: a worker's peak RSS after a full restore grew with
#: the pending pauses until every family's memtables were full (332 MB at 100k, 522 MB at 300k;
#: with this budget and the shared cache below, 271 MB and 300 MB, the restore as fast).
MEMTABLE_BUDGET = 64 * 1024 * 1024
#: One block cache for every column family of a store (RocksDB gives each family's table
#: factory its own default cache otherwise).
BLOCK_CACHE = 32 * 1024 * 1024

#: The owner record a read-write open leaves beside RocksDB's own files (RocksDB ignores names
#: it did not write).
OWNER_FILE = "turnlog-owner.json"


class StoreLocked(StoreError):
    """The store is open read-write elsewhere: RocksDB allows one writer per store.

    ``owner`` describes the holder as its owner record names it (``pid 4242 on web-1 since
    ...``), or is ``None`` when no live turnlog writer recorded itself.
    """

    def __init__(self, path: Path, owner: str | None) -> None:
        holder = owner or "another process (it recorded no owner)"
        super().__init__(
            f"the store at {path} is already open read-write by {holder}; one writer per store "
            "(RocksDB LOCK): another writer needs a state directory of its own, a reader "
            "Store.open_secondary"
        )
        self.path = path
        self.owner = owner


class PauseInfo(NamedTuple):
    """The pause behind a token, with the stored pause bytes, for a worker holding only a token."""

    thread_id: str
    checkpoint_id: str
    #: Its place among the thread's checkpoints (the offset of its first write).
    order: int
    token_id: str
    expires_at_ms: int
    value: bytes


class OpenPause(NamedTuple):
    """A pause whose token is not in the ledger yet."""

    token_id: str
    thread_id: str
    expires_at_ms: int


class UnfinalizedPause(NamedTuple):
    """A pause written unfinalized and not finalized since (the crash window)."""

    token_id: str
    thread_id: str
    #: When it was written (its token's issue time), ms since the epoch.
    paused_at_ms: int
    expires_at_ms: int
    #: Whether its token is spent (expired for it, or answered).
    spent: bool


class WaitingPause(NamedTuple):
    """A pending pause as the waiting index holds it: enough to list, filter and find it."""

    token_id: str
    thread_id: str
    checkpoint_id: str
    expires_at_ms: int
    interaction: str
    scope: str
    session: str
    run: str
    call: str
    #: When the pause was made (its token's issue time: whole seconds), ms since the epoch.
    paused_at_ms: int
    #: When its checkpoint was made, ms since the epoch: orders pauses of one second.
    created_at_ms: int

    @property
    def cursor(self) -> str:
        """Where a page that ends with this pause goes on from."""
        return _cursor(layout.deadline_key(self.expires_at_ms, self.token_id))


class Change(NamedTuple):
    """One entry of the changes feed: a pause entered the waiting index (``added``) or left it
    (``answered``, ``expired``: its token spent so; ``gone``: forgotten or replaced)."""

    number: int
    kind: str
    token_id: str
    thread_id: str
    scope: str
    interaction: str


class PendingPage(NamedTuple):
    """One page of pending pauses, soonest deadline first, and the cursor of the next page
    (``None``: this was the last)."""

    items: list[WaitingPause]
    next: str | None


#: How many times the writer scrubbed the store (:meth:`Store.scrub`): a secondary that sees
#: it change opens the store again.
SCRUBS_FILE = "SCRUBS"


def _scrubs(path: Path) -> int:
    try:
        return int((path / SCRUBS_FILE).read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


class Store:
    """One store directory. One read-write process at a time (RocksDB's LOCK); others read it
    through :meth:`open_secondary`, which follows the writer, or :meth:`open_read_only`, which sees
    the store as of its open.
    """

    def __init__(self, db: Any, path: Path, mode: Mode, *, bulk: bool = False) -> None:
        self._db: Any = db
        self._cf: dict[str, Any] = {}
        self._handles: dict[str, Any] = {}
        self._families_of_db()
        self.path = path
        self.mode: Mode = mode
        #: Loading into a new store: see :meth:`open`'s ``bulk``.
        self.bulk = bulk
        self._write_options = rocksdict.WriteOptions()
        # A property at run time; rocksdict's stub declares it a method.
        self._write_options.disable_wal = bulk  # type: ignore[method-assign, assignment]
        #: This open's mark in the owner record (read-write only): close removes only its own.
        self._claim: str | None = None
        #: Opens the same store again the same way (a secondary, after its writer scrubbed).
        self._attach: Callable[[], Any] | None = None
        #: The writer's scrub count this open has seen (:data:`SCRUBS_FILE`).
        self._scrubs_seen = 0

    # -- opening and closing ------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, bulk: bool = False) -> Store:
        """Open (creating if missing) for reading and writing; refused while another holds it.

        ``bulk``: for loading a new store from the log (a rebuild). Batches skip the write-ahead
        log; the column families are flushed together (``atomic_flush``, and on close), so an
        interrupted load leaves the state as of one whole batch, offsets included, to continue
        from (``tests/unit/test_store_bulk.py``; reasoning in ``bench/README.md``). Not for a
        live store: a crash would lose its last batches, and what a worker already acted on.
        """
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        if bulk:
            options.set_atomic_flush(True)
        return cls._open(Path(path), options, None, "read-write", bulk=bulk)

    @classmethod
    def open_secondary(
        cls, path: str | os.PathLike[str], secondary_path: str | os.PathLike[str]
    ) -> Store:
        """A reader beside a running writer; :meth:`catch_up` brings it to the writer's state.

        ``secondary_path`` is this reader's own directory (RocksDB keeps its info log there).
        """
        access = rocksdict.AccessType.secondary(str(secondary_path))
        return cls._open(Path(path), rocksdict.Options(raw_mode=True), access, "secondary")

    @classmethod
    def open_read_only(cls, path: str | os.PathLike[str]) -> Store:
        """A frozen view: what the store held when it was opened (its write-ahead log included)."""
        access = rocksdict.AccessType.read_only()
        return cls._open(Path(path), rocksdict.Options(raw_mode=True), access, "read-only")

    @classmethod
    def _open(
        cls, path: Path, options: Any, access: Any, mode: Mode, *, bulk: bool = False
    ) -> Store:
        if access is not None and not (path / "CURRENT").is_file():
            raise StoreError(f"no store at {path} to open {mode}")
        if access is not None:
            present = _families_of(path)
            # the families layouts 2, 3 and 4 added
            added = [layout.SPENT, layout.WAITING, layout.UNFINALIZED]
            old = next((v for v, f in enumerate(added, 1) if f not in present), None)
            if old is not None:
                raise StoreError(
                    f"the store at {path} has layout version {old}, this build reads "
                    f"{layout.LAYOUT_VERSION}: a worker or projector of this build empties it "
                    "when it opens it read-write and fills it again from the log (or rebuild it)"
                )
        families = {name: rocksdict.Options(raw_mode=True) for name in layout.ALL_FAMILIES}
        _bound_memory(options, families.values())
        extra = {} if access is None else {"access_type": access}

        def attach() -> Any:
            try:
                return rocksdict.Rdict(str(path), options, column_families=families, **extra)
            except Exception as exc:
                if "LOCK" in str(exc):  # RocksDB names the lock file, e.g. "<path>/LOCK: ..."
                    raise StoreLocked(path, _owner_of(path)) from exc
                raise StoreError(f"could not open the store at {path} {mode}: {exc}") from exc

        scrubs = _scrubs(path)
        store = cls(attach(), path, mode, bulk=bulk)
        store._attach, store._scrubs_seen = attach, scrubs
        try:
            if mode == "read-write":
                store._claim = _record_owner(path)
            store._check_layout()
        except BaseException:
            store.close()
            raise
        return store

    def _check_layout(self) -> None:
        found = self._get(layout.META, layout.VERSION_KEY)
        if found in (b"1", b"2", b"3") and self.mode == "read-write":
            self._refill()
        elif found is None and self.mode == "read-write":
            self._cf[layout.META][layout.VERSION_KEY] = str(layout.LAYOUT_VERSION).encode()
        elif found is not None and found != str(layout.LAYOUT_VERSION).encode():
            raise StoreError(
                f"the store at {self.path} has layout version {found.decode(errors='replace')}, "
                f"this build reads {layout.LAYOUT_VERSION}; rebuild it from the log"
            )

    def _refill(self) -> None:
        """Layouts 1 to 3 ordered a thread's checkpoints by the caller's ``sequence`` and knew no
        offset per pause: empty the store, offsets included, so that it is filled again from
        the log like a new one (a worker restores it at its next take). The version is written
        last: a refill cut short runs again."""
        for family in layout.ALL_FAMILIES:
            while page := self._scan(family, b"", None, _PAGE):
                self._write({family: {key: None for key, _ in page}})
        self._cf[layout.META][layout.VERSION_KEY] = str(layout.LAYOUT_VERSION).encode()

    def close(self) -> None:
        """Release the store (and its LOCK); safe to call twice.

        Column-family objects keep RocksDB open after ``Rdict.close()``, so they go first.
        """
        if self._db is None:
            return
        if self._claim is not None:  # while the LOCK is still ours: no later owner's record
            _forget_owner(self.path, self._claim)
            self._claim = None
        self._detach()

    def _families_of_db(self) -> None:
        self._cf = {n: self._db.get_column_family(n) for n in layout.ALL_FAMILIES}
        self._handles = {n: self._db.get_column_family_handle(n) for n in layout.ALL_FAMILIES}

    def _detach(self) -> None:
        db, self._db = self._db, None
        families, self._cf, self._handles = self._cf, {}, {}
        for family in families.values():
            family.close()
        db.close()

    def drop(self) -> None:
        """Close and delete this store, for a rebuild from the log."""
        self.close()
        Store.destroy(self.path)

    @staticmethod
    def destroy(path: str | os.PathLike[str]) -> None:
        """Delete the store at ``path``; refused while a process has it open read-write."""
        where = Path(path)
        if not where.exists():
            return
        try:
            rocksdict.Rdict.destroy(str(where), rocksdict.Options(raw_mode=True))
        except Exception as exc:
            raise StoreError(f"could not delete the store at {path}: {exc}") from exc
        # RocksDB deletes only its own files: a record a crashed owner left would keep the
        # directory (and a rebuild would find it there).
        for record in [*where.glob(f"{OWNER_FILE}*"), *where.glob(f"{SCRUBS_FILE}*")]:
            record.unlink(missing_ok=True)
        try:
            where.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"could not delete the store at {path}: {exc}") from exc

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._db is None

    def catch_up(self) -> dict[tuple[str, int], int]:
        """Follow the writer (secondary mode) and return the offsets now visible: how fresh
        this reader is."""
        if self.mode == "secondary":
            scrubs = _scrubs(self.path)
            if scrubs != self._scrubs_seen and self._attach is not None:
                # The writer flushed and compacted a forgotten thread away (:meth:`scrub`): a
                # secondary that went on following it saw none of its changes after that (the
                # inbox kept listing the forgotten pause). Opened again, it follows as before.
                self._detach()
                self._db = self._attach()
                self._families_of_db()
                self._scrubs_seen = scrubs
            self._live().try_catch_up_with_primary()
        return self.offsets()

    # -- writing -------------------------------------------------------------------------------

    def batch(self) -> Batch:
        """A set of changes committed atomically with one write batch on leaving the ``with``."""
        self._live()
        if self.mode != "read-write":
            raise StoreError(f"the store at {self.path} is open {self.mode}; it cannot be written")
        return Batch(self._get_live, self._scan, self._write, self._get_many, feed=not self.bulk)

    def forget(self, thread_id: str) -> None:
        """Delete every fact of a thread in one batch (after its tombstones were written)."""
        with self.batch() as batch:
            batch.forget(thread_id)

    def scrub(self, deleted: Mapping[str, Collection[bytes]]) -> None:
        """Leave no copy of what a batch deleted in the store's files (a forgotten thread's):
        a delete only adds a marker, and the bytes stay in the write-ahead log and the older
        table files until RocksDB compacts them -- weeks on a quiet store. So flush every
        column family (the write-ahead log holding the text becomes obsolete and is deleted),
        then compact the deleted keys' ranges down to the last level, where the deletes and
        what they delete are dropped together. Rare (a forget) and bounded by those ranges."""
        self._live()
        for family in self._cf.values():
            family.flush(wait=True)
        options = rocksdict.CompactOptions()
        options.set_bottommost_level_compaction(rocksdict.BottommostLevelCompaction.force())
        for name, keys in deleted.items():
            if keys:
                self._cf[name].compact_range(min(keys), max(keys) + b"\x00", options)
        # Said to the secondaries following this store (the inbox follows a projection): each
        # opens it again at its next catch-up.
        count = _scrubs(self.path) + 1
        written = self.path / f"{SCRUBS_FILE}.tmp"
        written.write_text(str(count))
        os.replace(written, self.path / SCRUBS_FILE)

    # -- reading -------------------------------------------------------------------------------

    def forgotten(self, thread_id: str, now_ms: int) -> bool:
        """Whether the thread was forgotten (``turnlog forget``) and not paused again since,
        within its marker's bound (:mod:`turnlog.projections.forgotten`)."""
        raw = self._get(layout.META, forgotten.marker_key(thread_id))
        return forgotten.alive(raw, now_ms) and self.latest(thread_id) is None

    def latest(self, thread_id: str) -> bytes | None:
        """The thread's newest checkpoint in the log's order (the last written), if any."""
        prefix = layout.thread_prefix(thread_id)
        options = rocksdict.ReadOptions()
        options.set_iterate_upper_bound(layout.prefix_end(prefix))
        iterator = self._family(layout.CHECKPOINTS).iter(options)
        try:
            iterator.seek_to_last()
            if iterator.valid() and bytes(iterator.key()).startswith(prefix):
                return bytes(iterator.value())
            return None
        finally:
            del iterator  # a live iterator keeps RocksDB (and its LOCK) open

    def token_of_checkpoint(self, thread_id: str, checkpoint_id: str) -> str | None:
        """The token id of the pause recorded now for the thread's checkpoint, if any: a newer
        pause of the same checkpoint replaces the older one and its token."""
        raw = self._get(layout.PAUSES, layout.pause_key(thread_id, checkpoint_id))
        if raw is None:
            return None
        token_id = layout.load(raw)["token_id"]
        return token_id if isinstance(token_id, str) else None

    def list_checkpoints(self, thread_id: str) -> list[bytes]:
        """The thread's checkpoints in the order the log holds them, oldest first."""
        prefix = layout.thread_prefix(thread_id)
        return [
            value for _, value in self._scan(layout.CHECKPOINTS, prefix, layout.prefix_end(prefix))
        ]

    def pause_for_token(self, token_id: str) -> PauseInfo | None:
        raw = self._get(layout.TOKENS, token_id.encode())
        if raw is None:
            return None
        info = layout.load(raw)
        key = layout.checkpoint_key(info["thread_id"], info["order"], info["checkpoint_id"])
        value = self._get(layout.CHECKPOINTS, key)
        if value is None:
            return None
        return PauseInfo(
            thread_id=info["thread_id"],
            checkpoint_id=info["checkpoint_id"],
            order=info["order"],
            token_id=token_id,
            expires_at_ms=info["expires_at"],
            value=value,
        )

    def ledger(self, token_id: str) -> LedgerEntry | None:
        raw = self._get(layout.LEDGER, token_id.encode())
        if raw is None:
            return None
        return _ledger_entry(layout.load(raw))

    def pause_values(self, token_ids: Sequence[str]) -> list[StoredPause | None]:
        """The stored pause record behind each token (``None``: none), with the messages hint
        its skim left, read with two RocksDB multi-gets for the lot: the resume worker asks once
        per fetched batch of answers (:func:`turnlog.wire.skim.read_stored` reads them)."""
        if not token_ids:
            return []
        raws = self._family(layout.TOKENS).get([t.encode() for t in token_ids])
        keys: list[bytes] = []
        where: list[tuple[int, tuple[int, ...] | None]] = []
        for i, raw in enumerate(raws):
            if raw is not None:
                entry = bytes(raw)
                info = layout.load(entry)
                keys.append(
                    layout.checkpoint_key(info["thread_id"], info["order"], info["checkpoint_id"])
                )
                where.append((i, layout.token_hint(entry)))
        found: list[StoredPause | None] = [None] * len(token_ids)
        if keys:
            values = self._family(layout.CHECKPOINTS).get(keys)
            for (i, hint), value in zip(where, values, strict=True):
                found[i] = None if value is None else StoredPause(bytes(value), hint)
        return found

    def ledgers(self, token_ids: Sequence[str]) -> list[LedgerEntry | None]:
        """:meth:`ledger` of each token, read with one RocksDB multi-get."""
        if not token_ids:
            return []
        found: list[LedgerEntry | None] = []
        for raw in self._family(layout.LEDGER).get([t.encode() for t in token_ids]):
            if raw is None:
                found.append(None)
                continue
            found.append(_ledger_entry(layout.load(bytes(raw))))
        return found

    def unfinished_claims(self) -> list[tuple[str, LedgerEntry]]:
        """The resumed turns whose continuation is claimed and not said done, as (token id,
        ledger row), oldest claim first: running now, or left by a holder that died. The whole
        ledger is read -- retirement bounds it to the tokens in their window and a margin --
        and a row without an open claim is skipped before it is decoded."""
        found = []
        for key, raw in self._family(layout.LEDGER).items():
            if b'"state":"claimed"' in raw:
                entry = _ledger_entry(layout.load(bytes(raw)))
                if entry.claim_state == "claimed":
                    found.append((bytes(key).decode(), entry))
        found.sort(key=lambda each: (each[1].claimed_at_ms, each[0]))
        return found

    def is_spent(self, token_id: str) -> bool:
        return self._get(layout.LEDGER, token_id.encode()) is not None

    def unfinalized(self, written_by_ms: int | None = None) -> list[UnfinalizedPause]:
        """The pauses written unfinalized and not finalized since -- those written at or before
        ``written_by_ms``, if given -- soonest deadline first, each saying whether its token is
        spent. The index holds only the writes of the crash window not closed yet: a scan of it
        is short, and never a walk over every pause."""
        found = []
        low = b""
        while True:
            page = self._scan(layout.UNFINALIZED, low, None, _PAGE)
            ledger = self._get_many(layout.LEDGER, [key[8:] for key, _ in page])
            for (key, raw), spent in zip(page, ledger, strict=True):
                entry = layout.load(raw)
                if written_by_ms is not None and entry["paused_at"] > written_by_ms:
                    continue
                expires_at, token_id = layout.split_deadline_key(key)
                found.append(
                    UnfinalizedPause(
                        token_id, entry["thread_id"], entry["paused_at"], expires_at,
                        spent is not None,
                    )
                )  # fmt: skip
            if len(page) < _PAGE:
                return found
            low = page[-1][0] + b"\x00"

    def pending(self, now_ms: int) -> Iterator[OpenPause]:
        """Unspent pauses whose window is still open at ``now_ms``, soonest deadline first."""
        return self._deadlines(layout.u64(now_ms + 1, "now_ms + 1"), None)

    def expired(self, now_ms: int, since_ms: int = 0) -> Iterator[OpenPause]:
        """Unspent pauses whose window has closed at ``now_ms`` (``since_ms`` <= deadline <=
        now): the owner expires these. A bounded scan of the deadline index, never of every
        pause; ``since_ms`` is the ledger's retirement line (``contracts/ledger.py``)."""
        return self._deadlines(
            layout.u64(since_ms, "since_ms"), layout.u64(now_ms + 1, "now_ms + 1")
        )

    def pending_count(self, now_ms: int) -> int:
        """How many pauses wait at ``now_ms`` (unspent, window open): what :meth:`pending`
        would yield, from the waiting counts -- the hours after now's, the minutes after now's
        in its hour, and the keys of now's minute -- never a walk over every pause."""
        hour, minute = now_ms // layout.COUNT_HOUR, now_ms // layout.COUNT_MINUTE
        per_hour = layout.COUNT_HOUR // layout.COUNT_MINUTE
        total = 0
        for _, value in self._scan(layout.META, *layout.hour_count_range(hour + 1)):
            total += int.from_bytes(value, "big")
        ends = layout.minute_count_range(minute + 1, (hour + 1) * per_hour)
        for _, value in self._scan(layout.META, *ends):
            total += int.from_bytes(value, "big")
        options = rocksdict.ReadOptions()
        options.set_iterate_upper_bound(
            layout.WAIT_ALL + layout.u64((minute + 1) * layout.COUNT_MINUTE, "minute end")
        )
        low = layout.WAIT_ALL + layout.u64(now_ms + 1, "now_ms + 1")
        for _ in self._family(layout.WAITING).keys(from_key=low, read_opt=options):
            total += 1
        return total

    def pending_page(
        self,
        now_ms: int,
        *,
        scope: str | Collection[str] | None = None,
        interaction: str | None = None,
        older_than_ms: int | None = None,
        session: str | None = None,
        run: str | None = None,
        call: str | None = None,
        where: Callable[[WaitingPause], bool] | None = None,
        after: str | None = None,
        limit: int = 50,
        max_scan: int | None = None,
    ) -> PendingPage:
        """One page of the pauses waiting at ``now_ms`` (unspent, window open), soonest
        deadline first, read from the waiting index.

        ``scope``: one scope, or any of several (a page of a viewer's scopes); ``interaction``;
        ``older_than_ms``: made at least that long before ``now_ms``; ``session``, ``run``,
        ``call``: the other axes; ``where``: any other test of a pause. A page of one scope
        (or of several) or of one interaction seeks to it; the other filters test the index's
        facts, never a pause's record, and are applied before the page is cut: a page ends
        full or at the index's end, so a filter matching one pause in a million finds it on
        the first page (issue 41: a page cut after a fixed number of entries came back empty,
        with a cursor, while the match waited further on). Session, run, call and an
        interaction not sought to are tested on the entry's bytes before it is decoded.
        ``after`` is a page's :attr:`PendingPage.next`. ``max_scan`` bounds the entries one
        page reads (a page with ``where`` reads at most :data:`MAX_SCAN`): one that matched
        little then comes back short, with a cursor to go on from.
        """
        if limit < 1:
            raise ValueError(f"a page holds at least one pause, got limit {limit}")
        if max_scan is None and where is not None:
            max_scan = MAX_SCAN
        # The axes' exact facts as the index's own encoder writes them: an entry without
        # these bytes cannot match, and one with them is decoded and tested in full.
        tested = (("session", session), ("run", run), ("call", call))
        needles = [layout.dump({name: value})[1:-1] for name, value in tested if value is not None]
        if interaction and scope is not None:  # sought by scope, then tested by interaction
            needles.append(layout.dump({"interaction": interaction})[1:-1])
        low = layout.u64(now_ms + 1, "now_ms + 1")
        if after is not None:
            low = max(low, _uncursor(after) + b"\x00")
        if scope is not None:
            scopes = [scope] if isinstance(scope, str) else sorted(set(scope))
            prefixes = [layout.facet_prefix(layout.WAIT_SCOPE, one) for one in scopes if one]
        elif interaction:
            prefixes = [layout.facet_prefix(layout.WAIT_INTERACTION, interaction)]
        else:
            prefixes = [layout.WAIT_ALL]
        selective = needles or older_than_ms is not None or where is not None
        size = _PAGE if selective else min(_PAGE, limit + 1)
        sources = [self._waiting(prefix, low, size) for prefix in prefixes]
        found: list[WaitingPause] = []
        for scanned, (key, raw) in enumerate(heapq.merge(*sources), 1):
            if (
                raw is not None
                and all(needle in raw for needle in needles)
                and (older_than_ms is None or _paused_at(raw) <= now_ms - older_than_ms)
            ):
                pause = _waiting_pause(key, raw)
                if (
                    (scope is None or pause.scope in _scopes_of(scope))
                    and (not interaction or pause.interaction == interaction)
                    and (older_than_ms is None or pause.paused_at_ms <= now_ms - older_than_ms)
                    and (session is None or pause.session == session)
                    and (run is None or pause.run == run)
                    and (call is None or pause.call == call)
                    and (where is None or where(pause))
                ):
                    found.append(pause)
                    if len(found) > limit:
                        return PendingPage(found[:limit], found[limit - 1].cursor)
            if max_scan is not None and scanned >= max_scan:
                return PendingPage(found, _cursor(key))
        return PendingPage(found, None)

    def changes_next(self) -> int:
        """The number the next change of the feed will have."""
        raw = self._get(layout.META, layout.CHANGES_NEXT)
        return 0 if raw is None else int.from_bytes(raw, "big")

    def changes(self, since: int) -> list[Change] | None:
        """The changes numbered ``since`` on, oldest first; ``None`` when some of them are no
        longer kept (or ``since`` is past the feed's end: the store was rebuilt), so the reader
        reads the pages again instead."""
        end = self.changes_next()
        if since > end or since < end - layout.CHANGES_KEPT:
            return None
        found = []
        for key, raw in self._scan(layout.META, *layout.change_range(since)):
            entry = layout.load(raw)
            found.append(
                Change(
                    layout.change_number(key),
                    entry["kind"],
                    entry["token_id"],
                    entry["thread_id"],
                    entry["scope"],
                    entry["interaction"],
                )
            )
        return found

    def waiting_between(self, after_ms: int, until_ms: int) -> list[WaitingPause]:
        """The pauses still in the waiting index whose deadline is in (``after_ms``,
        ``until_ms``]: those whose window closed in that time, however many others wait."""
        low = layout.WAIT_ALL + layout.u64(after_ms + 1, "after_ms + 1")
        high = layout.WAIT_ALL + layout.u64(until_ms + 1, "until_ms + 1")
        if high <= low:
            return []
        return [
            _waiting_pause(key[len(layout.WAIT_ALL) :], value)
            for key, value in self._scan(layout.WAITING, low, high)
        ]

    def waiting_of_thread(self, thread_id: str, now_ms: int) -> list[WaitingPause]:
        """The pauses of one thread waiting at ``now_ms``, soonest deadline first: read through
        the thread's own keys, never the whole waiting index."""
        try:
            prefix = layout.thread_prefix(thread_id)
        except ValueError:  # no thread of that id can exist
            return []
        keys = []
        for _, raw in self._scan(layout.PAUSES, prefix, layout.prefix_end(prefix)):
            locator = layout.load(raw)
            token_id, expires_at = locator["token_id"], locator["expires_at"]
            if token_id is not None and expires_at is not None and expires_at > now_ms:
                # Every call of a pause of several: the first may be held while others wait.
                for token in (token_id, *locator.get("group", ())):
                    keys.append(layout.deadline_key(expires_at, token))
        keys.sort()
        values = self._family(layout.WAITING).get([layout.WAIT_ALL + k for k in keys])
        return [
            _waiting_pause(key, bytes(value))
            for key, value in zip(keys, values, strict=True)
            if value is not None
        ]

    def _waiting(
        self, prefix: bytes, low: bytes, size: int
    ) -> Iterator[tuple[bytes, bytes | None]]:
        """The waiting index under ``prefix`` from deadline key ``low`` on, as (deadline key,
        the pause's facts or ``None``), in pages of ``size``; a facet's facts are read from
        the entries of every pause with one multi-get a page."""
        primary = prefix == layout.WAIT_ALL
        high = layout.prefix_end(prefix)
        at = prefix + low
        while True:
            page = self._scan(layout.WAITING, at, high, size)
            keys = [key[len(prefix) :] for key, _ in page]
            if primary:
                yield from zip(keys, [value for _, value in page], strict=True)
            elif keys:
                values = self._family(layout.WAITING).get([layout.WAIT_ALL + k for k in keys])
                for key, value in zip(keys, values, strict=True):
                    yield key, None if value is None else bytes(value)
            if len(page) < size:
                return
            at = page[-1][0] + b"\x00"

    def retirable(self, before_ms: int) -> Iterator[OpenPause]:
        """Spent pauses whose deadline is before ``before_ms``, soonest first: the ledger rows
        their owner retires. A bounded scan of the spent index, never of the ledger."""
        return self._deadlines(b"", layout.u64(before_ms, "before_ms"), layout.SPENT)

    def offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to apply of every topic-partition this store has applied."""
        low, high = layout.offset_range()
        return {
            layout.split_offset_key(key): int.from_bytes(value, "big")
            for key, value in self._scan(layout.META, low, high)
        }

    def offset(self, topic: str, partition: int) -> int | None:
        raw = self._get(layout.META, layout.offset_key(topic, partition))
        return None if raw is None else int.from_bytes(raw, "big")

    def verify_offsets(self, end_offsets: Mapping[tuple[str, int], int]) -> None:
        """Refuse a store that is ahead of the log: its partition was recreated or truncated, and
        applying from the stored offset would silently skip records."""
        ahead = {
            tp: (stored, end_offsets[tp])
            for tp, stored in self.offsets().items()
            if tp in end_offsets and stored > end_offsets[tp]
        }
        if ahead:
            detail = ", ".join(
                f"{t}[{p}] store {s} > log end {e}" for (t, p), (s, e) in ahead.items()
            )
            raise StoreError(f"the store at {self.path} is ahead of the log ({detail}); rebuild it")

    def digest(self) -> str:
        """SHA-256 of all user data (keys and values, in order), offsets and metadata excluded,
        and so are the messages hints on token entries: a cache of the resume worker's (a
        worker's store and one rebuilt from the same log have the same digest)."""
        digest = hashlib.sha256()
        update, length = digest.update, _LENGTH.pack
        for family in layout.USER_FAMILIES:
            update(_frame(family.encode()))
            hinted = family == layout.TOKENS
            # The same bytes as _frame(key) + _frame(value), without copying the value.
            for key, value in self._family(family).items():
                if hinted:
                    value = value.partition(b"\n")[0]
                update(length(len(key)) + key + length(len(value)))
                update(value)
        return digest.hexdigest()

    # -- internals -----------------------------------------------------------------------------

    def _live(self) -> Any:
        if self._db is None:
            raise StoreError(f"the store at {self.path} is closed")
        return self._db

    def _family(self, name: str) -> Any:
        self._live()
        return self._cf[name]

    def _get_live(self, family: str, key: bytes) -> bytes | None:
        """:meth:`_get` for a batch (the store is live): most of a replay's store calls."""
        return self._cf[family].get(key)  # type: ignore[no-any-return]

    def _get_many(self, family: str, keys: list[bytes]) -> list[bytes | None]:
        """:meth:`_get_live` of many keys: one RocksDB multi-get."""
        return [None if v is None else bytes(v) for v in self._cf[family].get(keys)]

    def _get(self, family: str, key: bytes) -> bytes | None:
        value = self._family(family).get(key)
        return None if value is None else bytes(value)

    def _scan(
        self, family: str, low: bytes, high: bytes | None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        # Seek to ``low`` and bound above: rocksdict 0.3.29's ReadOptions.set_iterate_lower_bound
        # sets the *upper* bound, so a lower bound is never passed to it.
        options = rocksdict.ReadOptions()
        if high is not None:
            options.set_iterate_upper_bound(high)
        items = self._family(family).items(from_key=low, read_opt=options)
        return [(bytes(k), bytes(v)) for k, v in itertools.islice(items, limit)]

    def _write(self, changes: Mapping[str, Mapping[bytes, bytes | None]]) -> None:
        db = self._live()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for family, pending in changes.items():
            handle = self._handles[family]
            for key, value in pending.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        if not batch.is_empty():
            # One WriteBatch: data and offsets land together or not at all.
            db.write(batch, self._write_options)

    def _deadlines(
        self, low: bytes, high: bytes | None, family: str = layout.DEADLINES
    ) -> Iterator[OpenPause]:
        # Paged, so an abandoned iteration holds no RocksDB iterator (which would pin the LOCK).
        while True:
            page = self._scan(family, low, high, _PAGE)
            for key, thread in page:
                expires_at, token_id = layout.split_deadline_key(key)
                yield OpenPause(token_id, thread.decode(), expires_at)
            if len(page) < _PAGE:
                return
            low = page[-1][0] + b"\x00"


def _scopes_of(scope: str | Collection[str]) -> Collection[str]:
    return (scope,) if isinstance(scope, str) else scope


_PAUSED_AT = b'"paused_at":'


def _paused_at(raw: bytes) -> int:
    """A waiting entry's ``paused_at`` read off its bytes (an integer between its key and the
    next comma: the index's encoder writes no spaces), without decoding the entry; an entry
    it cannot read so is let through, to be decoded and tested in full."""
    start = raw.find(_PAUSED_AT)
    if start < 0:
        return -1
    start += len(_PAUSED_AT)
    try:
        return int(raw[start : raw.index(b",", start)])
    except ValueError:
        return -1


def _waiting_pause(key: bytes, raw: bytes) -> WaitingPause:
    expires_at, token_id = layout.split_deadline_key(key)
    facts = layout.load(raw)
    return WaitingPause(
        token_id=token_id,
        thread_id=facts["thread_id"],
        checkpoint_id=facts["checkpoint_id"],
        expires_at_ms=expires_at,
        interaction=facts["interaction"],
        scope=facts["scope"],
        session=facts["session"],
        run=facts["run"],
        call=facts["call"],
        paused_at_ms=facts["paused_at"],
        created_at_ms=facts["created_at"],
    )


#: A cursor's first byte: which layout of cursor it is (a deadline key follows).
_CURSOR = b"\x01"


def _cursor(key: bytes) -> str:
    return base64.urlsafe_b64encode(_CURSOR + key).decode().rstrip("=")


def page_bound(cursor: str) -> tuple[int, str]:
    """The deadline (ms) and token id a page cursor names: a page that ends at it holds the
    pauses up to it, in that order (``ValueError`` naming why for anything but a cursor)."""
    return layout.split_deadline_key(_uncursor(cursor))


def _uncursor(cursor: str) -> bytes:
    """The deadline key a cursor names; ``ValueError`` naming why for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = raw[1:]
        if raw[:1] != _CURSOR or len(key) < 9:
            raise ValueError("not one of ours")
        key[8:].decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(
            f"not a page cursor: {cursor[:40]!r} (a cursor is what a page printed as its next)"
        ) from None
    return key


_LENGTH = struct.Struct(">I")
_VERB = re.compile(r"[a-z][a-z-]*")
#: The claims of the stores this process has open read-write: a record with this pid and
#: another claim was left by an earlier process that had the same pid (pid 1 in a container).
_MINE: set[str] = set()


def _program() -> str:
    """This process as a person would name it -- ``turnlog worker``, ``gunicorn`` -- from its
    program and first plain word; never its other arguments, which can hold tokens."""
    argv = sys.argv or [""]
    first = Path(argv[0])
    name = first.parent.name if first.name == "__main__.py" else first.stem
    verb = next((word for word in argv[1:] if _VERB.fullmatch(word)), None)
    return " ".join(part for part in (name or "python", verb) if part)


def _record_owner(path: Path) -> str:
    """Write this open's owner record (whole or not at all: written aside, then renamed)."""
    claim = uuid.uuid4().hex
    since = utc_now().replace(microsecond=0).isoformat().replace("+00:00", "Z")
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "program": _program(),
        "since": since,
        "claim": claim,
    }
    aside = path / f"{OWNER_FILE}.{claim}"
    try:
        aside.write_text(json.dumps(record))
        os.replace(aside, path / OWNER_FILE)
    except OSError as exc:
        aside.unlink(missing_ok=True)
        raise StoreError(f"could not record the owner of the store at {path}: {exc}") from exc
    _MINE.add(claim)
    return claim


def _read_owner(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((path / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _forget_owner(path: Path, claim: str) -> None:
    _MINE.discard(claim)
    record = _read_owner(path)
    if record is not None and record.get("claim") == claim:
        (path / OWNER_FILE).unlink(missing_ok=True)


def _owner_of(path: Path) -> str | None:
    """Who the owner record names, when it can be the LOCK's holder: a record naming a
    process of this host that is gone was left by a crash, and is not believed."""
    record = _read_owner(path)
    if record is None or not isinstance(record.get("pid"), int):
        return None
    pid, host = record["pid"], str(record.get("host", "?"))
    if host == socket.gethostname():
        if pid == os.getpid():
            mine = record.get("claim") in _MINE
            return f"this process (pid {pid}), through another Store" if mine else None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, someone else's
    program = record.get("program") or "?"
    return f"pid {pid} on {host} since {record.get('since', '?')} ({program})"


def _bound_memory(options: Any, families: Collection[Any]) -> None:
    """One memtable budget and one block cache for the whole store, so its memory stays flat
    however much it holds (see ``MEMTABLE_BUDGET``)."""
    options.set_db_write_buffer_size(MEMTABLE_BUDGET)
    cache = rocksdict.Cache(BLOCK_CACHE)
    for each in (options, *families):
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(cache)
        each.set_block_based_table_factory(table)


def _families_of(path: Path) -> list[str]:
    try:
        return list(rocksdict.Rdict.list_cf(str(path), rocksdict.Options(raw_mode=True)))
    except Exception as exc:
        raise StoreError(
            f"could not read the column families of the store at {path}: {exc}"
        ) from exc


def _frame(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _ledger_entry(entry: dict[str, Any]) -> LedgerEntry:
    """A stored ledger row as its value (a row written before claims existed has none)."""
    claim = entry.get("claim")
    if not isinstance(claim, dict):
        return LedgerEntry(
            Outcome(entry["outcome"]),
            entry["answer_id"],
            entry.get("thread_id", ""),
            entry.get("response_json", ""),
        )
    return LedgerEntry(
        Outcome(entry["outcome"]),
        entry["answer_id"],
        entry.get("thread_id", ""),
        entry.get("response_json", ""),
        claim_id=str(claim.get("id", "")),
        claimant=str(claim.get("by", "")),
        claimed_at_ms=int(claim.get("at", 0)),
        claim_state=str(claim.get("state", "")),
    )
