"""What the inbox does, without HTTP: follow the projection, answer a pause, watch the outcome.

The store is the projection's, opened as a RocksDB secondary and caught up a few times a second,
so the inbox runs beside the projector that writes it. Each catch-up that changes what is
pending (a pause recorded, a token spent, a window closed) bumps :attr:`InboxService.version`,
which the pages' live streams wait on.

An answer goes through the library's own path: :meth:`Turnlog.answer` checks the token, the four
axes against it and the response against the interaction's schema before anything reaches Kafka.
The inbox holds no pause token (the store does not keep them); it signs the pause's token again
from the recorded pause -- the same claims, the same token id and window -- with the
deployment's signing key, on the server, so a token never reaches a browser. The axes are the
pause's own (:meth:`Axes.of_pause`), never anything a form says.

It is one module on purpose: a live stream's list (:class:`LiveList`) reads what the service
follows -- the store, its changes feed, the clock and the catch-up's version -- through the
small :class:`LiveSource` the service offers, and the two change together whenever what a
stream sends changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from turnlog.api import Turnlog
from turnlog.clock import utc_now
from turnlog.consumers.outcomes import AnswerOutcome
from turnlog.contracts.axes import Axes
from turnlog.contracts.refusals import RefusalReason, Refused
from turnlog.errors import StoreError
from turnlog.inbox.auth import Viewer
from turnlog.inbox.forms import NEXT_STEP, Form, decision_of, plain_words, response_for
from turnlog.inbox.views import ANSWERED, LIST_LIMIT, PENDING, PauseView, list_page, pause_view
from turnlog.projections.store import Change, Store, page_bound
from turnlog.tokens import PauseClaims, TokenIssuer

log = logging.getLogger(__name__)

#: How long a live stream may have been away and still go on from its last event (a page's
#: reconnect says where it was): the windows that closed meanwhile are read back that far.
RESUME_MS = 10 * 60 * 1000

_EVENT_ID = re.compile(r"([0-9]{1,19})\.([0-9]{1,19})")

#: How many answers' outcomes the inbox remembers for the pages that ask.
KEPT_ANSWERS = 10_000

#: Refusals after which the same pause may not be tried again from this inbox.
_FINAL = frozenset({RefusalReason.ALREADY_CONSUMED.value, RefusalReason.PAUSE_EXPIRED.value})


class Closed(Exception):
    """The pause cannot be answered (any more); the message is the page's plain words, and
    ``reason`` the refusal's rule when there is one (the page's status follows it)."""

    def __init__(self, words: str, reason: str = "") -> None:
        super().__init__(words)
        self.reason = reason


@dataclass
class _Sent:
    viewer: tuple[str, str, tuple[str, ...]]  # the sender's Viewer.identity, not a name
    token_id: str
    thread_id: str
    outcome: asyncio.Task[AnswerOutcome]
    decision: str = "answer"  # a key of NEXT_STEP: what the agent does once it is taken
    words: dict[str, str] = field(default_factory=dict)


class InboxService:
    """The inbox over one deployment: ``turnlog`` answers, ``projection`` is read."""

    def __init__(
        self,
        turnlog: Turnlog,
        projection: Path,
        *,
        refresh_seconds: float = 0.3,
        outcome_timeout: float = 120.0,
        projection_wait: float = 30.0,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.tl = turnlog
        s = turnlog.settings
        # Refused at once when the keyring only verifies: the inbox could never answer.
        self._issuer = TokenIssuer(turnlog.keyring, issuer=s.issuer, audience=s.audience)
        self._projection = projection
        self._refresh = refresh_seconds
        self._outcome_timeout = outcome_timeout
        self._projection_wait = projection_wait
        self.clock = clock
        self.version = 0
        self._changed = asyncio.Event()
        self._store: Store | None = None
        self._scratch: Path | None = None
        self._follow: asyncio.Task[None] | None = None
        self._seen: tuple[Any, ...] = ()
        self._sent: dict[str, _Sent] = {}
        self._by_token: dict[str, str] = {}
        self._changes: tuple[int, int, list[Change] | None] = (-1, -1, None)
        self.closing = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the projection, waiting up to ``projection_wait`` seconds for a projector that
        is starting beside the inbox to create it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._projection_wait
        while not (self._projection / "CURRENT").is_file():
            if loop.time() >= deadline:
                raise StoreError(
                    f"no projection at {self._projection}: run `turnlog project` beside the inbox"
                )
            await asyncio.sleep(0.2)
        self._scratch = Path(tempfile.mkdtemp(prefix="turnlog-inbox-"))
        self._store = Store.open_secondary(self._projection, self._scratch)
        self._catch_up()
        self._follow = asyncio.create_task(self._follow_store())

    async def stop(self) -> None:
        self.closing.set()
        self._changed.set()
        tasks: list[asyncio.Task[Any]] = [s.outcome for s in self._sent.values()]
        if self._follow is not None:
            tasks.append(self._follow)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._store is not None:
            self._store.close()
            self._store = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    async def __aenter__(self) -> InboxService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def store(self) -> Store:
        if self._store is None:
            raise StoreError("the inbox is not started")
        return self._store

    # -- following the projection -----------------------------------------------------------------

    def _catch_up(self) -> None:
        store = self.store
        offsets = store.catch_up()
        now_ms = int(self.clock().timestamp() * 1000)
        # Offsets say a fact arrived, the changes feed's end that the waiting pauses moved; a
        # window that closes writes no record, but the soonest deadline still open then
        # changes (one key read each, however many pauses wait).
        soonest = next(store.pending(now_ms), None)
        feed = store.changes_next()
        seen = (tuple(sorted(offsets.items())), feed, soonest.token_id if soonest else None)
        if seen != self._seen:
            self._seen = seen
            self.version += 1
            self._changed.set()
            self._changed = asyncio.Event()

    async def _follow_store(self) -> None:
        while not self.closing.is_set():
            try:
                self._catch_up()
            except Exception as exc:  # noqa: BLE001 - one failed catch-up must not end the inbox
                log.warning("inbox: could not catch up with the projection: %s", exc)
            await asyncio.sleep(self._refresh)

    async def changed(self, since: int, timeout: float) -> int:
        """The version once it differs from ``since`` (or after ``timeout``, or a :meth:`wake`)."""
        if self.version == since and not self.closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version

    def wake(self) -> None:
        """Wakes every :meth:`changed` waiter at once, the version unchanged: a sign-out, so
        each live stream checks its credential now rather than at its next heartbeat."""
        self._changed.set()
        self._changed = asyncio.Event()

    # -- reading ----------------------------------------------------------------------------------

    def pause(self, viewer: Viewer, token_id: str) -> PauseView | None:
        """The pause, if it exists and ``viewer`` may see it (else ``None``, the same for both)."""
        view = pause_view(self.store, token_id, self.clock())
        if view is None or not viewer.may_answer(view.scope_hash):
            return None
        return view

    def changes(self, since: int) -> list[Change] | None:
        """The projection's changes from ``since`` on (:meth:`Store.changes`), read once per
        version and position, however many live streams ask."""
        version, at, found = self._changes
        if version != self.version or at != since:
            found = self.store.changes(since)
            self._changes = (self.version, since, found)
        return found

    def answered_here(self, token_id: str) -> str | None:
        """The answer id this inbox sent for ``token_id`` and still stands by, if any."""
        return self._by_token.get(token_id)

    # -- answering --------------------------------------------------------------------------------

    async def answer(self, viewer: Viewer, token_id: str, form: Form) -> str:
        """Publish ``viewer``'s answer to the pause; the answer id. :class:`Closed` (plain
        words) when it cannot be answered, :class:`~turnlog.inbox.forms.FormProblem` when the
        form makes no answer, ``LookupError`` when the viewer may not see the pause."""
        view = self.pause(viewer, token_id)
        if view is None:
            raise LookupError(token_id)
        if token_id in self._by_token or view.status == ANSWERED:
            consumed = RefusalReason.ALREADY_CONSUMED
            raise Closed(plain_words(consumed), consumed.value)
        if view.status != PENDING or view.expires_at <= self.clock():
            raise Closed("expired: the pause's window closed before an answer")
        response = response_for(view, form)
        token = self._issuer.issue(PauseClaims.for_pause(view.recorded))
        self._by_token[token_id] = ""  # taken: a second submission waits for nobody
        try:
            axes = Axes.of_pause(view.recorded.checkpoint)  # the pause's own, never the form's
            sent = await self.tl.answer(
                token,
                response,
                scope_hash=axes.scope_hash or "",
                session_id=axes.session_id or "",
                run_id=axes.run_id or "",
                call_id=axes.call_id or "",
                # Who answers, as the sign-in verified them (never the display name): kept
                # on the answer record for the pause's trail.
                answered_by=viewer.subject,
                answered_by_issuer=viewer.issuer or None,
            )
        except Refused as exc:
            del self._by_token[token_id]
            reason = str(exc.refusal.reason)
            raise Closed(plain_words(reason), reason) from None
        except BaseException:
            del self._by_token[token_id]
            raise
        answer_id = sent.answer_id
        self._by_token[token_id] = answer_id
        task = asyncio.create_task(
            self.tl.outcome(answer_id, thread_id=view.thread_id, timeout=self._outcome_timeout)
        )
        sent_by = viewer.identity
        self._sent[answer_id] = _Sent(sent_by, token_id, view.thread_id, task, decision_of(form))
        self._forget_old()
        log.info("inbox: %s answered pause %s (answer %s)", viewer.name, token_id, answer_id)
        return answer_id

    def _forget_old(self) -> None:
        """Keep at most :data:`KEPT_ANSWERS` answers (oldest decided ones go first), so a
        long-running inbox does not grow without bound; a forgotten one reads as unknown."""
        decided = [a for a, sent in self._sent.items() if sent.outcome.done()]
        for answer_id in decided[: max(0, len(self._sent) - KEPT_ANSWERS)]:
            sent = self._sent.pop(answer_id)
            if self._by_token.get(sent.token_id) == answer_id:
                del self._by_token[sent.token_id]  # the projection says answered from here on

    def answered_by(self, viewer: Viewer, token_id: str) -> str | None:
        """Who answered ``token_id``, as its page says it: ``"you"`` when ``viewer`` sent the
        answer this inbox saw taken, else ``None`` (the page then says only that it was)."""
        sent = self._sent.get(self._by_token.get(token_id) or "")
        if sent is None or sent.viewer != viewer.identity or not sent.outcome.done():
            return None
        taken = not sent.outcome.cancelled() and sent.outcome.exception() is None
        return "you" if taken and sent.outcome.result().accepted else None

    async def outcome(self, viewer: Viewer, answer_id: str, wait: float) -> dict[str, str] | None:
        """``{"state": "resumed", "words": <what happens next>, "decision": ...}``, ``{"state":
        "rejected", "words": ..., "reason": ...}`` or ``{"state": "waiting"}`` after ``wait``
        seconds; ``None`` for an answer ``viewer`` did not send --
        by identity (issuer, subject, scopes): another tenant's ``alice`` is another viewer."""
        sent = self._sent.get(answer_id)
        if sent is None or sent.viewer != viewer.identity:
            return None
        if sent.words:
            return sent.words
        task = sent.outcome
        if not task.done():
            await asyncio.wait({task}, timeout=wait)
        if not task.done():
            return {"state": "waiting"}
        failed = None if task.cancelled() else task.exception()
        if task.cancelled() or failed is not None:
            why = "the inbox is stopping" if failed is None else str(failed)
            sent.words = {"state": "unknown", "words": f"no outcome: {why}"}
            return sent.words
        found = task.result()
        if found.held is not None:  # one call of several: the turn waits for the others
            calls = ", ".join(found.waiting) or "the others"
            words = f"sent: kept until the other calls of this turn are answered ({calls})"
            sent.words = {"state": "resumed", "words": words, "decision": sent.decision}
        elif found.accepted:
            words = NEXT_STEP[sent.decision]
            sent.words = {"state": "resumed", "words": words, "decision": sent.decision}
        else:
            reason = found.reason or ""
            sent.words = {"state": "rejected", "words": plain_words(reason), "reason": reason}
            if reason not in _FINAL and self._by_token.get(sent.token_id) == answer_id:
                del self._by_token[sent.token_id]  # another try may succeed
        return sent.words


class LiveSource(Protocol):
    """What a :class:`LiveList` reads: an :class:`InboxService` (or anything that reads a store
    the same way, as the bench's)."""

    clock: Callable[[], datetime]

    @property
    def store(self) -> Store: ...

    def changes(self, since: int) -> list[Change] | None: ...

    def pause(self, viewer: Viewer, token_id: str) -> PauseView | None: ...


class LiveList:
    """What one live stream follows: a page of the list (its filters, from its cursor) or one
    pause (``token``), for the viewer who opened it.

    :meth:`start` is the page's first snapshot (the ids it shows, as the list shows them); each
    :meth:`step` then reads the projection's changes feed from where the stream stands and says
    what moved for this viewer -- the ids added and removed that the viewer may answer and the
    filters take -- rather than the page again; a window that closed without a record yet (the
    owner has not expired it) is removed too. When the feed no longer holds where the stream
    stands (it fell behind, or the projection was rebuilt), :meth:`step` is a fresh snapshot.
    """

    def __init__(
        self,
        service: LiveSource,
        *,
        interaction: str = "",
        thread: str = "",
        after: str | None = None,
        token: str | None = None,
        limit: int = LIST_LIMIT,
    ) -> None:
        self.service = service
        self.interaction, self.thread = interaction, thread.strip().lower()
        self.after, self.token, self.limit = after, token, limit
        self._low = page_bound(after) if after else None  # ValueError: not a cursor
        self._high: tuple[int, str] | None = None
        self.feed = 0
        self.seen_ms = 0

    @property
    def event_id(self) -> str:
        """Where the stream stands: the feed's next number and the time its windows were read
        to (what a page's reconnect sends back as ``Last-Event-ID``)."""
        return f"{self.feed}.{self.seen_ms}"

    def _now_ms(self) -> int:
        return int(self.service.clock().timestamp() * 1000)

    def wire(self, said: tuple[str, dict[str, Any]]) -> str:
        """An event as the stream sends it: its name, where the stream stands, its data."""
        name, data = said
        return f"event: {name}\nid: {self.event_id}\ndata: {json.dumps(data)}\n\n"

    def start(self, viewer: Viewer, last_event_id: str = "") -> tuple[str, dict[str, Any]] | None:
        """The first event: the snapshot, or nothing when ``last_event_id`` (a reconnect) says
        where the stream stood and the feed still holds it -- the page has its rows."""
        found = _EVENT_ID.fullmatch(last_event_id)
        if found is not None:
            feed, seen = int(found[1]), int(found[2])
            recent = 0 <= self._now_ms() - seen <= RESUME_MS
            if recent and self.service.changes(feed) is not None:
                self._read_page(viewer)  # the page's bounds, as its snapshot had them
                self.feed, self.seen_ms = feed, seen
                return None
        return "snapshot", self.snapshot(viewer)

    def _read_page(self, viewer: Viewer) -> tuple[list[str], str | None]:
        service = self.service
        if self.token is not None:
            view = service.pause(viewer, self.token)
            return ([self.token] if view is not None and view.status == PENDING else []), None
        page = list_page(
            service.store,
            viewer,
            service.clock(),
            interaction=self.interaction or None,
            thread=self.thread or None,
            after=self.after,
            limit=self.limit,
        )
        self._high = page_bound(page.next) if page.next else None
        return [v.token_id for v in page.rows], page.next

    def snapshot(self, viewer: Viewer) -> dict[str, Any]:
        """The page as it stands: ``{"feed", "ids", "next"}`` (``next``: the cursor of the next
        page, ``None`` when none waits past it)."""
        self.feed = self.service.store.changes_next()  # first: a change meanwhile is replayed
        self.seen_ms = self._now_ms()
        ids, after = self._read_page(viewer)
        return {"feed": self.feed, "ids": sorted(ids), "next": after}

    def step(self, viewer: Viewer) -> tuple[str, dict[str, Any]] | None:
        """What moved since the last event: ``("diff", {"feed", "added", "removed"})``, ``None``
        when nothing did for this viewer, or ``("resync", <a snapshot>)`` when the feed no
        longer holds where the stream stood."""
        changes = self.service.changes(self.feed)
        if changes is None:
            return "resync", self.snapshot(viewer)
        now_ms = self._now_ms()
        added: dict[str, None] = {}
        removed: dict[str, None] = {}
        for change in changes:
            if not self._takes(viewer, change.token_id, change.scope, change.interaction,
                               change.thread_id):  # fmt: skip
                continue
            if change.kind == "added":
                if self._on_page(change.token_id, now_ms):
                    removed.pop(change.token_id, None)
                    added[change.token_id] = None
            elif change.token_id in added:
                del added[change.token_id]  # came and went in one batch: nothing to show
            else:
                removed[change.token_id] = None
        if now_ms > self.seen_ms:  # windows that closed with no record written yet
            for closed in self.service.store.waiting_between(self.seen_ms, now_ms):
                if self._takes(viewer, closed.token_id, closed.scope, closed.interaction,
                               closed.thread_id):  # fmt: skip
                    added.pop(closed.token_id, None)
                    removed[closed.token_id] = None
            self.seen_ms = now_ms
        if changes:
            self.feed = changes[-1].number + 1
        if not added and not removed:
            return None
        return "diff", {"feed": self.feed, "added": sorted(added), "removed": sorted(removed)}

    def _takes(
        self, viewer: Viewer, token_id: str, scope: str, interaction: str, thread_id: str
    ) -> bool:
        """Whether a pause concerns this stream: the viewer may answer it and the filters
        take it (one pause's stream: that pause alone)."""
        if self.token is not None:
            return token_id == self.token and viewer.may_answer(scope)
        return (
            viewer.may_answer(scope)
            and (not self.interaction or interaction == self.interaction)
            and (not self.thread or self.thread in thread_id.lower())
        )

    def _on_page(self, token_id: str, now_ms: int) -> bool:
        """Whether a pause that entered the waiting index belongs on this page: still open,
        and its deadline between the page's cursor and the page's end (a page that ended full
        leaves a later one to the next page)."""
        if self.token is not None:
            return False  # one pause's stream follows that pause leaving, nothing else
        info = self.service.store.pause_for_token(token_id)
        if info is None or info.expires_at_ms <= now_ms:
            return False
        key = (info.expires_at_ms, token_id)
        if self._low is not None and key <= self._low:
            return False
        return self._high is None or key <= self._high
