"""The person's words (issue 29, item 2) in Chromium, on a phone (390x844) and a desktop, against
the deployment of ``test_inbox_browser`` (a real broker, projector, worker and inbox).

What a person reads after sending: what happens next, beside the Send button, the status above
agreeing with it -- also when two inboxes race; a mistake, with or without JavaScript, leaves the
form as it was filled; a stale form after an inbox restart comes back fresh; no page is raw JSON;
a custom interaction's box starts from its schema and bad JSON is told by line and column;
"Waiting" and "Time left" count; on a phone the form is one tap past a long conversation.
Screenshots go to ``build/screenshots/inbox-words-*.png``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from playwright.async_api import BrowserContext, Page, expect

from tests.deployment import sample_checkpoint
from tests.integration import test_inbox_browser as browser
from tests.integration.test_inbox_browser import (
    DEPLOY,
    QUESTION,
    Inbox,
    _approval,
    _resumed,
    _until,
)
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_call
from turnlog.inbox.app import create_app
from turnlog.inbox.auth import Csrf
from turnlog.inbox.server import InboxServer
from turnlog.inbox.service import InboxService
from turnlog.inbox.views import pause_view

#: The deployment of the browser tests, one for this module.
inbox = browser.inbox

PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
}
DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 900}}
SIZES = {"phone": PHONE, "desktop": DESKTOP}
SLOT = {
    "type": "record",
    "name": "PickSlot",
    "fields": [
        {"name": "date", "type": "string"},
        {"name": "seats", "type": "int"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
GREEN = "rgb(26, 127, 55)"  # --ok, the colour of a call that ran


def _shot(name: str) -> str:
    return str(browser.SHOTS / f"inbox-words-{name}.png")


async def _in_sight(page: Page, selector: str) -> bool:
    """Whether the element is inside the viewport as the page now stands (not scrolled to)."""
    return bool(
        await page.locator(selector).evaluate(
            "el => { const r = el.getBoundingClientRect();"
            " return r.top >= -1 && r.bottom <= window.innerHeight + 1 && r.height > 0; }"
        )
    )


async def _context(inbox: Inbox, options: dict[str, Any], *, script: bool) -> BrowserContext:
    """A browser context signed in, with or without JavaScript (then through the sign-in
    form: the login link's fragment is read by the page's script)."""
    if script:
        return await inbox.context(["tenant-a"], **options)
    context = await inbox.browser.new_context(java_script_enabled=False, **options)
    token = inbox.viewers.mint("pat", ["tenant-a"], ttl=timedelta(hours=1), now=utc_now())
    page = await context.new_page()
    await page.goto(f"{inbox.url}/login")
    await page.get_by_label("Viewer token").fill(token)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
    await page.close()
    return context


async def _open(context: BrowserContext, inbox: Inbox, token_id: str) -> Page:
    """The pause's page, once the inbox's projection has it."""

    async def projected() -> bool:
        return pause_view(inbox.service.store, token_id, utc_now()) is not None

    await _until(projected, "the pause to reach the inbox's projection")
    page = await context.new_page()
    await page.goto(f"{inbox.url}/pause/{token_id}")
    return page


async def _says_who(page: Page) -> bool:
    """Whether the page, as the server renders it again, says the viewer answered."""
    await page.reload()
    return await page.locator("#pause-status").inner_text() == "Answered by you"


async def test_an_outcome_says_what_happens_next_beside_the_send_button(inbox: Inbox) -> None:
    for size, options in SIZES.items():
        context = await inbox.context(["tenant-a"], **options)
        try:
            cp = _approval(inbox.thread(f"words-reject-{size}"), DEPLOY)
            rejected = await inbox.pause(cp, approval_request("deploy", DEPLOY), APPROVE_TOOL_CALL)
            page = await _open(context, inbox, rejected.token_id)
            await page.get_by_label("Reject", exact=True).check()
            await page.get_by_label("Reason or note").fill("Not during the freeze.")
            await page.get_by_role("button", name="Send answer").click()
            outcome = page.locator("#outcome")
            await expect(outcome).to_have_text(
                "sent: the agent continues with your rejection", timeout=45_000
            )
            await expect(page.locator("#pause-status")).to_have_text("Answered by you")
            # Not the green of a call that ran; where the person looks: beside the button, in
            # sight.
            assert await outcome.evaluate("el => getComputedStyle(el).color") != GREEN
            button = await page.get_by_role("button", name="Send answer").bounding_box()
            said = await outcome.bounding_box()
            assert button is not None and said is not None
            assert 0 <= said["y"] - (button["y"] + button["height"]) < 40
            await page.screenshot(path=_shot(f"rejected-{size}"))
            assert await _in_sight(page, "#outcome"), await page.locator("#outcome").evaluate(
                "el => [JSON.stringify(el.getBoundingClientRect()), window.innerHeight,"
                " window.scrollY, document.documentElement.scrollHeight]"
            )
            turn = await _resumed(inbox, rejected.token_id)
            assert approved_call(turn) is None

            await _until(lambda p=page: _says_who(p), "the reloaded page to say who answered")

            cp = _approval(inbox.thread(f"words-approve-{size}"), DEPLOY)
            approved = await inbox.pause(cp, approval_request("deploy", DEPLOY), APPROVE_TOOL_CALL)
            page = await _open(context, inbox, approved.token_id)
            await page.get_by_label("Approve as shown").check()
            await page.get_by_role("button", name="Send answer").click()
            await expect(outcome := page.locator("#outcome")).to_have_text(
                "sent: the agent runs the call", timeout=45_000
            )
            assert await outcome.evaluate("el => getComputedStyle(el).color") == GREEN
            await page.screenshot(path=_shot(f"approved-{size}"))
        finally:
            await context.close()


@asynccontextmanager
async def _second_inbox(inbox: Inbox) -> AsyncIterator[str]:
    """Another inbox over the same deployment and projection, as a second replica runs."""
    service = InboxService(inbox.tl, inbox.service._projection, refresh_seconds=0.2)
    await service.start()
    server = InboxServer(create_app(service, inbox.viewers), port=0)
    await server.start()
    try:
        yield server.url
    finally:
        service.closing.set()
        await server.stop()
        await service.stop()


async def test_two_inboxes_racing_each_say_what_became_of_their_answer(inbox: Inbox) -> None:
    paused = await inbox.pause(sample_checkpoint(inbox.thread("words-race")), QUESTION)
    desk = await inbox.context(["tenant-a"], **DESKTOP)
    phone = await inbox.browser.new_context(**PHONE)
    try:
        async with _second_inbox(inbox) as other_url:
            token = inbox.viewers.mint("sam", ["tenant-a"], ttl=timedelta(hours=1),
                                       now=utc_now())  # fmt: skip
            login = await phone.new_page()
            await login.goto(f"{other_url}/login#token={token}")
            await expect(login.get_by_role("heading", name="Waiting for you")).to_be_visible()
            pages = [await _open(desk, inbox, paused.token_id)]
            pages.append(await phone.new_page())
            await pages[1].goto(f"{other_url}/pause/{paused.token_id}")
            for page in pages:  # old tabs: neither learns of the other's answer before sending
                await page.route("**/events*", lambda route: route.abort())
                await page.reload()
                await page.get_by_label("us", exact=True).check()
            await pages[0].get_by_role("button", name="Send answer").click()
            await pages[1].get_by_role("button", name="Send answer").click()
            said = []
            for page in pages:
                outcome = page.locator("#outcome")
                await expect(outcome).not_to_have_text("sent; waiting for the worker…",
                                                       timeout=45_000)  # fmt: skip
                await expect(outcome).not_to_have_text("sending…")
                said.append((await page.locator("#pause-status").inner_text(),
                             await outcome.inner_text()))  # fmt: skip
            won = ("Answered by you", "sent: the agent continues with your answer")
            lost = ("Answered by someone else", "someone else answered first")
            assert sorted(said) == sorted([won, lost]), said
            await pages[0].screenshot(path=_shot("race-desktop"))
            await pages[1].screenshot(path=_shot("race-phone"))
    finally:
        await desk.close()
        await phone.close()


async def test_without_javascript_a_mistake_keeps_the_form_and_what_was_typed(
    inbox: Inbox,
) -> None:
    for size, options in SIZES.items():
        context = await _context(inbox, options, script=False)
        try:
            cp = _approval(inbox.thread(f"words-nojs-{size}"), DEPLOY)
            paused = await inbox.pause(cp, approval_request("deploy", DEPLOY), APPROVE_TOOL_CALL)
            page = await _open(context, inbox, paused.token_id)
            await page.get_by_label("Approve with edited arguments").check()
            arguments = page.get_by_label("Arguments (JSON; used when you edit)")
            typed = '{"service": "billing",\n "replicas": 5,}'
            await arguments.fill(typed)
            await page.get_by_label("Reason or note").fill("five for the sale")
            await page.get_by_role("button", name="Send answer").click()
            # The same page, the form as filled, the problem beside the button.
            await expect(page.locator("#form-problem")).to_have_text(
                "the edited arguments: not valid JSON at line 2, column 16: "
                "a name in double quotes was expected (or a comma is extra)"
            )
            await expect(page.get_by_role("heading", name="Not answered")).to_have_count(0)
            await expect(arguments).to_have_value(typed)
            await expect(page.get_by_label("Reason or note")).to_have_value("five for the sale")
            await expect(page.get_by_label("Approve with edited arguments")).to_be_checked()
            await expect(page.locator("#not-sent")).to_be_visible()
            await page.screenshot(path=_shot(f"nojs-mistake-{size}"), full_page=True)
            await arguments.fill('{"service": "billing", "replicas": 5}')
            await page.get_by_role("button", name="Send answer").click()
            await expect(page.locator("#outcome")).to_have_text(
                "sent: the agent runs the call with your edited arguments", timeout=45_000
            )
        finally:
            await context.close()


async def _stale(context: BrowserContext, page: Page) -> None:
    """The page's forms as an inbox that restarted since they were shown finds them."""
    session = next(c["value"] for c in await context.cookies() if c["name"] == "turnlog_session")
    stale = Csrf().token(session)
    await page.evaluate(
        "v => document.querySelectorAll('input[name=csrf]').forEach(el => el.value = v)", stale
    )


async def test_a_stale_form_after_a_restart_comes_back_fresh_and_no_page_is_json(
    inbox: Inbox,
) -> None:
    for size, options in SIZES.items():
        for script in (True, False):
            context = await _context(inbox, options, script=script)
            try:
                thread = inbox.thread(f"words-stale-{size}-{'js' if script else 'nojs'}")
                paused = await inbox.pause(sample_checkpoint(thread), QUESTION)
                page = await _open(context, inbox, paused.token_id)
                await _stale(context, page)
                await page.get_by_label("Or write another answer").fill("eu, and soon")
                await page.get_by_role("button", name="Send answer").click()
                problem = page.locator("#form-problem")
                await expect(problem).to_contain_text("Nothing was sent: this form was out of date")
                assert not (await page.locator("body").inner_text()).lstrip().startswith("{")
                if script:  # the script refreshed the form in place: what was typed is kept
                    await expect(page.get_by_label("Or write another answer")).to_have_value(
                        "eu, and soon"
                    )
                else:  # a fresh, empty form (what failed the check is not filled back in)
                    await page.get_by_label("Or write another answer").fill("eu, and soon")
                await page.screenshot(path=_shot(f"stale-{size}-{'js' if script else 'nojs'}"))
                await page.get_by_role("button", name="Send answer").click()
                await expect(page.locator("#outcome")).to_have_text(
                    "sent: the agent continues with your answer", timeout=45_000
                )
                # The script's endpoints and unknown pages, opened in the window: pages.
                for path in ("/events", "/rows", f"/pause/{paused.token_id}/state", "/nowhere"):
                    await page.goto(f"{inbox.url}{path}")
                    shown = await page.locator("body").inner_text()
                    assert "turnlog inbox" in shown and not shown.lstrip().startswith("{"), path
            finally:
                await context.close()


async def test_a_custom_interaction_starts_from_its_schema_and_bad_json_reads_plainly(
    inbox: Inbox,
) -> None:
    if "pick_slot" not in inbox.tl.interactions:
        inbox.tl.interactions.register("pick_slot", SLOT)  # the worker answers with it too
    for size, options in SIZES.items():
        context = await inbox.context(["tenant-a"], **options)
        try:
            cp = sample_checkpoint(inbox.thread(f"words-slot-{size}"))
            paused = await inbox.pause(cp, {"what": "a slot for the demo"}, "pick_slot")
            page = await _open(context, inbox, paused.token_id)
            box = page.get_by_label("Response (JSON", exact=False)
            await expect(box).to_have_value('{\n  "date": "",\n  "seats": 0\n}')
            await box.fill('{\n  "date": "2026-12-24",\n  "seats": two\n}')
            await page.get_by_role("button", name="Send answer").click()
            problem = page.locator("#form-problem")
            await expect(problem).to_have_text(
                "the response: not valid JSON at line 3, column 12: "
                "a value was expected (text needs double quotes)"
            )
            await page.screenshot(path=_shot(f"custom-{size}"), full_page=True)
            await box.fill('{\n  "date": "2026-12-24",\n  "seats": 2\n}')
            await page.get_by_role("button", name="Send answer").click()
            await expect(page.locator("#outcome")).to_have_text(
                "sent: the agent continues with your answer", timeout=45_000
            )
        finally:
            await context.close()


async def test_waiting_and_time_left_count_and_read_right_without_javascript(
    inbox: Inbox,
) -> None:
    paused = await inbox.pause(sample_checkpoint(inbox.thread("words-count")), QUESTION)
    for size, options in SIZES.items():
        for script in (True, False):
            context = await _context(inbox, options, script=script)
            try:
                page = await _open(context, inbox, paused.token_id)
                waiting, left = page.locator("#waiting"), page.locator("#time-left")
                await expect(waiting).to_have_text(re.compile(r"^\d+[smhd]( \d+[smh])?$"))
                await expect(left).to_have_text(re.compile(r"^(6d 23h|\d+h \d+m)$"))
                if script:
                    before = await waiting.inner_text()
                    await expect(waiting).not_to_have_text(before, timeout=5_000)
                    await page.screenshot(path=_shot(f"countdown-{size}"))
            finally:
                await context.close()


async def test_on_a_phone_the_answer_form_is_one_tap_past_a_long_history(inbox: Inbox) -> None:
    base = sample_checkpoint(inbox.thread("words-long"))
    chat = [
        {"role": "user" if i % 2 else "assistant", "content": f"Message {i}: " + "words " * 40}
        for i in range(40)
    ]
    # The same asking round at the end, forty long messages before it.
    long = dataclasses.replace(base, messages=(*base.messages[:2], *chat, *base.messages[2:]))
    paused = await inbox.pause(long, QUESTION)
    for size, options in SIZES.items():
        context = await inbox.context(["tenant-a"], **options)
        try:
            page = await _open(context, inbox, paused.token_id)
            assert await _in_sight(page, "#jump")
            assert not await _in_sight(page, "#answer-form button[type=submit]")
            await page.screenshot(path=_shot(f"jump-{size}"))
            await page.locator("#jump").click()
            await expect(page.get_by_role("heading", name="Your answer")).to_be_in_viewport()
            await page.screenshot(path=_shot(f"jumped-{size}"))
        finally:
            await context.close()
