"""The inbox's HTTP surface without a broker: login, scopes, CSRF, headers, and every refusal
that is decided before anything would be published (ASGI in process, the projection a real
RocksDB store)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from tests.unit.test_inbox_views import NOW, put
from turnlog import Settings, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.errors import ConfigurationError, StoreError
from turnlog.inbox.app import CSP, create_app
from turnlog.inbox.auth import Viewer, ViewerTokens
from turnlog.inbox.service import InboxService, LiveList
from turnlog.projections.store import Store
from turnlog.tokens import Keyring, generate_ed25519

BASE = "http://inbox.test"


@dataclass
class Client:
    http: httpx.AsyncClient
    viewers: ViewerTokens
    service: InboxService

    async def login(self, *scopes: str) -> str:
        """Log in through the form (the CSRF of the pre-login cookie); the page's CSRF after."""
        form = await self.http.get("/login")
        token = self.viewers.mint("alice", scopes, ttl=timedelta(hours=1), now=utc_now())
        done = await self.http.post("/login", data={"csrf": _csrf(form.text), "token": token})
        assert done.status_code == 303 and done.headers["location"] == "/"
        return _csrf((await self.http.get("/")).text)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, html
    return found.group(1)


@pytest.fixture
def projection(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "projection"
    with Store.open(path) as store:
        put(store, "mine", "t-mine")
        put(store, "theirs", "t-theirs", scope="tenant-b")
        put(store, "late", "t-late", expires=NOW + timedelta(milliseconds=1))
        put(store, "xss", "t-xss", request={"question": "<img src=x onerror=alert(1)>"})
        put(
            store, "call", "t-call", interaction=APPROVE_TOOL_CALL,
            request={"tool": "deploy", "arguments": {"replicas": 3}},
        )  # fmt: skip
        yield path


@pytest.fixture
async def client(projection: Path, tmp_path: Path) -> AsyncIterator[Client]:
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "state", broker_timeout_seconds=1
    )
    viewers = ViewerTokens(Keyring.ed25519("v", generate_ed25519("v")[0]))
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(tl, projection, projection_wait=0) as service,
    ):
        transport = httpx.ASGITransport(app=create_app(service, viewers))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            yield Client(http, viewers, service)


async def test_without_a_session_pages_send_to_login_and_scripts_get_401(client: Client) -> None:
    page = await client.http.get("/")
    assert page.status_code == 303 and page.headers["location"] == "/login"
    for path in ("/events", "/rows", "/pause/t-mine/state"):
        assert (await client.http.get(path)).status_code == 401
    post = await client.http.post("/pause/t-mine/answer", data={"q0": "eu"})
    assert post.status_code == 401


async def test_a_bad_token_does_not_log_in_and_a_login_post_needs_its_csrf(client: Client) -> None:
    form = await client.http.get("/login")
    assert form.headers["set-cookie"].lower().count("httponly") == 1
    bad = await client.http.post("/login", data={"csrf": _csrf(form.text), "token": "nope"})
    assert bad.status_code == 401 and "not valid here" in bad.text
    token = client.viewers.mint("a", ["tenant-a"], ttl=timedelta(hours=1), now=utc_now())
    forged = await client.http.post("/login", data={"csrf": "0" * 64, "token": token})
    assert forged.status_code == 403


async def test_the_list_and_pages_show_only_the_viewer_s_scopes(client: Client) -> None:
    await client.login("tenant-a")
    page = await client.http.get("/")
    assert page.status_code == 200
    assert 't-mine"' in page.text and "t-call" in page.text and "t-theirs" not in page.text
    assert (await client.http.get("/pause/t-theirs")).status_code == 404
    assert (await client.http.get("/pause/t-mine")).status_code == 200
    state = await client.http.get("/pause/t-theirs/state", headers={"Accept": "application/json"})
    assert state.json() == {"status": "gone", "words": "no longer available"}
    rows = await client.http.get("/rows?interaction=approve_tool_call")
    assert "t-call" in rows.text and "t-mine" not in rows.text


async def test_every_response_carries_the_security_headers(client: Client) -> None:
    for path in ("/login", "/static/inbox.js", "/static/inbox.css"):
        response = await client.http.get(path)
        assert response.status_code == 200
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    assert (await client.http.get("/login")).headers["cache-control"] == "no-store"
    assert "<script>" not in (await client.http.get("/login")).text  # no inline script


async def test_answers_refused_before_anything_is_published(client: Client) -> None:
    csrf = await client.login("tenant-a")
    json_ = {"Accept": "application/json"}

    async def post(token: str, data: dict[str, str]) -> httpx.Response:
        return await client.http.post(f"/pause/{token}/answer", data=data, headers=json_)

    assert (await post("t-mine", {"q0": "eu"})).status_code == 403  # no CSRF
    assert (await post("t-theirs", {"csrf": csrf, "other0": "x"})).status_code == 404
    missing = await post("t-mine", {"csrf": csrf})
    assert missing.status_code == 422 and "answer question 1" in missing.json()["words"]
    rejected = await post("t-call", {"csrf": csrf, "decision": "reject"})
    assert rejected.status_code == 422 and "say why" in rejected.json()["words"]
    late = await post("t-late", {"csrf": csrf, "other0": "x"})
    assert late.status_code == 409 and late.json()["words"].startswith("expired")
    # Without the page's script: the same refusal as a page.
    page = await client.http.post("/pause/t-late/answer", data={"csrf": csrf, "other0": "x"})
    assert page.status_code == 409 and "expired" in page.text
    for token in ("t-mine", "t-theirs", "t-call", "t-late"):
        assert client.service.answered_here(token) is None
    nobody = await client.http.get("/answers/not-an-answer", headers=json_)
    assert nobody.status_code == 404


async def test_logging_out_needs_the_csrf_and_ends_the_session(client: Client) -> None:
    csrf = await client.login("tenant-a")
    assert (await client.http.post("/logout", data={})).status_code == 403
    out = await client.http.post("/logout", data={"csrf": csrf})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert (await client.http.get("/")).status_code == 303


async def test_the_inbox_waits_for_a_projection_then_names_what_to_run(tmp_path: Path) -> None:
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    settings = Settings(bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "state")
    async with Turnlog(settings, keyring=ring) as tl:
        service = InboxService(tl, tmp_path / "none", projection_wait=0.3)
        with pytest.raises(StoreError, match="run `turnlog project` beside the inbox"):
            await service.start()
        verifying_only = Turnlog(settings, keyring=Keyring([ring.signing_key()]))
        with pytest.raises(ConfigurationError, match="only verifies"):
            InboxService(verifying_only, tmp_path / "none")
        await verifying_only.close()


async def test_the_live_stream_s_ids_are_each_viewer_s_part(client: Client) -> None:
    def first(viewer: Viewer) -> list[str]:
        return list(LiveList(client.service).snapshot(viewer)["ids"])

    assert first(Viewer("alice", frozenset({"tenant-a"}))) == ["t-call", "t-mine", "t-xss"]
    assert first(Viewer("ops", frozenset({"*"}))) == ["t-call", "t-mine", "t-theirs", "t-xss"]
    assert first(Viewer("z", frozenset({"tenant-z"}))) == []


async def test_what_a_pause_says_is_shown_as_text_never_as_markup(client: Client) -> None:
    await client.login("tenant-a")
    for path in ("/", "/pause/t-xss"):
        page = (await client.http.get(path)).text
        assert "<img src=x" not in page
        assert "&lt;img src=x onerror=alert(1)&gt;" in page


async def test_an_answer_kafka_cannot_take_says_so_and_may_be_sent_again(client: Client) -> None:
    csrf = await client.login("tenant-a")
    data = {"csrf": csrf, "q0": "", "other0": "eu"}
    for _ in range(2):  # the failed try took nothing: the second is tried again, not refused
        sent = await client.http.post(
            "/pause/t-mine/answer", data=data, headers={"Accept": "application/json"}
        )
        assert sent.status_code == 503
        assert "Kafka is not reachable" in sent.json()["words"]
        assert client.service.answered_here("t-mine") is None


async def test_a_long_running_inbox_remembers_a_bounded_number_of_answers(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnlog.inbox import service as module

    monkeypatch.setattr(module, "KEPT_ANSWERS", 2)
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    svc = client.service
    for n, outcome in enumerate([done, waiting, done, done]):
        svc._sent[f"a{n}"] = module._Sent("alice", f"t{n}", "th", outcome)  # type: ignore[arg-type]
        svc._by_token[f"t{n}"] = f"a{n}"
    svc._forget_old()
    assert list(svc._sent) == ["a1", "a3"]  # the undecided one stays, the oldest decided go
    assert svc.answered_here("t0") is None and svc.answered_here("t1") == "a1"
    waiting.cancel()
    svc._sent.clear()


async def test_an_answered_pause_s_page_names_who_continues_its_turn(tmp_path: Path) -> None:
    path = tmp_path / "claimed"
    with Store.open(path) as store:
        put(store, "claimed", "t-claimed")
        with store.batch() as batch:
            batch.put_consumption(
                "claimed", "t-claimed", "resumed", "a-1",
                claim=("c-1", "<b>agent</b>\u202e", 1_764_957_600_000, "claimed"),
            )  # fmt: skip
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    settings = Settings(bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "state")
    viewers = ViewerTokens(Keyring.ed25519("v", generate_ed25519("v")[0]))
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(tl, path, projection_wait=0) as service,
    ):
        transport = httpx.ASGITransport(app=create_app(service, viewers))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            await Client(http, viewers, service).login("tenant-a")
            page = (await http.get("/pause/t-claimed")).text
    assert "Continued by &lt;b&gt;agent&lt;/b&gt;⟨U+202E⟩ since 2025-12-05 18:00:00 UTC" in page
    assert "not done yet: still running, or its process died before it said done" in page
