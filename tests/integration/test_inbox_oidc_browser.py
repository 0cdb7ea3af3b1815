"""Signing in to the inbox at the team's OpenID Connect provider, in a real browser (Debian's
Chromium, driven by Playwright): the button, the provider's page, the code flow with PKCE back
to the inbox, and a refusal said on the sign-in page, at desktop and phone sizes (screenshots
in ``build/screenshots/``).

The provider is :mod:`tests.oidc_provider`, a local one with real RSA keys (its docstring says
why not a packaged one). Signing in publishes nothing, so the inbox runs without a broker, over
a projection holding one pause.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.integration.test_inbox_browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, _chromium_or_fail
from tests.oidc_provider import LocalProvider, serve_provider
from tests.unit.test_inbox_views import put
from turnlog import Settings, Turnlog
from turnlog.inbox.app import create_app
from turnlog.inbox.auth import ViewerTokens
from turnlog.inbox.oidc_config import OidcConfig
from turnlog.inbox.oidc_flow import Provider
from turnlog.inbox.server import InboxServer
from turnlog.inbox.service import InboxService
from turnlog.projections.store import Store
from turnlog.tokens import Keyring, generate_ed25519

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
DESKTOP = {"viewport": {"width": 1280, "height": 800}}


@dataclass
class Setup:
    url: str
    idp: LocalProvider
    browser: Browser


@pytest.fixture(scope="module")
def idp() -> Iterator[LocalProvider]:
    users = {"alice": {"groups": ["team-a"]}, "nobody": {"groups": ["staff"]}}
    with serve_provider(LocalProvider(users=users)) as served:
        yield served


@pytest.fixture(scope="module")
async def setup(
    idp: LocalProvider, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Setup]:
    _chromium_or_fail()
    SHOTS.mkdir(parents=True, exist_ok=True)
    root = tmp_path_factory.mktemp("oidc")
    with Store.open(root / "projection") as store:
        put(store, "billing", "t-billing", request={"question": "Ship the billing fix?"})
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", state_dir=root / "state", broker_timeout_seconds=1
    )
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    viewers = ViewerTokens(Keyring.ed25519("v", generate_ed25519("v")[0]))
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(tl, root / "projection", projection_wait=0) as service,
    ):
        config = OidcConfig(  # no redirect base: the inbox's own address, from the request
            issuer=idp.issuer,
            client_id=idp.client_id,
            client_secret=idp.client_secret,
            scope_map={"team-a": frozenset({"tenant-a"})},
            name="Local IdP",
        )
        app = create_app(service, viewers, provider=Provider(config))
        server = InboxServer(app, port=0)
        idp.redirect_uris.append(f"{server.url}/login/callback")
        await server.start()
        playwright = await async_playwright().start()
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield Setup(server.url, idp, browser)
        finally:
            await browser.close()
            await playwright.stop()
            service.closing.set()
            await server.stop()


async def _sign_in_at_provider(page: Page, user: str) -> None:
    await page.get_by_role("link", name="Sign in with Local IdP").click()
    await expect(page.get_by_role("heading", name="Local provider")).to_be_visible()
    await page.get_by_label("User").fill(user)
    await page.get_by_role("button", name="Continue").click()


async def test_a_person_signs_in_at_the_provider_and_sees_their_pauses(setup: Setup) -> None:
    context = await setup.browser.new_context(**DESKTOP)
    page = await context.new_page()
    await page.goto(f"{setup.url}/")
    await expect(page).to_have_url(f"{setup.url}/login")
    await page.screenshot(path=SHOTS / "oidc-login-desktop.png", full_page=True)
    await _sign_in_at_provider(page, "alice")
    await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
    await expect(page).to_have_url(f"{setup.url}/")
    await expect(page.locator(".who")).to_have_text("Signed in as alice")
    await expect(page.get_by_role("link", name="Ship the billing fix?")).to_be_visible()
    cookies = {c["name"]: c for c in await context.cookies()}
    assert cookies["turnlog_session"]["httpOnly"] and cookies["turnlog_session"]["sameSite"] == (
        "Strict"
    )
    assert "turnlog_oidc" not in cookies  # the flow's cookie is used once
    await page.screenshot(path=SHOTS / "oidc-signed-in-desktop.png", full_page=True)
    await page.get_by_role("button", name="Log out").click()
    await expect(page).to_have_url(f"{setup.url}/login")
    await context.close()


async def test_refusals_are_one_line_on_the_sign_in_page_on_a_phone(setup: Setup) -> None:
    context = await setup.browser.new_context(**PHONE)
    page = await context.new_page()
    await page.goto(f"{setup.url}/login")
    await _sign_in_at_provider(page, "nobody")
    problem = page.locator("#sign-in-problem")
    await expect(problem).to_have_text(
        "Not signed in: signed in as nobody, but your 'groups' claim gives no inbox scope: "
        "ask your operator to map one of your groups or roles."
    )
    setup.idp.id_token_changes = {"nonce": "replayed"}
    try:
        await _sign_in_at_provider(page, "alice")
        await expect(problem).to_contain_text("Not signed in: bad nonce")
    finally:
        setup.idp.id_token_changes = {}
    await page.screenshot(path=SHOTS / "oidc-refused-phone.png", full_page=True)
    await page.goto(f"{setup.url}/login/callback?code=stolen&state=made-up")
    await expect(problem).to_contain_text("Not signed in: bad state")
    await expect(page.get_by_role("link", name="Sign in with Local IdP")).to_be_visible()
    assert "turnlog_session" not in {c["name"] for c in await context.cookies()}
    await context.close()
