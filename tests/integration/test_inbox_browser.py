"""The inbox in a real browser (Debian's Chromium, driven by Playwright) against the real broker.

One deployment and one browser for the module: a projector and a resume worker run in this
process, the inbox serves on a free port, and each test pauses its own turns through the
library. Screenshots of the list, a detail view and the phone layout are written to
``build/screenshots/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from tests.deployment import sample_checkpoint
from turnlog import Settings, Turnlog, TurnResumed, write_keypair
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_call
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.inbox.app import create_app
from turnlog.inbox.auth import ViewerTokens
from turnlog.inbox.server import InboxServer
from turnlog.inbox.service import InboxService
from turnlog.producers.forget import forget_thread
from turnlog.projections.projector import CheckpointProjector
from turnlog.projections.store import Store
from turnlog.tokens import Keyring, generate_ed25519

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("TURNLOG_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
QUESTION = {
    "questions": [
        {
            "question": "Which region?",
            "header": "Region",
            "options": [{"label": "eu", "description": "Ireland"}, "us"],
        }
    ]
}
DEPLOY = {"service": "billing", "replicas": 3}


@dataclass
class Inbox:
    url: str
    tl: Turnlog
    settings: Settings
    viewers: ViewerTokens
    browser: Browser
    service: InboxService
    tag: str

    def thread(self, name: str) -> str:
        return f"{name}-{self.tag}"

    async def context(self, scopes: list[str], url: str = "", **options: Any) -> BrowserContext:
        """A browser context logged in (through the login link) as a viewer of ``scopes``, at
        ``url`` (another server of the same inbox) or the module's."""
        context = await self.browser.new_context(**options)
        token = self.viewers.mint("pat", scopes, ttl=timedelta(hours=1), now=utc_now())
        page = await context.new_page()
        await page.goto(f"{url or self.url}/login#token={token}")
        await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
        await page.close()
        return context

    async def pause(
        self, checkpoint: TurnCheckpoint, request: Any, interaction: str | None = None, **kw: Any
    ) -> Any:
        return await self.tl.pause(checkpoint, request=request, interaction=interaction, **kw)


def _chromium_or_fail() -> None:
    """A missing browser fails the tests (never skips them) and says how to get one."""
    if not Path(CHROMIUM).is_file():
        pytest.fail(
            f"the browser tests need Chromium at {CHROMIUM}: run `make chromium` "
            "(Debian's chromium package) or set TURNLOG_CHROMIUM"
        )


@pytest.fixture(scope="module")
async def inbox(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Inbox]:
    _chromium_or_fail()
    SHOTS.mkdir(parents=True, exist_ok=True)
    root = tmp_path_factory.mktemp("inbox")
    tag = uuid.uuid4().hex[:8]
    write_keypair(root / "keys", "inbox-test")
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=f"inbox{tag}.",
        application_id=f"inbox{tag}",
        state_dir=root / "state",
        keys_dir=root / "keys",
        partitions=2,
        commit_interval_ms=50,
    )
    viewers = ViewerTokens(Keyring.ed25519("viewer", generate_ed25519("viewer")[0]))
    tasks: list[asyncio.Task[Any]] = []
    async with Turnlog(settings) as tl:
        await tl.checkpoints.ensure_ready()  # the topics
        store = Store.open(root / "state" / "projection")
        projector = CheckpointProjector(settings.connection, store, tl.topics)
        await projector.start()
        await projector.catch_up()
        tasks.append(asyncio.create_task(projector.follow()))
        tasks.append(asyncio.create_task(tl.run_worker()))
        service = InboxService(tl, root / "state" / "projection", refresh_seconds=0.2)
        await service.start()
        server = InboxServer(create_app(service, viewers), port=0)
        await server.start()
        playwright = await async_playwright().start()
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield Inbox(server.url, tl, settings, viewers, browser, service, tag)
        finally:
            await browser.close()
            await playwright.stop()
            service.closing.set()
            await server.stop()
            await service.stop()
            projector.request_stop()
            for task in tasks[:1]:
                await task
            await projector.stop()
            store.close()
    for task in tasks[1:]:
        await task  # the worker stopped with the Turnlog


async def _resumed(inbox: Inbox, token_id: str, timeout: float = 45) -> TurnResumed:
    """The TurnResumed of ``token_id``, read from the resumed topic."""
    async with inbox.tl.resumed(group_id=f"reader-{uuid.uuid4().hex[:8]}") as turns:

        async def find() -> TurnResumed:
            async for turn in turns:
                if isinstance(turn, TurnResumed) and turn.token_id == token_id:
                    return turn
            raise AssertionError("the resumed topic ended")

        return await asyncio.wait_for(find(), timeout)


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"waited {timeout:g}s for {what}")
        await asyncio.sleep(0.1)


def _checkpoint(thread: str, scope: str = "tenant-a") -> TurnCheckpoint:
    return dataclasses.replace(sample_checkpoint(thread), scope_hash=scope)


def _approval(thread: str, arguments: Any) -> TurnCheckpoint:
    call = ReservedCall("call-deploy", "deploy", arguments)
    return dataclasses.replace(
        sample_checkpoint(thread),
        tool_call_id=call.id,
        name=APPROVE_TOOL_CALL,
        messages=captured_messages(
            [{"role": "user", "content": "Scale billing."}], "Deploying now.", [call]
        ),
    )


async def _csrf(page: Page) -> str:
    value = await page.locator("input[name=csrf]").first.get_attribute("value")
    assert value
    return value


async def test_a_pause_is_answered_in_the_browser_and_resumes_once(inbox: Inbox) -> None:
    first = await inbox.context(["tenant-a"])
    second = await inbox.context(["tenant-a"])
    phone = await inbox.context(
        ["tenant-a"], viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    try:
        page = await first.new_page()
        await page.goto(inbox.url)
        # The list is live: a pause made after the page loaded appears without a reload.
        thread = inbox.thread("browser-ask")
        paused = await inbox.pause(sample_checkpoint(thread), QUESTION)
        row = page.locator(f"li.pause[data-token='{paused.token_id}']")
        await expect(row).to_be_visible(timeout=15_000)
        await expect(row).to_contain_text("Which region?")
        await expect(row).to_contain_text(thread)
        await expect(row).to_contain_text("ask_user")
        await page.screenshot(path=str(SHOTS / "inbox-list.png"), full_page=True)

        # Keyboard only: Tab to the pause's link, Enter opens it.
        link = row.locator("a.open")
        for _ in range(30):
            await page.keyboard.press("Tab")
            if await link.evaluate("el => el === document.activeElement"):
                break
        else:
            raise AssertionError("Tab never reached the pause's link")
        await page.keyboard.press("Enter")
        await expect(page.get_by_role("heading", name="The conversation so far")).to_be_visible()
        await expect(page.locator(".messages")).to_contain_text("Deploy the billing service.")
        await page.screenshot(path=str(SHOTS / "inbox-detail.png"), full_page=True)

        # A second browser has the same pause open, its live stream cut (an old tab).
        other = await second.new_page()
        await other.route("**/events*", lambda route: route.abort())
        await other.goto(f"{inbox.url}/pause/{paused.token_id}")
        await other.get_by_label("us", exact=True).check()

        # On a phone: readable, nothing wider than the screen.
        small = await phone.new_page()
        await small.goto(inbox.url)
        await expect(small.locator(f"li.pause[data-token='{paused.token_id}']")).to_be_visible()
        await small.screenshot(path=str(SHOTS / "inbox-list-phone.png"), full_page=True)
        await small.goto(f"{inbox.url}/pause/{paused.token_id}")
        await small.screenshot(path=str(SHOTS / "inbox-detail-phone.png"), full_page=True)
        assert await small.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

        # Answer with the keyboard: the choice by its label, Space to pick, the button by name.
        await page.get_by_label("eu").focus()
        await page.keyboard.press("Space")
        await page.get_by_label("Or write another answer").fill("and keep a replica in us")
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#outcome")).to_have_text(
            "sent: the agent continues with your answer", timeout=45_000
        )
        turn = await _resumed(inbox, paused.token_id)
        answered = [m for m in turn.history if m.get("tool_call_id") == "call-1"]
        assert len(answered) == 1
        assert '"eu"' in answered[0]["content"] and "keep a replica" in answered[0]["content"]

        # The second browser answers the same pause: already answered, nothing published.
        await other.get_by_role("button", name="Send answer").click()
        await expect(other.locator("#outcome")).to_have_text("someone else answered first")

        # And the pause left every list, live (the phone's list was left open on the detail
        # page; a fresh list no longer has it).
        lister = await first.new_page()
        await lister.goto(inbox.url)
        gone = lister.locator(f"li.pause[data-token='{paused.token_id}']")
        await expect(gone).to_have_count(0, timeout=15_000)
    finally:
        for context in (first, second, phone):
            await context.close()


async def test_a_pause_answered_elsewhere_leaves_the_open_list_live(inbox: Inbox) -> None:
    context = await inbox.context(["tenant-a"])
    try:
        paused = await inbox.pause(sample_checkpoint(inbox.thread("elsewhere")), QUESTION)
        page = await context.new_page()
        await page.goto(inbox.url)
        row = page.locator(f"li.pause[data-token='{paused.token_id}']")
        await expect(row).to_be_visible(timeout=15_000)
        detail = await context.new_page()
        await detail.goto(f"{inbox.url}/pause/{paused.token_id}")
        # Answered through the library, not the inbox.
        answer = {"answers": [{"selections": ["us"], "other": None}]}
        await inbox.tl.answer(paused.token, answer, **paused.axes)
        await expect(row).to_have_count(0, timeout=45_000)
        await expect(detail.locator("#pause-status")).to_contain_text("Already answered")
        await expect(detail.get_by_role("button", name="Send answer")).to_be_disabled()
    finally:
        await context.close()


async def test_the_open_list_follows_what_moved_and_pages_on(inbox: Inbox) -> None:
    # The same inbox served with pages of two, for a scope of this test's own.
    server = InboxServer(create_app(inbox.service, inbox.viewers, page_size=2), port=0)
    await server.start()
    scope = f"paged-{inbox.tag}"
    context = await inbox.context([scope], url=server.url)
    try:
        made = {}
        for name, ttl in (("a", 3600), ("b", 3700), ("c", 3800)):  # a closes soonest
            cp = _checkpoint(inbox.thread(f"paged-{name}"), scope)
            made[name] = await inbox.pause(cp, QUESTION, ttl=ttl)

        def row(of: Page, name: str) -> Any:
            return of.locator(f"li.pause[data-token='{made[name].token_id}']")

        async def projected() -> bool:
            store = inbox.service.store
            return all(store.pause_for_token(m.token_id) is not None for m in made.values())

        await _until(projected, "the inbox's projection to hold the three pauses")
        page = await context.new_page()
        await page.goto(server.url)
        await expect(page.locator("li.pause")).to_have_count(2, timeout=15_000)
        await expect(row(page, "a")).to_be_visible()
        await expect(row(page, "b")).to_be_visible()
        await page.evaluate("window.notReloaded = true")

        # The next page holds the third, and leads back to the first.
        other = await context.new_page()
        await other.goto(server.url)
        await other.get_by_role("link", name="Next page").click()
        await expect(row(other, "c")).to_be_visible()
        await expect(other.locator("li.pause")).to_have_count(1)
        assert "after=" in other.url
        await other.get_by_role("link", name="First page").click()
        await expect(row(other, "a")).to_be_visible()

        # Answered elsewhere (through the library): its row leaves the open page.
        answer = {"answers": [{"selections": ["us"], "other": None}]}
        await inbox.tl.answer(made["a"].token, answer, **made["a"].axes)
        await expect(row(page, "a")).to_have_count(0, timeout=45_000)
        await expect(page.locator("#list-status")).to_have_text("1 waiting on this page")
        # A new pause that closes before the page's last: it appears, in the list's order.
        cp = _checkpoint(inbox.thread("paged-d"), scope)
        made["d"] = await inbox.pause(cp, QUESTION, ttl=1800)
        await expect(row(page, "d")).to_be_visible(timeout=15_000)
        await expect(row(page, "d")).to_contain_text(inbox.thread("paged-d"))
        tokens = await page.locator("li.pause").evaluate_all(
            "rows => rows.map(r => r.dataset.token)"
        )
        assert tokens == [made["b"].token_id, made["d"].token_id]  # oldest first
        assert await page.evaluate("window.notReloaded === true")  # never reloaded
    finally:
        await context.close()
        await server.stop()


async def test_a_forgotten_pause_leaves_the_open_list_and_page_live(inbox: Inbox) -> None:
    context = await inbox.context(["tenant-a"])
    try:
        thread = inbox.thread("forgotten")
        paused = await inbox.pause(sample_checkpoint(thread), QUESTION)
        page = await context.new_page()
        await page.goto(inbox.url)
        row = page.locator(f"li.pause[data-token='{paused.token_id}']")
        await expect(row).to_be_visible(timeout=15_000)
        detail = await context.new_page()
        await detail.goto(f"{inbox.url}/pause/{paused.token_id}")
        await forget_thread(inbox.settings, inbox.tl.topics, thread)
        await expect(row).to_have_count(0, timeout=30_000)
        await expect(detail.locator("#pause-status")).to_have_text("no longer available")
        await expect(detail.get_by_role("button", name="Send answer")).to_be_disabled()
    finally:
        await context.close()


async def test_tool_approval_approve_edit_validated_and_reject_with_reason(inbox: Inbox) -> None:
    context = await inbox.context(["tenant-a"])
    try:
        page = await context.new_page()
        pauses = {}
        for name in ("approve", "edit", "reject"):
            cp = _approval(inbox.thread(f"approval-{name}"), DEPLOY)
            pauses[name] = await inbox.pause(
                cp, approval_request("deploy", DEPLOY), APPROVE_TOOL_CALL
            )

        async def open_detail(name: str) -> None:
            await page.goto(inbox.url)
            row = page.locator(f"li.pause[data-token='{pauses[name].token_id}']")
            await expect(row).to_be_visible(timeout=15_000)
            await expect(row).to_contain_text("approve deploy")
            await expect(row).to_contain_text("replicas")
            await row.locator("a.open").click()

        await open_detail("edit")
        await page.screenshot(path=str(SHOTS / "inbox-detail-approval.png"), full_page=True)
        await page.get_by_label("Approve with edited arguments").check()
        arguments = page.get_by_label("Arguments (JSON; used when you edit)")
        await arguments.fill('{"service": "billing", "replicas": "five"}')
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#form-problem")).to_contain_text("must stay a number")
        await arguments.fill('{"service": "billing", "replicas": 5, "force": true}')
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#form-problem")).to_contain_text("no argument 'force'")
        await arguments.fill('{"service": "billing", "replicas": 5}')
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#outcome")).to_have_text(
            "sent: the agent runs the call with your edited arguments", timeout=45_000
        )
        edited = approved_call(await _resumed(inbox, pauses["edit"].token_id))
        assert edited is not None and edited["arguments"] == {"service": "billing", "replicas": 5}

        await open_detail("reject")
        await page.get_by_label("Reject", exact=True).check()
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#form-problem")).to_contain_text("say why")
        await page.get_by_label("Reason or note").fill("Not during the freeze.")
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#outcome")).to_have_text(
            "sent: the agent continues with your rejection", timeout=45_000
        )
        rejected = await _resumed(inbox, pauses["reject"].token_id)
        assert approved_call(rejected) is None
        said = [m["content"] for m in rejected.history if m.get("tool_call_id") == "call-deploy"]
        assert said and "rejected" in said[0] and "Not during the freeze." in said[0]

        await open_detail("approve")
        await page.get_by_label("Approve as shown").check()
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#outcome")).to_have_text(
            "sent: the agent runs the call", timeout=45_000
        )
        approved = approved_call(await _resumed(inbox, pauses["approve"].token_id))
        assert approved is not None and approved["arguments"] == DEPLOY
    finally:
        await context.close()


async def test_an_expired_pause_cannot_be_answered(inbox: Inbox) -> None:
    context = await inbox.context(["tenant-a"])
    try:
        paused = await inbox.pause(sample_checkpoint(inbox.thread("expiring")), QUESTION, ttl=6)
        listed = await context.new_page()
        await listed.goto(inbox.url)
        row = listed.locator(f"li.pause[data-token='{paused.token_id}']")
        await expect(row).to_be_visible(timeout=15_000)
        page = await context.new_page()
        await page.goto(f"{inbox.url}/pause/{paused.token_id}")
        csrf = await _csrf(page)
        # The window closes: the open page says so and the open list drops the pause, live.
        await expect(page.locator("#pause-status")).to_contain_text("xpired", timeout=20_000)
        await expect(page.get_by_role("button", name="Send answer")).to_be_disabled()
        await expect(row).to_have_count(0)
        # Sent anyway, straight to the endpoint: refused, and nothing published.
        sent = await page.request.post(
            f"{inbox.url}/pause/{paused.token_id}/answer",
            form={"csrf": csrf, "q0": "eu"},
            headers={"Accept": "application/json"},
        )
        assert sent.status == 409
        assert "expired" in (await sent.json())["words"]
        assert inbox.service.answered_here(paused.token_id) is None
    finally:
        await context.close()


async def test_scopes_decide_what_is_seen_and_answered_and_every_post_needs_csrf(
    inbox: Inbox,
) -> None:
    theirs = await inbox.pause(_checkpoint(inbox.thread("other-tenant"), "tenant-b"), QUESTION)
    mine = await inbox.pause(_checkpoint(inbox.thread("own-tenant"), "tenant-a"), QUESTION)
    context = await inbox.context(["tenant-a"])
    try:
        page = await context.new_page()
        response = await page.goto(inbox.url)
        assert response is not None
        await expect(page.locator(f"li.pause[data-token='{mine.token_id}']")).to_be_visible(
            timeout=15_000
        )
        await expect(page.locator(f"li.pause[data-token='{theirs.token_id}']")).to_have_count(0)
        headers = response.headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        # No token of any kind in the page's source: the session cookie is HttpOnly.
        source = await page.content()
        assert "eyJ" not in source and mine.token not in source
        cookies = {c["name"]: c for c in await context.cookies()}
        assert cookies["turnlog_session"]["httpOnly"]
        assert cookies["turnlog_session"]["sameSite"] == "Strict"
        assert await page.evaluate("document.cookie") == ""

        # Another tenant's pause: not found, by page and by POST (with a good CSRF token).
        csrf = await _csrf(page)
        hidden = await page.goto(f"{inbox.url}/pause/{theirs.token_id}")
        assert hidden is not None and hidden.status == 404
        posted = await page.request.post(
            f"{inbox.url}/pause/{theirs.token_id}/answer",
            form={"csrf": csrf, "q0": "eu"},
            headers={"Accept": "application/json"},
        )
        assert posted.status == 404
        assert inbox.service.answered_here(theirs.token_id) is None

        # A POST without the CSRF token, or with another session's, is refused.
        for form in ({"q0": "eu"}, {"q0": "eu", "csrf": "0" * 64}):
            refused = await page.request.post(
                f"{inbox.url}/pause/{mine.token_id}/answer",
                form=form,
                headers={"Accept": "application/json"},
            )
            assert refused.status == 403
            assert "CSRF" in (await refused.json())["error"]
        assert inbox.service.answered_here(mine.token_id) is None

        # An operator with every scope sees both.
        operator = await inbox.context(["*"])
        try:
            wide = await operator.new_page()
            await wide.goto(inbox.url)
            for token_id in (mine.token_id, theirs.token_id):
                await expect(wide.locator(f"li.pause[data-token='{token_id}']")).to_be_visible()
            # Filters: by interaction and by a part of the thread id.
            await wide.get_by_label("Thread").fill("other-tenant")
            await wide.get_by_label("Thread").press("Enter")
            await expect(wide.locator("li.pause")).to_have_count(1)
            await expect(wide.locator("li.pause")).to_contain_text(inbox.thread("other-tenant"))
            await wide.goto(f"{inbox.url}/?interaction=approve_tool_call&thread={inbox.tag}")
            text = await wide.locator("#rows").inner_text()
            assert inbox.thread("other-tenant") not in text
        finally:
            await operator.close()
    finally:
        await context.close()


async def test_without_a_login_the_inbox_shows_nothing(inbox: Inbox) -> None:
    context = await inbox.browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(inbox.url)
        assert re.search(r"/login$", page.url)
        await page.get_by_label("Viewer token").fill("not-a-token")
        await page.get_by_role("button", name="Log in").click()
        await expect(page.get_by_role("alert")).to_contain_text("not valid")
        events = await page.request.get(f"{inbox.url}/events")
        assert events.status == 401
        assert json.loads(await events.text()) == {"error": "log in first"}
    finally:
        await context.close()
