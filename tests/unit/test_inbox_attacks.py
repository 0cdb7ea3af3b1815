"""The inbox attacked from outside (issue 29), over HTTP in process: sessions, bodies and live
streams (what a pause shows is ``test_inbox_shown``, whose deployment this shares). Each test is
what an attack did, and that it no longer does it. No broker: the projection is a real RocksDB
store, Kafka is an address nothing listens on (so nothing here can be published)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.unit import test_inbox_shown as shown
from tests.unit.test_inbox_shown import Inbox, _csrf, _until
from turnlog.inbox.app import SIGN_IN_BYTES
from turnlog.inbox.auth import Csrf

#: The deployment of ``test_inbox_shown``: a projection holding the attacks' pauses.
projection, inbox = shown.projection, shown.inbox

MB = 1024 * 1024


# -- 1. an expired session could not sign in again -------------------------------------------------


async def test_a_person_whose_session_expired_signs_in_again(inbox: Inbox) -> None:
    async with inbox.client() as http:
        assert (await inbox.login(http, inbox.token(seconds=1.5))).status_code == 303

        async def expired() -> bool:
            return (await http.get("/")).status_code == 303

        await _until(expired, "the session to expire")
        # The stale cookie is still there (another tab, a jar that kept it): the form and the
        # login link (which posts the same form) sign in all the same.
        http.cookies.set("turnlog_session", inbox.token(seconds=-60), domain="inbox.test")
        done = await inbox.login(http, inbox.token())
        assert done.status_code == 303 and done.headers["location"] == "/", done.text
        assert (await http.get("/")).status_code == 200
        # A stale cookie, once seen, is cleared: it stands in nobody's way afterwards.
        http.cookies.set("turnlog_session", inbox.token(seconds=-60), domain="inbox.test")
        assert (await http.get("/")).status_code == 303
        assert http.cookies.get("turnlog_session") is None


async def test_a_stale_sign_in_form_is_a_page_with_a_fresh_form_never_json(inbox: Inbox) -> None:
    async with inbox.client() as http:
        old = _csrf((await http.get("/login")).text)
        restarted = Csrf()  # the inbox restarted: its forms' tokens no longer check
        stale = await http.post("/login", data={"csrf": restarted.token("x"), "token": "t"})
        assert stale.status_code == 403
        assert stale.headers["content-type"].startswith("text/html")
        assert "out of date" in stale.text and not stale.text.lstrip().startswith("{")
        fresh = _csrf(stale.text)
        assert fresh == old  # bound to the same pre-login cookie, so pasting again works
        done = await http.post("/login", data={"csrf": fresh, "token": inbox.token()})
        assert done.status_code == 303


async def test_a_stale_session_signs_out_and_a_stale_answer_form_says_why(inbox: Inbox) -> None:
    async with inbox.client() as http:
        await inbox.login(http, inbox.token())
        page = await http.get("/pause/t-mine")
        # The inbox restarted since the page was shown: the form's CSRF token is another's.
        other = Csrf().token("whatever")
        sent = await http.post("/pause/t-mine/answer", data={"csrf": other, "other0": "eu"})
        assert sent.status_code == 403 and sent.headers["content-type"].startswith("text/html")
        # The pause's page again, its form fresh, one line saying nothing was sent.
        assert "Nothing was sent" in sent.text and 'id="answer-form"' in sent.text
        assert _csrf(sent.text) == _csrf(page.text)
        scripted = await http.post(
            "/pause/t-mine/answer",
            data={"csrf": other, "other0": "eu"},
            headers={"Accept": "application/json"},
        )
        assert scripted.status_code == 403 and "CSRF" in scripted.json()["error"]
        # Signing out with that stale page's form: a live session asks for a fresh form ...
        refused = await http.post("/logout", data={"csrf": other})
        assert refused.status_code == 403 and "sign out with the button" in refused.text
        assert _csrf(refused.text) == _csrf(page.text)
        # ... a stale one (here: expired) is signed out whatever its form says.
        http.cookies.set("turnlog_session", inbox.token(seconds=-60), domain="inbox.test")
        out = await http.post("/logout", data={"csrf": other})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert http.cookies.get("turnlog_session") is None


# -- 4. bodies parsed whole before any check -------------------------------------------------------


def _multipart(count: int, size: int, chunk: int, pulled: list[int]) -> AsyncIterator[bytes]:
    """``count`` form fields of ``size`` bytes, streamed ``chunk`` bytes at a time; ``pulled``
    counts what the app actually asked for."""

    async def body() -> AsyncIterator[bytes]:
        for n in range(count):
            head = f'--B\r\nContent-Disposition: form-data; name="f{n}"\r\n\r\n'.encode()
            pulled[0] += len(head)
            yield head
            for _ in range(size // chunk):
                pulled[0] += chunk
                yield b"x" * chunk
            pulled[0] += 2
            yield b"\r\n"
        pulled[0] += 4
        yield b"--B--\r\n"

    return body()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_an_oversized_sign_in_is_refused_before_it_is_read(
    inbox: Inbox, declared: bool
) -> None:
    count, size, chunk = 64, MB, 4096  # 64 MB, as 64 fields of 1 MB (the attack sent 400)
    pulled = [0]
    headers = {"content-type": "multipart/form-data; boundary=B"}
    if declared:
        headers["content-length"] = str(count * (size + 60))
    async with inbox.client() as http:
        refused = await http.post(
            "/login", content=_multipart(count, size, chunk, pulled), headers=headers
        )
    assert refused.status_code == 413, (refused.text[:300], f"read {pulled[0]} bytes")
    assert f"larger than {SIGN_IN_BYTES} bytes" in refused.text
    if declared:
        assert pulled[0] == 0  # refused on the header alone
    else:
        assert pulled[0] <= SIGN_IN_BYTES + chunk  # cut where it passed the limit


async def test_an_answer_may_send_up_to_a_record_and_no_more(inbox: Inbox) -> None:
    limit = inbox.service.tl.settings.max_record_bytes
    pulled = [0]
    async with inbox.client() as http:
        await inbox.login(http, inbox.token())
        csrf = _csrf((await http.get("/pause/t-mine")).text)
        big = await http.post(
            "/pause/t-mine/answer",
            content=_multipart(3, MB, 64 * 1024, pulled),
            headers={"content-type": "multipart/form-data; boundary=B"},
        )
        assert big.status_code == 413, (big.text[:300], f"read {pulled[0]} bytes")
        assert pulled[0] <= limit + 64 * 1024
        # Under the limit, the form is read and judged as before (Kafka is unreachable here).
        sent = await http.post(
            "/pause/t-mine/answer",
            data={"csrf": csrf, "other0": "é" * 100_000},
            headers={"Accept": "application/json"},
        )
        assert sent.status_code == 422 and "longer than" in sent.json()["words"]


# -- 5. the live stream outlived its viewer --------------------------------------------------------


async def test_the_live_stream_ends_when_the_viewer_s_token_expires(inbox: Inbox) -> None:
    async with inbox.client() as http:
        await inbox.login(http, inbox.token(seconds=2))
        loop = asyncio.get_running_loop()
        began = loop.time()
        # The heartbeat is ten seconds: the stream ends at the expiry, not at a heartbeat.
        stream = await asyncio.wait_for(http.get("/events"), timeout=8)
        took = loop.time() - began
    assert stream.status_code == 200
    assert stream.text.startswith("event: snapshot\n")
    assert stream.text.endswith('event: signed-out\ndata: "your session ended: sign in again"\n\n')
    assert 0.5 < took < 4, took


async def test_the_live_stream_ends_when_the_viewer_signs_out(inbox: Inbox) -> None:
    token = inbox.token()
    async with inbox.client() as http, inbox.client() as tab:
        await inbox.login(http, token)
        csrf = _csrf((await http.get("/")).text)
        tab.cookies.set("turnlog_session", token, domain="inbox.test")  # another tab's stream
        stream = asyncio.create_task(tab.get("/events"))
        await asyncio.wait_for(inbox.opened.started.wait(), timeout=5)
        out = await http.post("/logout", data={"csrf": csrf})
        assert out.status_code == 303
        ended = await asyncio.wait_for(stream, timeout=3)
        assert ended.text.endswith(
            'event: signed-out\ndata: "your session ended: sign in again"\n\n'
        )
        # Signed out on the server: the same credential opens nothing more ...
        assert (await tab.get("/events")).status_code == 401
        assert (await tab.get("/")).status_code == 303
        # ... until its person signs in with it again.
        assert (await inbox.login(http, token)).status_code == 303
        assert (await http.get("/")).status_code == 200
