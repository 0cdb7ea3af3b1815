"""The browser sign-in at the team's provider: the authorization-code flow with PKCE (S256).

``GET /login/provider`` sends the browser to the provider's authorization endpoint with a fresh
``state``, ``nonce`` and ``code_challenge``; the three (and the verifier) are kept in a short-lived
HttpOnly cookie signed by this inbox (``SameSite=Lax``: it must come back on the provider's
redirect, a cross-site navigation), nothing on the server. ``GET /login/callback`` takes the
cookie once: the ``state`` must be its own, the code is exchanged at the token endpoint with the
verifier (and the client secret, when there is one), and the ID token must verify -- signature by
a published key, ``iss``, ``aud``, ``exp``, the cookie's ``nonce`` -- and map to a scope. The ID
token then becomes the session, set by the app as its own sign-in sets it; the callback answers
with a page that moves on to ``/`` by itself (a ``SameSite=Strict`` session cookie is not sent
on a redirect that a cross-site navigation started, and a page of the inbox's own is not one).

Every refusal is one line on the sign-in page, never the provider's raw answer.
:class:`KeyRefresh` fetches the provider's keys before a request whose credential needs them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from turnlog.inbox.oidc import OidcVerifier, ProviderKeys, ProviderRefused, fetch_json
from turnlog.inbox.oidc_config import OidcConfig

FLOW_COOKIE: Final = "turnlog_oidc"

#: How long a sign-in at the provider may take, from the button to the callback.
FLOW_SECONDS: Final = 600

#: Past this a browser drops a cookie without a word (4096 bytes, with the name and attributes).
MAX_SESSION_BYTES: Final = 3900

#: What the provider's refusal may show of its own description.
SHOWN_CHARS: Final = 300

#: The app's side: ``refuse(request, status, words)`` renders the sign-in page with the words;
#: ``sign_in(request, credential)`` starts the session and answers.
Refuse = Callable[[Request, int, str], Response]
SignIn = Callable[[Request, str], Response]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def challenge(verifier: str) -> str:
    """The S256 ``code_challenge`` of a PKCE verifier (RFC 7636)."""
    return _b64(hashlib.sha256(verifier.encode()).digest())


def _clipped(text: Any) -> str:
    shown = " ".join(str(text).split())
    return shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS] + "…"


class Provider:
    """The provider's endpoints (its discovery document) and keys, and the tokens' verifier."""

    def __init__(self, config: OidcConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.keys = ProviderKeys(config, clock=clock)
        self.verifier = OidcVerifier(config, self.keys)
        self.document: dict[str, Any] | None = None
        self._clock = clock
        self._lock = asyncio.Lock()
        self._failed: tuple[float, ProviderRefused] | None = None

    async def discover(self) -> dict[str, Any]:
        """The discovery document (read once; after a failure, again once the refetch interval
        has passed -- until then the failure is said again), and the keys with it."""
        async with self._lock:
            if self.document is None:
                if self._failed and self._clock() - self._failed[0] < self.config.refetch_seconds:
                    raise self._failed[1]
                try:
                    self.document = await asyncio.to_thread(self._read_document)
                except ProviderRefused as exc:
                    self._failed = (self._clock(), exc)
                    raise
                self.keys.jwks_uri = str(self.document["jwks_uri"])
        await self.keys.ensure(None)
        return self.document

    async def ensure(self, kid: str | None) -> None:
        """The keys a token naming ``kid`` needs (a JWKS file needs no discovery)."""
        if self.config.jwks_file is None:
            await self.discover()
        await self.keys.ensure(kid)

    def _read_document(self) -> dict[str, Any]:
        url = self.config.discovery_url
        status, document = fetch_json(url, self.config.http_timeout_seconds)
        if status != 200 or not isinstance(document, dict):
            raise ProviderRefused(f"its discovery document {url} answered {status}")
        if document.get("issuer") != self.config.issuer:
            raise ProviderRefused(
                f"its discovery document names the issuer {document.get('issuer')!r}, "
                f"not {self.config.issuer}"
            )
        for needed in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(document.get(needed), str):
                raise ProviderRefused(f"its discovery document has no {needed}")
        return document


class SignInFlow:
    """``GET /login/provider`` and ``GET /login/callback`` (see the module's words)."""

    def __init__(self, provider: Provider, refuse: Refuse, sign_in: SignIn) -> None:
        self.provider = provider
        self.refuse = refuse
        self.sign_in = sign_in
        self._secret = secrets.token_bytes(32)

    def _redirect_uri(self, request: Request) -> str:
        base = self.provider.config.redirect_base or str(request.base_url).rstrip("/")
        return base + "/login/callback"

    def _seal(self, flow: dict[str, Any]) -> str:
        body = _b64(json.dumps(flow, separators=(",", ":")).encode())
        return body + "." + _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())

    def _unseal(self, sealed: str) -> dict[str, Any] | None:
        body, _, mac = sealed.partition(".")
        want = _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())
        if not mac or not hmac.compare_digest(mac.encode(), want.encode()):
            return None
        try:
            flow = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except ValueError:
            return None
        if not isinstance(flow, dict) or not isinstance(flow.get("until"), int | float):
            return None
        return flow if flow["until"] > time.time() else None

    async def start(self, request: Request) -> Response:
        config = self.provider.config
        try:
            document = await self.provider.discover()
        except ProviderRefused as exc:
            words = f"{config.shown_name} cannot be reached just now ({exc}): try again"
            return self.refuse(request, 503, words)
        verifier, redirect = secrets.token_urlsafe(48), self._redirect_uri(request)
        flow: dict[str, Any] = {
            "state": secrets.token_urlsafe(24),
            "nonce": secrets.token_urlsafe(24),
            "verifier": verifier,
            "redirect": redirect,
            "until": int(time.time()) + FLOW_SECONDS,
        }
        query = urlencode(
            {
                "response_type": "code",
                "client_id": config.client_id,
                "redirect_uri": flow["redirect"],
                "scope": config.request_scopes,
                "state": flow["state"],
                "nonce": flow["nonce"],
                "code_challenge": challenge(verifier),
                "code_challenge_method": "S256",
            }
        )
        endpoint = str(document["authorization_endpoint"])
        going = RedirectResponse(f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", 303)
        going.set_cookie(
            FLOW_COOKIE,
            self._seal(flow),
            max_age=FLOW_SECONDS,
            httponly=True,
            samesite="lax",
            secure=redirect.startswith("https:"),
            path="/login",
        )
        return going

    async def callback(self, request: Request) -> Response:
        try:
            token = await self._id_token(request)
            await self.provider.ensure(self.provider.verifier.kid_of(token)[1])
            flow = self._unseal(request.cookies.get(FLOW_COOKIE, "")) or {}
            self.provider.verifier.check(token, nonce=str(flow.get("nonce", "")))
            if len(token) > MAX_SESSION_BYTES:
                raise ProviderRefused(
                    f"the provider's ID token is {len(token)} bytes, more than a browser keeps "
                    "in a cookie: have it leave long group lists out of the ID token"
                )
        except ProviderRefused as exc:
            response = self.refuse(request, 401, f"Not signed in: {exc}.")
        else:
            response = self.sign_in(request, token)
        response.delete_cookie(FLOW_COOKIE, path="/login")
        return response

    async def _id_token(self, request: Request) -> str:
        """The callback's checks up to the ID token, which is then for the verifier."""
        config, params = self.provider.config, request.query_params
        flow = self._unseal(request.cookies.get(FLOW_COOKIE, ""))
        if flow is None:
            raise ProviderRefused(
                "bad state: this sign-in was not started here, took too long, or began before "
                "the inbox restarted"
            )
        state, code = params.get("state", ""), params.get("code", "")
        if not state or not hmac.compare_digest(state.encode(), str(flow["state"]).encode()):
            raise ProviderRefused(
                "bad state: the provider's answer is not this browser's sign-in (another "
                "sign-in was started since, or the link was forged)"
            )
        if "error" in params:  # said only with this sign-in's state: no link can put words here
            said = params.get("error_description") or params.get("error", "")
            raise ProviderRefused(f"{config.shown_name} refused the sign-in: {_clipped(said)}")
        if not code:
            raise ProviderRefused("the provider sent no authorization code")
        document = await self.provider.discover()
        form: dict[str, str] = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": str(flow["redirect"]),
            "client_id": config.client_id,
            "code_verifier": str(flow["verifier"]),
        }
        headers = {"Content_Type": "application/x-www-form-urlencoded"}  # "_" is "-"
        if config.client_secret:
            methods = document.get("token_endpoint_auth_methods_supported") or []
            if "client_secret_basic" in methods or not methods:
                pair = f"{_quote(config.client_id)}:{_quote(config.client_secret)}"
                headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
            else:
                form["client_secret"] = config.client_secret
        status, answer = await asyncio.to_thread(
            fetch_json,
            str(document["token_endpoint"]),
            config.http_timeout_seconds,
            urlencode(form).encode(),
            **headers,
        )
        if status != 200 or not isinstance(answer, dict):
            reason = "no reason"
            if isinstance(answer, dict):
                reason = answer.get("error_description") or answer.get("error") or reason
            raise ProviderRefused(
                f"{config.shown_name} refused the code ({status}: {_clipped(reason)})"
            )
        token = answer.get("id_token")
        if not isinstance(token, str) or not token:
            raise ProviderRefused("the provider sent no ID token (is 'openid' a scope?)")
        return token


def _quote(text: str) -> str:
    return quote(text, safe="")


class KeyRefresh:
    """Before a request whose credential (a ``Bearer`` header or the session cookie) is a
    provider token naming a kid the cache lacks, fetches the keys (rate-limited by
    :class:`~turnlog.inbox.oidc.ProviderKeys`), so the verifier never waits on the network."""

    def __init__(self, app: ASGIApp, provider: Provider, session_cookie: str) -> None:
        self.app = app
        self.provider = provider
        self.session_cookie = session_cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            header = request.headers.get("authorization", "")
            credential = (
                header[7:].strip()
                if header.lower().startswith("bearer ")
                else request.cookies.get(self.session_cookie, "")
            )
            if credential:
                theirs, kid = self.provider.verifier.kid_of(credential)
                if theirs and self.provider.keys.due(kid):
                    # the verifier refuses, in its own words, what it cannot check
                    with contextlib.suppress(ProviderRefused):
                        await self.provider.ensure(kid)
        await self.app(scope, receive, send)
