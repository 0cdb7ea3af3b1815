"""Sign-in from the team's OpenID Connect provider, over HTTP: the code flow with PKCE, Bearer
access tokens, key rotation, the claim-to-scope mapping and every refusal in one line.

The provider is :mod:`tests.oidc_provider` (a local one, real RSA keys; its docstring says why
not a packaged one), on a real socket; the inbox is the ASGI app in process, without a broker.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.oidc_provider import LocalProvider, serve_provider
from tests.unit.test_inbox_app import BASE, projection  # noqa: F401  (a fixture)
from turnlog import Settings, Turnlog
from turnlog.errors import SettingError
from turnlog.inbox.app import create_app
from turnlog.inbox.auth import ViewerTokens
from turnlog.inbox.oidc import ProviderRefused, claim_values
from turnlog.inbox.oidc_config import OidcConfig, build
from turnlog.inbox.oidc_flow import Provider, challenge
from turnlog.inbox.service import InboxService
from turnlog.tokens import Keyring, generate_ed25519

SCOPE_MAP = {"inbox-operators": frozenset({"*"}), "team-a": frozenset({"tenant-a"})}


class Clock:
    """The provider's monotonic clock, moved by the test (the refetch interval's)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Env:
    http: httpx.AsyncClient
    idp: LocalProvider
    provider: Provider
    clock: Clock

    async def begin(self) -> dict[str, str]:
        """``GET /login/provider``: the authorization request's parameters."""
        going = await self.http.get("/login/provider")
        assert going.status_code == 303, going.text
        url = urlsplit(going.headers["location"])
        assert f"{url.scheme}://{url.netloc}{url.path}" == f"{self.idp.issuer}/authorize"
        return {k: v[0] for k, v in parse_qs(url.query).items()}

    def at_provider(self, params: dict[str, str], user: str = "alice") -> str:
        """The provider's sign-in form posted: the callback URL it redirects to."""
        done = httpx.post(f"{self.idp.issuer}/authorize", data={**params, "username": user})
        assert done.status_code == 302, done.text
        return done.headers["location"]

    async def callback(self, location: str) -> httpx.Response:
        url = urlsplit(location)
        assert f"{url.scheme}://{url.netloc}" == BASE
        return await self.http.get(f"{url.path}?{url.query}")

    async def sign_in(self, user: str = "alice") -> httpx.Response:
        return await self.callback(self.at_provider(await self.begin(), user))


@pytest.fixture
def idp() -> Iterator[LocalProvider]:
    users = {
        "alice": {"groups": ["team-a", "staff"], "email": "alice@example.org"},
        "olga": {"groups": ["inbox-operators"]},
        "nobody": {"groups": ["staff"]},
    }
    local = LocalProvider(redirect_uris=[f"{BASE}/login/callback"], users=users)
    with serve_provider(local) as served:
        yield served


def _config(idp: LocalProvider, **changes: Any) -> OidcConfig:
    settings: dict[str, Any] = {
        "issuer": idp.issuer,
        "client_id": idp.client_id,
        "client_secret": idp.client_secret,
        "audiences": (idp.api_audience,),
        "scope_map": SCOPE_MAP,
        "redirect_base": BASE,
        "name": "Local IdP",
        **changes,
    }
    return OidcConfig(**settings)


@pytest.fixture
async def env(
    idp: LocalProvider,
    projection: Path,  # noqa: F811
    tmp_path: Path,
) -> AsyncIterator[Env]:
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "state", broker_timeout_seconds=1
    )
    viewers = ViewerTokens(Keyring.ed25519("v", generate_ed25519("v")[0]))
    clock = Clock()
    provider = Provider(_config(idp), clock=clock)
    await provider.discover()
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(tl, projection, projection_wait=0) as service,
    ):
        app = create_app(service, viewers, provider=provider)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            yield Env(http, idp, provider, clock)


def _problem(page: httpx.Response) -> str:
    """The one line a refused sign-in shows (and that the page is a page, not JSON)."""
    assert page.headers["content-type"].startswith("text/html")
    assert "Traceback" not in page.text and not page.text.lstrip().startswith("{")
    found = re.search(
        r'<p class="problem" role="alert" id="sign-in-problem">([^<]*)</p>', page.text
    )
    assert found, page.text
    assert "\n" not in found.group(1)
    return html.unescape(found.group(1))


async def test_the_code_flow_with_pkce_signs_in_and_the_session_is_the_usual_one(env: Env) -> None:
    login = await env.http.get("/login")
    assert "Sign in with Local IdP" in login.text
    params = await env.begin()
    assert params["code_challenge_method"] == "S256"
    assert params["redirect_uri"] == f"{BASE}/login/callback"
    assert params["client_id"] == env.idp.client_id and "openid" in params["scope"].split()
    assert params["state"] and params["nonce"] and len(params["code_challenge"]) == 43
    done = await env.callback(env.at_provider(params))
    assert done.status_code == 200, done.text
    assert '<meta http-equiv="refresh" content="0;url=/">' in done.text
    cookie = done.headers.get_list("set-cookie")
    session = next(c for c in cookie if c.startswith("turnlog_session="))
    assert "httponly" in session.lower() and "samesite=strict" in session.lower()
    page = await env.http.get("/")
    assert page.status_code == 200 and "Signed in as <strong>alice</strong>" in page.text
    assert 't-mine"' in page.text and "t-theirs" not in page.text  # team-a: tenant-a only
    # The session's rules hold as for a pasted token: CSRF on sign-out, and then it is gone.
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert csrf
    assert (await env.http.post("/logout", data={"csrf": csrf.group(1)})).status_code == 303
    assert (await env.http.get("/")).headers["location"] == "/login"


async def test_the_flow_cookie_is_used_once(env: Env) -> None:
    location = env.at_provider(await env.begin())
    assert (await env.callback(location)).status_code == 200
    again = await env.callback(location)
    assert again.status_code == 401 and _problem(again).startswith("Not signed in: bad state")


async def test_a_bearer_access_token_of_the_provider_is_a_viewer(env: Env) -> None:
    token = env.idp.token_for("olga")
    page = await env.http.get("/", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and "t-theirs" in page.text  # inbox-operators: every scope
    other = env.idp.token_for("olga", audience="api://someone-else")
    refused = await env.http.get("/rows", headers={"Authorization": f"Bearer {other}"})
    assert refused.status_code == 401
    expired = env.idp.token_for("olga", ttl=-3600)
    assert (
        await env.http.get("/rows", headers={"Authorization": f"Bearer {expired}"})
    ).status_code == 401
    with pytest.raises(ProviderRefused, match="the token expired at"):
        env.provider.verifier.check(expired)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"iss": "https://evil.example"}, "wrong issuer: the token is from 'https://evil.example'"),
        ({"aud": "another-client"}, "wrong audience: the token is for 'another-client'"),
        ({"exp": 1_700_000_000}, "the token expired at 2023-11-14 22:13:20 UTC"),
        ({"nonce": "not-this-one-\u00e9"}, "bad nonce: the ID token is not this sign-in's"),
    ],
    ids=["wrong-issuer", "wrong-audience", "expired", "bad-nonce"],
)
async def test_an_id_token_that_does_not_verify_is_refused_in_one_line(
    env: Env, changes: dict[str, Any], words: str
) -> None:
    env.idp.id_token_changes = changes
    page = await env.sign_in()
    assert page.status_code == 401
    assert _problem(page).startswith(f"Not signed in: {words}")
    assert "turnlog_session=" not in page.headers.get("set-cookie", "")
    assert (await env.http.get("/")).status_code == 303


async def test_a_bad_state_and_a_pkce_mismatch_are_refused_in_one_line(env: Env) -> None:
    params = await env.begin()
    location = env.at_provider(params).replace(params["state"], "forged-state")
    page = await env.callback(location)
    assert _problem(page).startswith("Not signed in: bad state: the provider's answer is not")
    # A challenge swapped on the way (the code is then worth nothing without its verifier).
    params = await env.begin()
    params["code_challenge"] = challenge("a verifier the inbox never made")
    page = await env.callback(env.at_provider(params))
    assert page.status_code == 401
    said = _problem(page)
    assert said == "Not signed in: Local IdP refused the code (400: PKCE verification failed)."


async def test_a_refusal_at_the_provider_and_no_scope_are_said(env: Env) -> None:
    params = await env.begin()
    denied = await env.http.get(
        f"/login/callback?error=access_denied&error_description=The+user+said+no&state={params['state']}"
    )
    assert _problem(denied) == "Not signed in: Local IdP refused the sign-in: The user said no."
    forged = await env.http.get("/login/callback?error=x&error_description=Call+us&state=made-up")
    assert _problem(forged).startswith("Not signed in: bad state") and "Call us" not in forged.text
    await env.begin()
    odd = await env.http.get("/login/callback?code=x&state=%C3%A9t%C3%A9")  # not ASCII
    assert odd.status_code == 401 and _problem(odd).startswith("Not signed in: bad state")
    page = await env.sign_in("nobody")
    assert _problem(page).startswith(
        "Not signed in: signed in as nobody, but your 'groups' claim gives no inbox scope"
    )


async def test_a_rotated_key_is_fetched_once_and_a_removed_one_refused(env: Env) -> None:
    old_token = env.idp.token_for("alice")
    bearer = {"Authorization": f"Bearer {old_token}"}
    assert (await env.http.get("/rows", headers=bearer)).status_code == 200
    old_key = env.idp.rotate()
    fetched = env.idp.jwks_hits
    new_token = env.idp.token_for("alice")
    # Within the refetch interval an unknown kid waits for it (and costs no fetch) ...
    env.clock.now += 1
    assert (
        await env.http.get("/rows", headers={"Authorization": f"Bearer {new_token}"})
    ).status_code == 401
    assert env.idp.jwks_hits == fetched
    # ... past it, the first token of the new key refetches the JWKS, and is a viewer.
    env.clock.now += env.provider.config.refetch_seconds
    ok = await env.http.get("/rows", headers={"Authorization": f"Bearer {new_token}"})
    assert ok.status_code == 200 and env.idp.jwks_hits == fetched + 1
    # The removed key's tokens are refused, unexpired as they are, and made-up kids cost nothing.
    assert (await env.http.get("/rows", headers=bearer)).status_code == 401
    forged = env.idp.sign(
        {"iss": env.idp.issuer, "sub": "x", "aud": env.idp.client_id, "exp": 2**31},
        key=("made-up", old_key[1]),  # type: ignore[arg-type]
    )
    for _ in range(3):
        got = await env.http.get("/rows", headers={"Authorization": f"Bearer {forged}"})
        assert got.status_code == 401
    assert env.idp.jwks_hits == fetched + 1
    with pytest.raises(ProviderRefused, match="signed by a key the provider does not publish"):
        env.provider.verifier.check(old_token)
    # A browser sign-in after the rotation verifies its ID token with the new key.
    assert (await env.sign_in()).status_code == 200


async def test_a_jwks_file_is_reread_for_an_unknown_kid(idp: LocalProvider, tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks()))
    clock = Clock()
    provider = Provider(_config(idp, jwks_file=jwks, client_id=""), clock=clock)
    await provider.ensure(None)
    assert provider.verifier.verify(idp.token_for("alice")) is not None
    idp.rotate()
    jwks.write_text(json.dumps(idp.jwks()))
    token = idp.token_for("alice")
    clock.now += provider.config.refetch_seconds
    await provider.ensure(provider.verifier.kid_of(token)[1])
    viewer = provider.verifier.verify(token)
    assert viewer is not None and viewer.identity == (idp.issuer, "sub-alice", ("tenant-a",))
    assert idp.jwks_hits == 0  # the file, never the provider's JWKS URL


def test_claims_map_to_scopes_by_path_and_map() -> None:
    claims = {
        "groups": ["team-a", "staff"],
        "realm_access": {"roles": ["inbox-operators"]},
        "https://example.org/scopes": "tenant-a tenant-b",
        "resource_access": {"turnlog.inbox": {"roles": ["team-a"]}},
    }
    assert claim_values(claims, "groups") == ["team-a", "staff"]
    assert claim_values(claims, "realm_access.roles") == ["inbox-operators"]
    assert claim_values(claims, "https://example.org/scopes") == ["tenant-a", "tenant-b"]
    assert claim_values(claims, "resource_access.turnlog.inbox.roles") == ["team-a"]
    assert claim_values(claims, "missing.path") == []


async def test_the_scope_map_and_the_claim_s_own_values(idp: LocalProvider) -> None:
    mapped = Provider(_config(idp, scopes_claim="realm_access.roles"))
    await mapped.discover()
    token = idp.token_for("x", realm_access={"roles": ["team-a", "inbox-operators", "other"]})
    viewer = mapped.verifier.verify(token)
    assert viewer is not None and viewer.scopes == {"tenant-a", "*"} and viewer.name == "x"
    direct = Provider(_config(idp, scopes_claim="turnlog_scopes", scope_map=None))
    await direct.discover()
    viewer = direct.verifier.verify(idp.token_for("y", turnlog_scopes=["3f9c", "tenant-b"]))
    assert viewer is not None and viewer.scopes == {"3f9c", "tenant-b"}
    assert direct.verifier.verify(idp.token_for("y")) is None  # no such claim: no scope


def test_the_settings_are_read_from_the_environment_and_checked(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    env = {
        "TURNLOG_INBOX_OIDC_ISSUER": "https://sso.example.org/realms/ops",
        "TURNLOG_INBOX_OIDC_CLIENT_ID": "turnlog-inbox",
        "TURNLOG_INBOX_OIDC_CLIENT_SECRET_FILE": str(secret),
        "TURNLOG_INBOX_OIDC_AUDIENCE": "api://inbox, account",
        "TURNLOG_INBOX_OIDC_SCOPES_CLAIM": "realm_access.roles",
        "TURNLOG_INBOX_OIDC_SCOPE_MAP": '{"inbox-operators": "*", "team-a": ["tenant-a"]}',
    }
    config = build(env, redirect_base="https://inbox.example.org/")
    assert config is not None and config.client_secret == "s3cret"
    assert config.accepted_audiences == ("turnlog-inbox", "api://inbox", "account")
    assert config.scope_map == {"inbox-operators": {"*"}, "team-a": {"tenant-a"}}
    assert config.redirect_base == "https://inbox.example.org"
    assert config.shown_name == "sso.example.org"
    assert build({}) is None
    with pytest.raises(SettingError, match=re.escape("TURNLOG_INBOX_OIDC_ISSUER='http://sso")):
        build({"TURNLOG_INBOX_OIDC_ISSUER": "http://sso.example.org"})
    with pytest.raises(
        SettingError, match=re.escape("--oidc-scope-map='[1]': must be a JSON object")
    ):
        build(env, scope_map="[1]")


async def test_a_provider_out_of_reach_is_said_on_the_sign_in_page(
    idp: LocalProvider,
    projection: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "state", broker_timeout_seconds=1
    )
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    gone = Provider(_config(idp, issuer="http://127.0.0.1:1", name=""))
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(tl, projection, projection_wait=0) as service,
    ):
        app = create_app(service, lambda _: None, provider=gone)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            assert "Sign in with 127.0.0.1" in (await http.get("/login")).text
            page = await http.get("/login/provider")
            assert page.status_code == 503
            assert _problem(page).startswith("127.0.0.1 cannot be reached just now (127.0.0.1:1")
