"""One atomic change to the store, and the rules that keep its indexes true.

The indexes are a function of the content -- which pauses exist and which tokens the ledger holds
-- never of the order records arrived in: the pauses and consumptions partitions are applied
independently, and a rebuild replays them in another interleaving than the live run saw. A pause
is in the deadline index exactly while it exists and its token is not spent, and in the spent
index exactly while it exists and its token is spent, whichever came first. The waiting index
holds exactly the pauses of the deadline index again, with their facts, and the waiting counts
change with it: +1 when a pause enters, -1 when it leaves, so a replay of the same records (which
removes and puts back) leaves them as they were.

The indexes are kept in one module on purpose: each change touches several of them at once
(a pause enters the deadline, waiting and count indexes and the changes feed together), and
their rules are only checkable side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from turnlog.errors import DecodeError, StoreError
from turnlog.projections import forgotten
from turnlog.projections.layout import (
    ALL_FAMILIES,
    CHANGES_KEPT,
    CHANGES_NEXT,
    CHECKPOINTS,
    DEADLINES,
    LEDGER,
    META,
    OUTCOMES,
    PAUSES,
    SPENT,
    THREAD_TOKENS,
    TOKENS,
    UNFINALIZED,
    WAIT_ALL,
    WAIT_INTERACTION,
    WAIT_SCOPE,
    WAITING,
    PauseFacts,
    change_key,
    checkpoint_key,
    count_keys,
    deadline_key,
    dump_change,
    dump_facts,
    dump_ledger,
    dump_locator,
    dump_token,
    dump_unfinalized,
    facet_prefix,
    load,
    offset_key,
    pause_key,
    prefix_end,
    thread_prefix,
    thread_token_key,
    u64,
)
from turnlog.wire.skim import SkimmedPause, skim_pause

__all__ = ["Batch", "facts_of", "group_facts_of"]

_NO_FACTS = PauseFacts()


def facts_of(pause: SkimmedPause) -> PauseFacts:
    """The facts the waiting index keeps of a skimmed pause."""
    cp = pause.checkpoint
    return PauseFacts(
        interaction=pause.response_schema,
        scope=cp.scope_hash,
        session=cp.session_id,
        run=cp.run_id,
        call=cp.tool_call_id or cp.interrupt_id,
        paused_at_ms=int(pause.occurred_at.timestamp() * 1000),
        created_at_ms=int(cp.created_at.timestamp() * 1000),
    )


def group_facts_of(pause: SkimmedPause) -> dict[str, PauseFacts]:
    """Of a pause of several calls, each call's own facts by its token (its call id and its
    interaction; the axes and times are the pause's); empty for a pause of one call."""
    if not pause.group:
        return {}
    base = facts_of(pause)
    return {
        str(call["token_id"]): base._replace(
            call=str(call["tool_call_id"]) or str(call["interrupt_id"]),
            interaction=str(call["response_schema"]),
        )
        for call in pause.group
    }


def _facts_of_value(value: bytes | None, token_id: str | None = None) -> PauseFacts:
    """:func:`facts_of` of a stored pause record (of the call of ``token_id``, for a pause of
    several calls); none for bytes that are not one."""
    if value is None:
        return _NO_FACTS
    try:
        skimmed = skim_pause(value)
    except DecodeError:
        return _NO_FACTS
    if token_id is not None:
        own = group_facts_of(skimmed).get(token_id)
        if own is not None:
            return own
    return facts_of(skimmed)


Read = Callable[[str, bytes], bytes | None]
Scan = Callable[[str, bytes, bytes | None], list[tuple[bytes, bytes]]]
Write = Callable[[Mapping[str, Mapping[bytes, bytes | None]]], None]
ReadMany = Callable[[str, list[bytes]], list[bytes | None]]


class Batch:
    """Changes committed with one RocksDB write batch when the ``with`` block ends normally; an
    exception discards them all. Reads inside the batch see its own pending changes, so a pause
    and its consumption may come in either order, in one batch or across many. A method that
    refuses its input (``ValueError``) changes nothing, so a caller may skip that record and go on.
    """

    def __init__(
        self,
        read: Read,
        scan: Scan,
        write: Write,
        read_many: ReadMany | None = None,
        *,
        feed: bool = True,
    ) -> None:
        self._read = read
        self._scan = scan
        self._write = write
        self._read_many = read_many
        self._pending: dict[str, dict[bytes, bytes | None]] = {n: {} for n in ALL_FAMILIES}
        #: Stored values read ahead (:meth:`prefetch`); the pending changes still come first.
        self._ahead: dict[str, dict[bytes, bytes | None]] = {}
        #: The waiting counts' changes, added to the stored counts at the commit.
        self._counts: dict[bytes, int] = {}
        #: Per token whose waiting changed in this batch: [waited before, waits after, why it
        #: left, its thread, scope, interaction] -- the changes feed's entries, netted at the
        #: commit (a pause recorded again leaves and enters: no change). ``None``: no feed (a
        #: bulk load nobody follows).
        self._moved: dict[str, list[Any]] | None = {} if feed else None
        self._done = False

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self._done = True

    def put_pause(
        self,
        thread_id: str,
        checkpoint_id: str,
        order: int,
        value: bytes,
        *,
        token_id: str | None = None,
        expires_at_ms: int | None = None,
        messages_hint: Sequence[int] | None = None,
        group_tokens: Sequence[str] = (),
        facts: PauseFacts | None = None,
        group_facts: Mapping[str, PauseFacts] | None = None,
        unfinalized: bool = False,
    ) -> None:
        """Record a checkpoint (a pauses record), replacing one with the same checkpoint id.

        ``order`` places it among its thread's checkpoints: the offset of the pauses record (the
        log's order of writes). A write of the same pause again -- its finalization, a copy --
        keeps the place of the first; a new pause of the same checkpoint takes its own. An
        ``unfinalized`` pause (written in the crash window) is in the unfinalized index until a
        write of it that is not replaces it.

        With a token, the pause can be found by token and, until the token is spent, by deadline
        and in the waiting index, with ``facts`` (:func:`facts_of` its skim, which the caller
        has: without them, ``value`` is skimmed for them here); ``messages_hint`` (what the skim
        of ``value`` found) goes into the token's entry. A pause of several calls
        (``group_tokens``: the other calls' tokens, sharing the window; ``group_facts``: each
        call's own facts, by token) is found by each of its tokens, and each is in the deadline
        and waiting indexes until it is spent.
        """
        if (token_id is None) != (expires_at_ms is None):
            raise ValueError("a pause's token_id and expires_at_ms come together or not at all")
        if group_tokens and token_id is None:
            raise ValueError("a pause of several calls has a token for each")
        # Every check before the first change: a refused pause leaves the batch as it was.
        deadline = None if expires_at_ms is None else u64(expires_at_ms, "expires_at_ms")
        prefix = thread_prefix(thread_id)
        own = checkpoint_id.encode("utf-8")
        u64(order, "order")
        others = [t for t in dict.fromkeys(group_tokens) if t != token_id]
        before = self._delete_pause(thread_id, checkpoint_id, prefix + own)
        if before is not None and token_id is not None and before["token_id"] == token_id:
            order = before["order"]  # the same pause written again: its place is the first's
        checkpoint = prefix + u64(order, "order") + own
        pending = self._pending
        pending[CHECKPOINTS][checkpoint] = bytes(value)
        pending[PAUSES][prefix + own] = dump_locator(order, token_id, expires_at_ms, others)
        if token_id is None or expires_at_ms is None or deadline is None:
            return
        for each in (token_id, *others):
            token = each.encode()
            if (previous := self._get(TOKENS, token)) is not None:
                was = deadline_key(load(previous)["expires_at"], each)
                self._delete(DEADLINES, was)
                self._delete(SPENT, was)
                self._delete(UNFINALIZED, was)
                self._unwait(was, "gone")
            pending[TOKENS][token] = dump_token(
                thread_id, checkpoint_id, order, each, expires_at_ms, messages_hint
            )
            key = deadline + token
            if unfinalized:
                paused_at = (facts or _facts_of_value(value)).paused_at_ms
                pending[UNFINALIZED][key] = dump_unfinalized(thread_id, paused_at)
            if self._get(LEDGER, token) is None:
                pending[DEADLINES][key] = thread_id.encode()
                known = (group_facts or {}).get(each) or facts
                if known is None:
                    known = _facts_of_value(value, each)
                self._wait(key, thread_id, checkpoint_id, known)
            else:
                pending[SPENT][key] = thread_id.encode()

    def delete_pause(self, thread_id: str, checkpoint_id: str) -> int | None:
        """Apply a tombstone on the pauses topic: the checkpoint and its token indexes go.
        Returns the pause's deadline, if it had one here."""
        locator = self._delete_pause(thread_id, checkpoint_id, pause_key(thread_id, checkpoint_id))
        return None if locator is None else locator.get("expires_at")

    def _delete_pause(
        self, thread_id: str, checkpoint_id: str, key: bytes
    ) -> dict[str, Any] | None:
        """Delete the pause at ``key`` and its token indexes; its locator, if there was one."""
        raw = self._get(PAUSES, key)
        if raw is None:
            return None
        locator = load(raw)
        self._delete(PAUSES, key)
        self._delete(CHECKPOINTS, checkpoint_key(thread_id, locator["order"], checkpoint_id))
        if locator["token_id"] is None:
            return locator
        for token_id in (locator["token_id"], *locator.get("group", ())):
            info = self._get(TOKENS, token_id.encode())
            owner = None if info is None else load(info)
            # A token id re-used by a later pause belongs to that pause now: leave it alone.
            if owner and (owner["thread_id"], owner["checkpoint_id"]) == (
                thread_id,
                checkpoint_id,
            ):
                was = deadline_key(locator["expires_at"], token_id)
                self._delete(TOKENS, token_id.encode())
                self._delete(DEADLINES, was)
                self._delete(SPENT, was)
                self._delete(UNFINALIZED, was)
                self._unwait(was, "gone")
        return locator

    def put_consumptions(
        self, spent: Iterable[tuple[str, str, str, str, str, tuple[str, str, int, str] | None]]
    ) -> None:
        """:meth:`put_consumption` of each ``(thread_id, token_id, outcome, answer_id,
        response_json, claim)``, with the store's ledger and token entries they read fetched in
        one multi-get each."""
        spent = list(spent)
        tokens = [item[1].encode() for item in spent]
        self.prefetch(LEDGER, tokens)
        self.prefetch(TOKENS, tokens)
        waiting = []
        for token in tokens:
            if (info := self._get(TOKENS, token)) is not None:
                waiting.append(WAIT_ALL + deadline_key(load(info)["expires_at"], token.decode()))
        self.prefetch(WAITING, waiting)
        for thread_id, token_id, outcome, answer_id, response_json, claim in spent:
            self.put_consumption(thread_id, token_id, outcome, answer_id, response_json, claim)

    def prefetch(self, family: str, keys: list[bytes]) -> None:
        """Read the stored values of ``keys`` now, in one go, for the reads this batch makes
        next (without a multi-read, the reads stay one by one)."""
        if self._read_many is None or not keys:
            return
        ahead = self._ahead.setdefault(family, {})
        wanted = [key for key in dict.fromkeys(keys) if key not in ahead]
        if wanted:
            ahead.update(zip(wanted, self._read_many(family, wanted), strict=True))

    def put_consumption(
        self,
        thread_id: str,
        token_id: str,
        outcome: str,
        answer_id: str,
        response_json: str = "",
        claim: tuple[str, str, int, str] | None = None,
    ) -> None:
        """Record the one final record of a token: it is spent and leaves the deadline index
        (a held answer's ``response_json`` is kept on its row, a resumed turn's ``claim``
        ``(claim_id, claimant, claimed_at_ms, state)`` too)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"a consumption outcome is one of {sorted(OUTCOMES)}, got {outcome!r}")
        by_thread = thread_token_key(thread_id, token_id)  # validates before anything changes
        token = token_id.encode()
        if (previous := self._get(LEDGER, token)) is not None:
            self._delete(THREAD_TOKENS, thread_token_key(load(previous)["thread_id"], token_id))
        self._put(LEDGER, token, dump_ledger(outcome, answer_id, thread_id, response_json, claim))
        self._put(THREAD_TOKENS, by_thread, b"")
        if (info := self._get(TOKENS, token)) is not None:
            pause = load(info)
            key = deadline_key(pause["expires_at"], token_id)
            self._delete(DEADLINES, key)
            self._unwait(key, "answered" if outcome in ("resumed", "held") else "expired")
            self._put(SPENT, key, pause["thread_id"].encode())

    def delete_consumption(self, thread_id: str, token_id: str) -> None:
        """Apply a tombstone on the consumptions topic; a pause still present is open again
        (in the deadline index: the expiry sweep looks only above the retirement line, so a
        retired row's pause is not expired a second time)."""
        by_thread = thread_token_key(thread_id, token_id)
        token = token_id.encode()
        raw = self._get(LEDGER, token)
        if raw is None or load(raw)["thread_id"] != thread_id:
            return
        self._delete(LEDGER, token)
        self._delete(THREAD_TOKENS, by_thread)
        if (info := self._get(TOKENS, token)) is not None:
            pause = load(info)
            key = deadline_key(pause["expires_at"], token_id)
            self._delete(SPENT, key)
            self._put(DEADLINES, key, pause["thread_id"].encode())
            stored = self._get(
                CHECKPOINTS,
                checkpoint_key(pause["thread_id"], pause["order"], pause["checkpoint_id"]),
            )
            facts = _facts_of_value(stored, token_id)
            self._wait(key, pause["thread_id"], pause["checkpoint_id"], facts)

    def forget(self, thread_id: str) -> int | None:
        """Delete every checkpoint, token index and ledger entry of the thread; returns the
        latest deadline of its pauses, if any had one."""
        prefix = thread_prefix(thread_id)
        latest = None
        for key in self._keys(PAUSES, prefix):
            deadline = self.delete_pause(thread_id, key[len(prefix) :].decode())
            if deadline is not None:
                latest = deadline if latest is None else max(latest, deadline)
        for key in self._keys(THREAD_TOKENS, prefix):
            self.delete_consumption(thread_id, key[len(prefix) :].decode())
        for key in self._keys(CHECKPOINTS, prefix):
            self._delete(CHECKPOINTS, key)
        return latest

    def holds_thread(self, thread_id: str) -> bool:
        """Whether any checkpoint of the thread is left."""
        return bool(self._keys(PAUSES, thread_prefix(thread_id)))

    def mark_forgotten(self, thread_id: str, forgotten_at_ms: int, deadline_ms: int | None) -> None:
        """Remember that the thread was forgotten (:mod:`turnlog.projections.forgotten`), and
        drop the markers past their bound."""
        key = forgotten.marker_key(thread_id)
        until = forgotten.until(forgotten_at_ms, deadline_ms, self._get(META, key))
        for old, raw in self._scan(META, *forgotten.marker_range()):
            if old != key and not forgotten.alive(raw, forgotten_at_ms):
                self._delete(META, old)
        self._put(META, key, u64(until, "a forgotten thread's bound"))

    def deleted(self) -> dict[str, list[bytes]]:
        """The keys this batch deletes, per column family (what a scrub compacts away)."""
        return {
            family: [key for key, value in changes.items() if value is None]
            for family, changes in self._pending.items()
            if any(value is None for value in changes.values())
        }

    def set_offset(self, topic: str, partition: int, next_offset: int) -> None:
        """The next offset to apply of ``topic[partition]``, written with the data it produced."""
        self._put(META, offset_key(topic, partition), u64(next_offset, "next_offset"))

    def commit(self) -> None:
        if self._done:
            raise StoreError("a batch is committed or discarded once")
        self._done = True
        meta = self._pending[META]
        for key, change in self._counts.items():
            if change:
                raw = self._get(META, key)
                count = change + (0 if raw is None else int.from_bytes(raw, "big"))
                meta[key] = u64(count, "a waiting count") if count > 0 else None
        if self._moved:
            self._feed(meta)
        self._write(self._pending)

    def _feed(self, meta: dict[bytes, bytes | None]) -> None:
        """The netted changes of this batch, numbered on from the feed's next number; as many
        of the oldest go as come, so the feed keeps its last :data:`CHANGES_KEPT`."""
        assert self._moved is not None
        raw = self._get(META, CHANGES_NEXT)
        number = 0 if raw is None else int.from_bytes(raw, "big")
        for token_id, (before, after, why, thread, scope, interaction) in self._moved.items():
            if before == after:
                continue
            kind = "added" if after else why
            meta[change_key(number)] = dump_change(kind, token_id, thread, scope, interaction)
            if number >= CHANGES_KEPT:
                meta[change_key(number - CHANGES_KEPT)] = None
            number += 1
        meta[CHANGES_NEXT] = u64(number, "change number")

    def _wait(self, key: bytes, thread_id: str, checkpoint_id: str, facts: PauseFacts) -> None:
        """The pause with deadline key ``key`` enters the waiting index (it is not in it)."""
        self._put(WAITING, WAIT_ALL + key, dump_facts(thread_id, checkpoint_id, facts))
        if facts.scope:
            self._put(WAITING, facet_prefix(WAIT_SCOPE, facts.scope) + key, b"")
        if facts.interaction:
            self._put(WAITING, facet_prefix(WAIT_INTERACTION, facts.interaction) + key, b"")
        self._count(key, 1)
        if self._moved is not None:
            token_id = key[8:].decode()
            moved = self._moved.get(token_id)
            if moved is None:
                self._moved[token_id] = [False, True, "", thread_id, facts.scope, facts.interaction]
            else:
                moved[1] = True

    def _unwait(self, key: bytes, why: str) -> None:
        """The pause with deadline key ``key`` leaves the waiting index, if it is in it;
        ``why`` is what the changes feed says of it: answered, expired or gone."""
        primary = WAIT_ALL + key
        raw = self._get(WAITING, primary)
        if raw is None:
            return
        facts = load(raw)
        self._delete(WAITING, primary)
        if facts["scope"]:
            self._delete(WAITING, facet_prefix(WAIT_SCOPE, facts["scope"]) + key)
        if facts["interaction"]:
            self._delete(WAITING, facet_prefix(WAIT_INTERACTION, facts["interaction"]) + key)
        self._count(key, -1)
        if self._moved is not None:
            token_id = key[8:].decode()
            moved = self._moved.get(token_id)
            if moved is None:
                thread, scope, interaction = (
                    facts["thread_id"],
                    facts["scope"],
                    facts["interaction"],
                )
                self._moved[token_id] = [True, False, why, thread, scope, interaction]
            else:
                moved[1], moved[2] = False, why

    def _count(self, key: bytes, change: int) -> None:
        for count in count_keys(int.from_bytes(key[:8], "big")):
            self._counts[count] = self._counts.get(count, 0) + change

    def _get(self, family: str, key: bytes) -> bytes | None:
        changes = self._pending[family]
        if key in changes:
            return changes[key]
        ahead = self._ahead.get(family)
        if ahead is not None and key in ahead:
            return ahead[key]
        return self._read(family, key)

    def _put(self, family: str, key: bytes, value: bytes) -> None:
        self._pending[family][key] = value

    def _delete(self, family: str, key: bytes) -> None:
        self._pending[family][key] = None

    def _keys(self, family: str, prefix: bytes) -> list[bytes]:
        keys = {key for key, _ in self._scan(family, prefix, prefix_end(prefix))}
        for key, value in self._pending[family].items():
            if key.startswith(prefix):
                (keys.discard if value is None else keys.add)(key)
        return sorted(keys)
