"""The pending pauses and one pause, as the inbox shows them, read from the local projection.

Only what the store holds is shown: the pause's request (the question, or the tool call awaiting
approval), its checkpoint's messages, its window, and whether its token is spent. The token
itself is not in the store and never in a page. A pause the viewer's scopes do not cover is
treated as absent everywhere -- the list, the detail page, a POST -- so its existence leaks to
nobody.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.group import calls_of, view_for_token
from turnlog.contracts.interactions import ASK_USER
from turnlog.contracts.ledger import ClaimState, LedgerEntry, Outcome
from turnlog.contracts.visible import marks
from turnlog.errors import DecodeError
from turnlog.inbox.auth import Viewer
from turnlog.projections.store import Store
from turnlog.wire.codec import decode

#: The most pauses one list shows (oldest first); filters narrow it further.
LIST_LIMIT: Final = 200

#: The list shows an argument's first line up to this many characters, and says how much more
#: there is; the pause's page, where a call is approved, shows every argument whole.
PREVIEW_CHARS: Final = 80

PENDING, ANSWERED, EXPIRED = "pending", "answered", "expired"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Option:
    label: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class Question:
    """One question of an ``ask_user`` pause: free text when it offers no options."""

    text: str
    header: str = ""
    options: tuple[Option, ...] = ()
    multi: bool = False


def hidden_characters(value: Any) -> tuple[str, ...]:
    """The ``U+XXXX`` of every marked character in ``value`` (its strings, keys included, at
    any depth), sorted: what the approval's warning names. Newlines and tabs are not counted."""
    found: set[str] = set()
    table = marks(True)
    todo = [value]  # a list, not recursion: a request nests as deep as JSON lets it
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            found.update(table[ord(c)][1:-1] for c in set(item) if ord(c) in table)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)
    return tuple(sorted(found))


def json_text(value: Any) -> str:
    """``value`` as indented JSON to edit, every marked character a ``\\uXXXX`` escape: the
    text box shows it, and the edit sent back decodes to exactly the same value."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    table = marks(True)
    if not any(ord(c) in table for c in set(text)):
        return text
    out = []
    for char in text:
        if ord(char) not in table:
            out.append(char)
        elif ord(char) > 0xFFFF:  # JSON escapes an astral character as its surrogate pair
            high, low = divmod(ord(char) - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}")
        else:
            out.append(f"\\u{ord(char):04x}")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Shown:
    """One argument as shown: its name and its value as text. The pause's page shows the value
    whole (an approval hides nothing); the list shows :attr:`preview` and says what it left out
    in :attr:`more`, never an ellipsis that could pass for the end of the value."""

    name: str
    text: str

    @property
    def lines(self) -> int:
        return self.text.count("\n") + 1

    @property
    def preview(self) -> str:
        first = self.text.split("\n", 1)[0]
        return first[:PREVIEW_CHARS]

    @property
    def more(self) -> str:
        """What the list's preview leaves out, in words (empty when it shows everything)."""
        left = len(self.text) - len(self.preview)
        if left <= 0:
            return ""
        lines = self.lines - 1
        said = f"{left} more character{'s' if left != 1 else ''}"
        if lines:
            said += f" on {lines} more line{'s' if lines != 1 else ''}"
        return said


@dataclass(frozen=True, slots=True)
class PauseView:
    """A pause as the pages show it."""

    recorded: PauseRecorded
    status: str  # pending, answered, expired
    #: The ledger row holding the continuation claim of the turn this pause resumed (for a
    #: pause of several calls, the group's turn), when somebody claimed it.
    claim: LedgerEntry | None = None

    @property
    def continued(self) -> str | None:
        """Who continues the resumed turn, when, and whether they said done (unmarked: the
        page marks it)."""
        if self.claim is None:
            return None
        at = datetime.fromtimestamp(self.claim.claimed_at_ms / 1000, UTC)
        who = self.claim.claimant or "an unnamed process"
        said = f"Continued by {who} since {at.strftime('%Y-%m-%d %H:%M:%S')} UTC"
        if self.claim.claim_state == ClaimState.FINISHED:
            return f"{said}, done"
        return f"{said}, not done yet: still running, or its process died before it said done"

    @property
    def token_id(self) -> str:
        return self.recorded.token_id

    @property
    def thread_id(self) -> str:
        return self.recorded.checkpoint.thread_id

    @property
    def scope_hash(self) -> str:
        return self.recorded.checkpoint.scope_hash

    @property
    def interaction(self) -> str:
        return self.recorded.response_schema

    @property
    def paused_at(self) -> datetime:
        return self.recorded.occurred_at

    @property
    def expires_at(self) -> datetime:
        return self.recorded.expires_at

    @property
    def order(self) -> str:
        """Where the pause stands in a list (oldest first), as text that sorts the same: what
        the page's script inserts a row that arrived live by."""
        made = (self.paused_at - _EPOCH) // _MICROSECOND
        created = (self.recorded.checkpoint.created_at - _EPOCH) // _MICROSECOND
        return f"{made:020d}.{created:020d}.{self.token_id}"

    @property
    def messages(self) -> tuple[Mapping[str, Any], ...]:
        return self.recorded.checkpoint.messages

    @property
    def request(self) -> Any:
        try:
            return json.loads(self.recorded.request_json)
        except (ValueError, RecursionError):
            return self.recorded.request_json

    @property
    def questions(self) -> tuple[Question, ...]:
        """The questions of an ``ask_user`` request (``{"questions": [...]}`` or one
        ``{"question": ...}``); empty for any other interaction."""
        if self.interaction != ASK_USER:
            return ()
        return questions_of(self.request)

    @property
    def tool(self) -> str | None:
        request = self.request
        if self.interaction == APPROVE_TOOL_CALL and isinstance(request, dict):
            tool = request.get("tool")
            return tool if isinstance(tool, str) else None
        return None

    @property
    def arguments(self) -> Any:
        request = self.request
        return request.get("arguments") if isinstance(request, dict) else None

    @property
    def arguments_text(self) -> str:
        """The arguments as JSON to edit (indented, keys in the call's order, marked characters
        escaped)."""
        return json_text(self.arguments)

    @property
    def shown_arguments(self) -> tuple[Shown, ...]:
        arguments = self.arguments
        if isinstance(arguments, dict):
            return tuple(Shown(str(k), _text(v)) for k, v in arguments.items())
        return (Shown("arguments", _text(arguments)),) if arguments is not None else ()

    @property
    def summary(self) -> str:
        """What the pause asks, for the list and the title: the first question, the call to
        approve, or the request -- whole; the pages :func:`clip` it."""
        if self.tool is not None:
            return f"approve {self.tool}"
        questions = self.questions
        if questions:
            more = f" (+{len(questions) - 1} more)" if len(questions) > 1 else ""
            return questions[0].text + more
        return _text(self.request)

    @property
    def hidden(self) -> tuple[str, ...]:
        """The marked characters in what the pause asks (its request: the question, or the tool
        and its arguments): when any, the page warns before anyone answers or approves."""
        return hidden_characters(self.request)

    @property
    def shown_request(self) -> Shown:
        return Shown("request", _text(self.request))

    def age(self, now: datetime) -> timedelta:
        return max(timedelta(0), now - self.paused_at)

    def time_left(self, now: datetime) -> timedelta:
        return max(timedelta(0), self.expires_at - now)


def questions_of(request: Any) -> tuple[Question, ...]:
    if not isinstance(request, dict):
        return ()
    raw = request.get("questions")
    if raw is None and "question" in request:
        raw = [request]
    if not isinstance(raw, list):
        return ()
    found = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        options = []
        for option in item.get("options") or ():
            if isinstance(option, str):
                options.append(Option(option))
            elif isinstance(option, dict) and isinstance(option.get("label"), str):
                options.append(Option(option["label"], str(option.get("description") or "")))
        found.append(
            Question(
                text=str(item.get("question") or ""),
                header=str(item.get("header") or ""),
                options=tuple(options),
                multi=bool(item.get("multiSelect") or item.get("multi_select")),
            )
        )
    return tuple(found)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def pause_view(store: Store, token_id: str, now: datetime) -> PauseView | None:
    """The pause behind ``token_id`` with its status, or ``None`` when the store has no such
    pause (never recorded, or forgotten)."""
    info = store.pause_for_token(token_id)
    if info is None:
        return None
    try:
        # A pause of several calls, as this token's own call sees it.
        full = decode(info.value, PauseRecorded)
        recorded = view_for_token(full, token_id)
    except DecodeError:
        return None
    spent = store.ledger(token_id)
    if spent is not None:
        status = EXPIRED if spent.outcome == Outcome.EXPIRED else ANSWERED  # resumed, or held
    elif recorded.expires_at <= now:
        status = EXPIRED
    else:
        status = PENDING
    return PauseView(recorded, status, _claim(store, full, spent))


def _claim(store: Store, pause: PauseRecorded, spent: LedgerEntry | None) -> LedgerEntry | None:
    """The claimed ledger row of the turn ``pause`` resumed: the token's own, or, for a call
    held for its group, the row of the call whose answer resumed the group."""
    if spent is None or spent.outcome == Outcome.EXPIRED:
        return None
    rows = [spent] if spent.outcome == Outcome.RESUMED else []
    if spent.outcome == Outcome.HELD:
        rows = [r for r in store.ledgers([c.token_id for c in calls_of(pause)]) if r is not None]
    return next((r for r in rows if r.outcome == Outcome.RESUMED and r.claimed), None)


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of the list: its rows, oldest first, and the cursor of the next page (``None``
    when no more wait past it)."""

    rows: list[PauseView]
    next: str | None


def list_page(
    store: Store,
    viewer: Viewer,
    now: datetime,
    *,
    interaction: str | None = None,
    thread: str | None = None,
    after: str | None = None,
    limit: int = LIST_LIMIT,
) -> ListPage:
    """The pending pauses ``viewer`` may answer, narrowed by interaction and by a
    case-insensitive part of the thread id: one page of the store's waiting index (the
    viewer's scopes and the interaction sought to, the thread tested on the index's facts),
    soonest deadline first from ``after`` (a page's :attr:`ListPage.next`), then shown oldest
    first -- never a walk over every pause. ``ValueError`` for an ``after`` that is no cursor."""
    from turnlog.inbox.auth import ALL_SCOPES

    wanted = (thread or "").strip().lower()
    page = store.pending_page(
        int(now.timestamp() * 1000),
        scope=None if ALL_SCOPES in viewer.scopes else viewer.scopes,
        interaction=interaction or None,
        where=(lambda p: wanted in p.thread_id.lower()) if wanted else None,
        after=after or None,
        limit=limit,
    )
    found = []
    for waiting in page.items:
        view = pause_view(store, waiting.token_id, now)
        if view is None or view.status != PENDING or not viewer.may_answer(view.scope_hash):
            continue
        if interaction and view.interaction != interaction:
            continue
        found.append(view)
    found.sort(key=lambda v: v.order)
    return ListPage(found, page.next)


def pending_for(
    store: Store,
    viewer: Viewer,
    now: datetime,
    *,
    interaction: str | None = None,
    thread: str | None = None,
    limit: int = LIST_LIMIT,
) -> list[PauseView]:
    """The rows of the first :func:`list_page`."""
    return list_page(store, viewer, now, interaction=interaction, thread=thread, limit=limit).rows


def duration(delta: timedelta) -> str:
    """``3d 4h``, ``5h 12m``, ``7m 3s``, ``42s``: two units at most, for ages and time left."""
    seconds = int(delta.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
