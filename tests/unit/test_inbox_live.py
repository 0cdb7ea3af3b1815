"""The inbox's live stream over HTTP (a real server on a free port, no broker): one snapshot of
the page, then only what moved for the viewer, read from the projection's changes feed; a fresh
snapshot when the feed lost the stream's place; a reconnect that goes on from its last event;
a window that closes with no record written. The projection is a real RocksDB store written
while the stream is open, as a projector would."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.unit.test_inbox_views import put
from turnlog import Settings, Turnlog
from turnlog.clock import utc_now
from turnlog.inbox.app import create_app
from turnlog.inbox.auth import ViewerTokens
from turnlog.inbox.server import InboxServer
from turnlog.inbox.service import InboxService
from turnlog.inbox.views import LIST_LIMIT
from turnlog.projections import layout
from turnlog.projections.store import Store
from turnlog.tokens import Keyring, generate_ed25519

START = utc_now()
WAITING = 300


class Clock:
    """The inbox's clock, moved by the test (a window closes when the test says so)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Live:
    store: Store
    clock: Clock
    url: str
    viewers: ViewerTokens

    def client(self, *scopes: str) -> httpx.AsyncClient:
        hour = timedelta(hours=1)
        token = self.viewers.mint("alice", scopes or ("tenant-a",), ttl=hour, now=utc_now())
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=20)


def _token(i: int) -> str:
    return f"k{i:03d}"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "projection") as opened:
        for i in range(WAITING):  # k000 first to close (but for k-closing), k299 last
            put(opened, f"t{i:03d}", _token(i), expires=START + timedelta(hours=1, seconds=i))
        put(opened, "theirs", "k-theirs", scope="tenant-b", expires=START + timedelta(minutes=5))
        put(opened, "closing", "k-closing", expires=START + timedelta(seconds=30))
        yield opened


@pytest.fixture
async def live(store: Store, tmp_path: Path) -> AsyncIterator[Live]:
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "state", broker_timeout_seconds=1
    )
    viewers = ViewerTokens(Keyring.ed25519("v", generate_ed25519("v")[0]))
    clock = Clock()
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(
            tl, tmp_path / "projection", projection_wait=0, refresh_seconds=0.05, clock=clock
        ) as service,
    ):
        server = InboxServer(create_app(service, viewers), port=0)
        await server.start()
        try:
            yield Live(store, clock, server.url, viewers)
        finally:
            service.closing.set()
            await server.stop()


@dataclass
class Event:
    name: str
    id: str
    data: Any
    size: int  # the bytes of its data line


async def _events(response: httpx.Response) -> AsyncIterator[Event]:
    """The stream's events as they arrive (its heartbeat comments skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if fields:
            data = fields.get("data", "")
            yield Event(fields.get("event", ""), fields.get("id", ""), json.loads(data), len(data))
            fields = {}


async def _next(events: AsyncIterator[Event]) -> Event:
    return await asyncio.wait_for(anext(events), timeout=10)


async def test_after_the_snapshot_the_stream_sends_only_what_moved(live: Live) -> None:
    async with live.client() as http, http.stream("GET", "/events") as response:
        assert response.status_code == 200
        events = _events(response)
        first = await _next(events)
        assert first.name == "snapshot"
        # The first page: the soonest to close, the 30-second one and k000..k198.
        assert first.data["ids"] == ["k-closing"] + [_token(i) for i in range(LIST_LIMIT - 1)]
        assert first.data["next"]  # more wait past it
        assert first.data["feed"] == live.store.changes_next()

        # One of 300 answered: one small event naming it, not the page again.
        with live.store.batch() as b:
            b.put_consumption("t005", _token(5), "resumed", "answer-5")
        moved = await _next(events)
        assert (moved.name, moved.data["added"], moved.data["removed"]) == ("diff", [], ["k005"])
        assert moved.data["feed"] == live.store.changes_next()
        assert moved.size < 100 and first.size > 10 * moved.size, (moved.size, first.size)
        assert moved.id == f"{moved.data['feed']}.{int(START.timestamp() * 1000)}"

        # New pauses: another tenant's, one past the full page's end (the next page's), and
        # one that closes soon enough for this page -- only the last is sent.
        soon = START + timedelta(minutes=10)
        put(live.store, "other-tenant", "k-b", scope="tenant-b", expires=soon)
        put(live.store, "later", "k-later", expires=START + timedelta(hours=2))
        put(live.store, "soon", "k-soon", expires=soon)
        moved = await _next(events)
        assert (moved.name, moved.data["added"], moved.data["removed"]) == ("diff", ["k-soon"], [])

        # Forgotten (the thread deleted): it leaves like an answered one.
        live.store.forget("soon")
        moved = await _next(events)
        assert (moved.data["added"], moved.data["removed"]) == ([], ["k-soon"])


async def test_a_stream_whose_place_the_feed_lost_gets_a_fresh_snapshot(live: Live) -> None:
    async with live.client() as http, http.stream("GET", "/events") as response:
        events = _events(response)
        assert (await _next(events)).name == "snapshot"
        # More changes in one go than the feed keeps: the stream's place is gone from it.
        with live.store.batch() as b:
            b.put_consumption("t000", _token(0), "resumed", "answer-0")
            for i in range(layout.CHANGES_KEPT + 1):
                b.put_pause(f"x{i}", "cp", 1, b"x", token_id=f"x{i}", expires_at_ms=1 << 50)
        again = await _next(events)
        assert again.name == "resync"
        assert again.data["feed"] == live.store.changes_next()
        assert again.data["ids"] == ["k-closing"] + [_token(i) for i in range(1, LIST_LIMIT)]
        # And from there on, diffs again.
        with live.store.batch() as b:
            b.put_consumption("t001", _token(1), "resumed", "answer-1")
        moved = await _next(events)
        assert (moved.name, moved.data["removed"]) == ("diff", ["k001"])


async def test_a_window_that_closes_with_no_record_leaves_the_page(live: Live) -> None:
    async with live.client() as http, http.stream("GET", "/events?thread=clos") as response:
        events = _events(response)
        first = await _next(events)
        assert first.data["ids"] == ["k-closing"]
        # Nobody expires it (no owner runs here): the clock passes its deadline, nothing else.
        live.clock.now = START + timedelta(seconds=31)
        moved = await _next(events)
        assert (moved.name, moved.data["added"], moved.data["removed"]) == (
            "diff", [], ["k-closing"],
        )  # fmt: skip


async def test_a_reconnect_goes_on_from_its_last_event(live: Live) -> None:
    async with live.client() as http:
        async with http.stream("GET", "/events") as response:
            first = await _next(_events(response))
        with live.store.batch() as b:  # answered while the page was away
            b.put_consumption("t007", _token(7), "resumed", "answer-7")
        headers = {"Last-Event-ID": first.id}
        async with http.stream("GET", "/events", headers=headers) as response:
            moved = await _next(_events(response))
        assert (moved.name, moved.data["removed"]) == ("diff", ["k007"])
        # A place the feed never had (another projection's, or made up): a snapshot.
        for stale in ("99999999.1", "0.0", "not an id"):
            async with http.stream("GET", "/events", headers={"Last-Event-ID": stale}) as r:
                assert (await _next(_events(r))).name == "snapshot", stale


async def test_one_pause_s_stream_follows_that_pause_alone(live: Live) -> None:
    async with live.client() as http, http.stream("GET", "/events?token=k250") as response:
        events = _events(response)
        first = await _next(events)
        assert first.data == {"feed": live.store.changes_next(), "ids": ["k250"], "next": None}
        with live.store.batch() as b:
            b.put_consumption("t249", _token(249), "resumed", "answer-249")  # not this one
        with live.store.batch() as b:
            b.put_consumption("t250", _token(250), "expired", "")
        moved = await _next(events)
        assert (moved.data["added"], moved.data["removed"]) == ([], ["k250"])
    # Another tenant's pause: its stream shows nothing, as for a pause that does not exist.
    async with live.client() as http, http.stream("GET", "/events?token=k-theirs") as response:
        assert (await _next(_events(response))).data["ids"] == []


async def test_a_page_cursor_that_is_none_is_refused_by_name(live: Live) -> None:
    async with live.client() as http:
        for path in ("/events?after=nope", "/rows?after=nope"):
            refused = await http.get(path, headers={"Accept": "application/json"})
            assert refused.status_code == 400
            assert "not a page cursor" in refused.json()["words"], path


async def test_the_list_pages_on_and_the_script_s_rows_are_the_viewer_s_only(live: Live) -> None:
    async with live.client() as http:
        first = (await http.get("/", headers={"Accept": "text/html"})).text
        assert first.count('<li class="pause"') == LIST_LIMIT
        assert f"{LIST_LIMIT} waiting on this page" in first
        found = re.search(
            r'<a class="next" rel="next" href="/\?after=([^"]+)">Next page</a>', first
        )
        assert found, first[-2000:]
        second = (await http.get(f"/?after={found[1]}", headers={"Accept": "text/html"})).text
        shown = re.findall(r'data-token="([^"]+)"', second)
        assert shown == [_token(i) for i in range(LIST_LIMIT - 1, WAITING)]  # the rest
        assert "Next page" not in second and 'class="first" href="/"' in second
        # The rows the page's script asks for: those pending for this viewer, nothing else.
        rows = await http.get("/rows?token=k010&token=k-theirs&token=nothing&token=k011")
        assert re.findall(r'data-token="([^"]+)"', rows.text) == ["k010", "k011"]
        narrowed = await http.get("/rows?thread=t011&token=k010&token=k011")
        assert re.findall(r'data-token="([^"]+)"', narrowed.text) == ["k011"]
