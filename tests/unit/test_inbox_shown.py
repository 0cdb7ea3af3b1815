"""What a pause shows, attacked from outside (issue 29), over HTTP in process: Unicode controls
that make an approval read otherwise than it is, an argument's hidden rest, a question too long
for the list. No broker: the projection is a real RocksDB store holding the attacks' pauses,
Kafka an address nothing listens on (so nothing here can be published). The deployment is
shared with ``test_inbox_attacks`` (sessions, bodies, live streams)."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from tests.unit.test_inbox_views import SPOOFED, put
from turnlog import Settings, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.inbox.app import create_app
from turnlog.inbox.auth import ViewerTokens
from turnlog.inbox.service import InboxService
from turnlog.projections.store import Store
from turnlog.tokens import Keyring, generate_ed25519

BASE = "http://inbox.test"
LONG_QUESTION = "Is this long question " + "really " * 30_000 + "answered?"  # ~210 KB
SHELL = {"cmd": "ls -la\nrm -rf /"}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found, page[:2000]
    return found.group(1)


class Opened:
    """An ASGI wrapper that says when a response to ``path`` has started (a live stream is
    open), so a test acts on an open stream, not on one that may not have begun."""

    def __init__(self, app: Any, path: str) -> None:
        self.app, self.path = app, path
        self.started = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.start" and scope.get("path") == self.path:
                self.started.set()

        await self.app(scope, receive, watched)


@dataclass
class Inbox:
    service: InboxService
    viewers: ViewerTokens
    opened: Opened

    def token(self, name: str = "alice", *scopes: str, seconds: float = 3600) -> str:
        """A viewer token valid for ``seconds`` more (its window began an hour ago, so a short
        one is a token about to expire, not one too young to use)."""
        now = utc_now()
        ttl = timedelta(hours=1, seconds=seconds)
        return self.viewers.mint(
            name, scopes or ("tenant-a",), ttl=ttl, now=now - timedelta(hours=1)
        )

    def client(self, **kw: Any) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.opened)
        return httpx.AsyncClient(transport=transport, base_url=BASE, **kw)

    async def login(self, http: httpx.AsyncClient, token: str) -> httpx.Response:
        form = await http.get("/login")
        return await http.post("/login", data={"csrf": _csrf(form.text), "token": token})


@pytest.fixture
def projection(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "projection"
    with Store.open(path) as store:
        put(store, "mine", "t-mine")
        put(
            store, "transfer", "t-transfer", interaction=APPROVE_TOOL_CALL,
            request={"tool": "transfer_funds", "arguments": SPOOFED},
        )  # fmt: skip
        put(store, "spoofq", "t-spoofq", request={"question": "Delete the \u202etseT database?"})
        put(
            store, "shell", "t-shell", interaction=APPROVE_TOOL_CALL,
            request={"tool": "run_shell", "arguments": SHELL},
        )  # fmt: skip
        put(store, "long", "t-long", request={"question": LONG_QUESTION})
        yield path


@pytest.fixture
async def inbox(projection: Path, tmp_path: Path) -> AsyncIterator[Inbox]:
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "state", broker_timeout_seconds=1
    )
    viewers = ViewerTokens(Keyring.ed25519("v", generate_ed25519("v")[0]))
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(tl, projection, projection_wait=0) as service,
    ):
        app = create_app(service, viewers)
        yield Inbox(service, viewers, Opened(app, "/events"))


async def _until(check: Any, what: str, timeout: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"waited {timeout:g}s for {what}")
        await asyncio.sleep(0.05)


# -- what a pause shows --------------------------------------------------------------------------

RAW_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069\u200b-\u200f\u061c\ufeff]")


async def test_an_approval_shows_hidden_characters_marked_with_a_warning(inbox: Inbox) -> None:
    async with inbox.client() as http:
        await inbox.login(http, inbox.token())
        page = (await http.get("/pause/t-transfer")).text
        listed = (await http.get("/")).text
        question = (await http.get("/pause/t-spoofq")).text
    for shown in (page, listed, question):
        assert not RAW_CONTROLS.search(shown)
    text = html.unescape(page)
    assert "DE00 1111 ⟨U+202E⟩9999 0000" in text
    assert "100⟨U+202E⟩00001" in text
    assert "bob@⟨U+202E⟩moc.live⟨U+202C⟩.example.com" in text
    assert 'id="hidden-warning"' in page and "U+202C, U+202E" in text
    # The text to edit holds JSON escapes that decode to the very values paused.
    edit = re.search(r'<textarea id="arguments"[^>]*>(.*?)</textarea>', page, re.S)
    assert edit and json.loads(html.unescape(edit.group(1))) == SPOOFED
    assert "Delete the ⟨U+202E⟩tseT database?" in html.unescape(question)
    title = re.search(r"<title>(.*?)</title>", question, re.S)
    assert title and "⟨U+202E⟩" in html.unescape(title.group(1))
    assert "Holds invisible or reordering characters" in listed


async def test_an_approval_shows_every_argument_whole_never_folded(inbox: Inbox) -> None:
    async with inbox.client() as http:
        await inbox.login(http, inbox.token())
        page = (await http.get("/pause/t-shell")).text
        listed = (await http.get("/")).text
    call = page[page.index('id="call-h"') : page.index('id="conv-h"')]
    assert "<details" not in call  # nothing to open: what is approved is all in sight
    assert re.search(r"<pre[^>]*>ls -la\nrm -rf /</pre>", call), call
    row = listed[listed.index('data-token="t-shell"') :]
    row = row[: row.index("</li>")]
    assert "ls -la" in row and "9 more characters on 1 more line" in html.unescape(row)


async def test_a_long_question_is_clipped_in_the_list_and_title_whole_on_its_page(
    inbox: Inbox,
) -> None:
    async with inbox.client() as http:
        await inbox.login(http, inbox.token())
        listed = (await http.get("/")).text
        page = (await http.get("/pause/t-long")).text
    link = re.search(r'<a class="open" href="/pause/t-long">(.*?)</a>', listed, re.S)
    assert link and len(link.group(1)) <= 201 and link.group(1).endswith("…")
    assert len(listed) < 50_000  # the list stays a list, not the question
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    assert title and len(title.group(1)) <= 201 + len(" · turnlog")
    assert LONG_QUESTION in page  # the pause's own page shows all of it
