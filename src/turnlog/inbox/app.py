"""The ASGI app: pages rendered on the server, a live stream, and the answer endpoint.

Routes (every POST checks the CSRF token bound to the session; every response carries the
security headers of :class:`SecurityHeaders`; every request body is cut at a limit before it is
parsed, :class:`BodyLimit`):

- ``GET /login``, ``POST /login``, ``POST /logout``: a viewer token in, an HttpOnly
  ``SameSite=Strict`` session cookie out (a ``Bearer`` header works without logging in). The
  sign-in form is bound to the pre-login cookie whatever session cookie is left, so a person
  whose session expired signs in again; a stale session signs out without its form;
- ``GET /login/provider``, ``GET /login/callback``: with a provider (``create_app(provider=)``),
  the browser sign-in at the team's OpenID Connect provider (:mod:`~turnlog.inbox.oidc_flow`),
  ending in the same session; its tokens in a ``Bearer`` header work too;
- ``GET /`` one page of the pending pauses the viewer may answer (``?interaction=``,
  ``?thread=``, ``?after=`` the cursor of a page's "Next page"), and ``GET /rows`` the same rows
  alone, or (``?token=``, repeated) the rows of the pauses the page's script was told arrived:
  ``GET /events`` (server-sent events) sends the page's ids once (``snapshot``), then only what
  moved for this viewer (``diff``: ids added and removed, from the projection's changes feed),
  and ``resync`` (a snapshot again) when the feed no longer holds where the stream stood; a
  stream ends (``event: signed-out``) when its credential expires or is signed out;
- ``GET /pause/{token_id}`` the conversation and the answer form, ``GET /pause/{id}/state``
  whether it is still open, ``POST /pause/{id}/answer`` the answer;
- ``GET /answers/{answer_id}`` what the worker made of it (``resumed`` with what the agent does
  next, or the refusal's plain words), as JSON for the page's script or as a page.

A script's endpoint (``/events``, ``/rows``, ``/pause/{id}/state``) opened in a browser's window
(``Accept: text/html``) redirects to its page, and a mistake in an answer sent without the page's
script -- a form that makes no answer, a stale CSRF token, Kafka out of reach -- returns the
pause's page with the problem beside the Send button (and, but for the stale token, the form as
it was filled): no browser window shows JSON.

A pause the viewer may not answer is a 404 everywhere, the same as one that does not exist.
Everything a pause says is rendered through :func:`~turnlog.contracts.visible.visible` (a filter of
the templates, and their ``finalize`` for whatever a template forgets), so no control or format
character reaches a page raw. A refusal reads as a page for a person and as JSON for the page's
script (``Accept: application/json``).

It is one module because every route applies the same four rules -- session, CSRF, the viewer's
binding to a pause, the body limit -- and a route kept elsewhere is a route that can forget one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import jinja2
from aiokafka.errors import KafkaError
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnlog.contracts.visible import clip, visible
from turnlog.errors import TurnlogError
from turnlog.inbox.auth import Csrf, SignOuts, Viewer, ViewerVerifier
from turnlog.inbox.forms import FormProblem, skeleton
from turnlog.inbox.oidc import first_of
from turnlog.inbox.oidc_flow import KeyRefresh, Provider, SignInFlow
from turnlog.inbox.service import Closed, InboxService, LiveList
from turnlog.inbox.views import LIST_LIMIT, PENDING, PauseView, duration, list_page
from turnlog.projections.store import page_bound

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
SESSION: Final = "turnlog_session"
ANON: Final = "turnlog_anon"
CSRF_FIELD: Final = "csrf"

#: The most a request may send when it is not an answer: a sign-in form holds one token (a
#: viewer JWT is well under a kilobyte; a few hundred scopes still fit).
SIGN_IN_BYTES: Final = 16 * 1024

#: The most fields a sign-in or sign-out form may hold (it has two).
SIGN_IN_FIELDS: Final = 8

CSRF_REFUSED: Final = "refused: the form's CSRF token is missing or not this session's"

#: No inline script or style, nothing from another origin, never framed.
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

HEADERS: Final[Mapping[bytes, bytes]] = {
    b"content-security-policy": CSP.encode(),
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"cross-origin-opener-policy": b"same-origin",
    b"permissions-policy": b"camera=(), microphone=(), geolocation=()",
}


class SecurityHeaders:
    """Adds :data:`HEADERS` to every response, and ``Cache-Control: no-store`` to every page
    (a shared machine's back button must not show someone else's inbox)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() not in HEADERS
                ]
                headers.extend(HEADERS.items())
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


class _BodyTooLarge(Exception):
    """Raised from ``receive`` when a streamed body passes its limit: whatever was parsing it
    stops there, and :class:`BodyLimit` answers 413."""


class BodyLimit:
    """Refuses a request body larger than its path's limit before anything parses it.

    Parsing first is what let an unauthenticated ``POST /login`` of 400 one-megabyte fields take
    the inbox from 88 MB to 482 MB before the CSRF check said no. A ``Content-Length`` above the
    limit is refused before a byte is read; a body without one (chunked) is counted as it
    streams and cut at the limit, so the inbox never reads, nor keeps, more than that.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit_for: Callable[[str, str], tuple[int, str]],
        refuse: Callable[[Scope, int, str], Response],
    ) -> None:
        self.app = app
        self.limit_for = limit_for
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, what = self.limit_for(scope["method"], scope["path"])
        too_large = f"refused: the request body is larger than {limit} bytes, the most {what}"
        declared = next((v for k, v in scope["headers"] if k.lower() == b"content-length"), None)
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                length = -1
            if length < 0:
                words = "refused: the Content-Length header is not a number of bytes"
                await self.refuse(scope, 400, words)(scope, receive, send)
                return
            if length > limit:
                await self.refuse(scope, 413, too_large)(scope, receive, send)
                return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _BodyTooLarge:
            if started:  # a response already on its way cannot become a 413; it just ends
                return
            await self.refuse(scope, 413, too_large)(scope, receive, send)


def create_app(
    service: InboxService,
    verify_viewer: ViewerVerifier,
    *,
    csrf: Csrf | None = None,
    heartbeat_seconds: float = 10.0,
    sign_in_bytes: int = SIGN_IN_BYTES,
    answer_bytes: int | None = None,
    provider: Provider | None = None,
    page_size: int = LIST_LIMIT,
) -> Starlette:
    """The inbox over ``service``; ``verify_viewer`` turns a credential into a viewer, and so
    does ``provider`` (the team's OpenID Connect provider: its tokens, and its browser sign-in).

    ``sign_in_bytes`` bounds every request body but an answer's, ``answer_bytes`` an answer's
    (by default the deployment's ``max_record_bytes``: an answer never publishes more);
    ``page_size`` is how many pauses one page of the list shows."""
    limit = answer_bytes if answer_bytes is not None else service.tl.settings.max_record_bytes
    verify = verify_viewer if provider is None else first_of(verify_viewer, provider.verifier)
    pages = _Pages(service, verify, csrf or Csrf(), heartbeat_seconds)
    pages.page_size = page_size

    def limit_for(method: str, path: str) -> tuple[int, str]:
        if method == "POST" and path.startswith("/pause/") and path.endswith("/answer"):
            return limit, "an answer may send"
        return sign_in_bytes, "a sign-in or any other form may send"

    routes = [
        Route("/", pages.index),
        Route("/rows", pages.rows),
        Route("/events", pages.events),
        Route("/login", pages.login_form, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/pause/{token_id}", pages.detail),
        Route("/pause/{token_id}/state", pages.state),
        Route("/pause/{token_id}/answer", pages.answer, methods=["POST"]),
        Route("/answers/{answer_id}", pages.outcome),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    if provider is not None and provider.config.client_id:  # else its Bearer tokens alone
        pages.provider_name = provider.config.shown_name
        flow = SignInFlow(provider, pages.login_refused, pages.provider_signed_in)
        routes[5:5] = [
            Route("/login/provider", flow.start),
            Route("/login/callback", flow.callback),
        ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: pages.http_error})
    if provider is not None:
        app.add_middleware(KeyRefresh, provider=provider, session_cookie=SESSION)
    app.add_middleware(BodyLimit, limit_for=limit_for, refuse=pages.refuse_scope)
    app.add_middleware(SecurityHeaders)  # outermost: a refusal of BodyLimit carries them too
    return app


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _navigation(request: Request) -> bool:
    """Whether a browser is showing the response as a page (it asked for HTML), not a script
    reading it: a script's endpoint then answers with a page or a redirect, never JSON."""
    return "text/html" in request.headers.get("accept", "") and not _wants_json(request)


def _as_text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _visible(value: Any) -> str:
    """The templates' ``visible`` filter: a name (a tool, an argument, a thread, a role), every
    control, format and invisible character marked, newlines too."""
    return visible(_as_text(value))


def _visible_lines(value: Any) -> str:
    """The templates' ``visible_lines`` filter: text that may run over lines (a question, a
    message, an argument's value), marked but for newlines and tabs."""
    return visible(_as_text(value), multiline=True)


def _raw_value(value: Any) -> Markup:
    """The templates' ``raw_value`` filter, for a form field's ``value`` only (never shown):
    escaped but not marked, so what the form sends back is exactly what the pause offered."""
    return Markup(escape(_as_text(value)))


def _finalize(value: Any) -> Any:
    """Every ``{{ ... }}`` of every template passes here: text nobody filtered is marked as
    multi-line text, so a template that forgets the filter still renders no control raw."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return visible(value, multiline=True)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(),
        finalize=_finalize,
    )
    env.filters["visible"] = _visible
    env.filters["visible_lines"] = _visible_lines
    env.filters["raw_value"] = _raw_value
    env.filters["clip"] = clip
    env.globals["duration"] = duration
    return env


class _Pages:
    def __init__(
        self, service: InboxService, verify: ViewerVerifier, csrf: Csrf, heartbeat: float
    ) -> None:
        self.service = service
        self.verify = verify
        self.csrf = csrf
        self.heartbeat = heartbeat
        self.sign_outs = SignOuts(service.clock)
        self.templates = Jinja2Templates(env=_environment())
        self.provider_name = ""  # "Sign in with <name>" when a provider is configured
        self.page_size = LIST_LIMIT

    # -- who is asking ----------------------------------------------------------------------------

    def _credential(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return header[7:].strip()
        return request.cookies.get(SESSION, "")

    def _signed_in(self, credential: str) -> Viewer | None:
        """The viewer of ``credential`` while it is valid and not signed out."""
        if not credential or credential in self.sign_outs:
            return None
        return self.verify(credential)

    def _viewer(self, request: Request) -> Viewer | None:
        return self._signed_in(self._credential(request))

    def _session(self, request: Request) -> str:
        """What the CSRF token is bound to: a signed-in credential, else the pre-login cookie
        (a stale session is no session: its pages and forms are the pre-login ones)."""
        credential = self._credential(request)
        if self._signed_in(credential) is not None:
            return credential
        return request.cookies.get(ANON, "")

    def _stale_cookie(self, request: Request) -> bool:
        """Whether the session cookie is what identified nobody (expired, signed out, or of
        another inbox's key): it is then deleted, so it no longer stands in anyone's way."""
        header = request.headers.get("authorization", "")
        cookie = request.cookies.get(SESSION, "")
        return (
            bool(cookie)
            and not header.lower().startswith("bearer ")
            and (self._signed_in(cookie) is None)
        )

    def _render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        context.setdefault("viewer", None)
        context["csrf"] = self.csrf.token(self._session(request))
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def _refused(
        self, request: Request, status: int, words: str, *, back: str = "/", error: str = ""
    ) -> Response:
        """A refusal: JSON for the page's script, a page saying why (and where to go on) for a
        person -- never a raw JSON body in a browser's window."""
        if _wants_json(request):
            return JSONResponse({"error": error or words, "words": words}, status_code=status)
        context = {"viewer": self._viewer(request), "words": words, "back": back}
        page = self._render(request, "refused.html", context, status=status)
        if self._stale_cookie(request):
            page.delete_cookie(SESSION, path="/")
        return page

    def refuse_scope(self, scope: Scope, status: int, words: str) -> Response:
        """:meth:`_refused` for :class:`BodyLimit`, which has a scope but no request yet; the
        connection is closed after it (the rest of the body is never read)."""
        response = self._refused(Request(scope), status, words)
        response.headers["connection"] = "close"
        return response

    def _unauthorized(self, request: Request, *, page: bool = True) -> Response:
        """A page sends the visitor to log in; a script's request (the live stream, the rows,
        a JSON call) gets a 401 it can act on; a form posted without the page's script gets a
        page saying to sign in again. A stale session cookie is deleted on the way."""
        if (not page and not _navigation(request)) or _wants_json(request):
            response: Response = JSONResponse({"error": "log in first"}, status_code=401)
        elif request.method != "GET":
            words = "your session ended before this form was sent: sign in again, then resend"
            response = self._refused(request, 401, words, back="/login")
        else:
            response = RedirectResponse("/login", status_code=303)
        if self._stale_cookie(request):
            response.delete_cookie(SESSION, path="/")
        return response

    async def _form(self, request: Request, max_fields: int = 1000) -> FormData:
        """The posted form, no file in it (no inbox form has one); its size was bounded by
        :class:`BodyLimit` before this reads it."""
        return await request.form(max_files=0, max_fields=max_fields)

    def _csrf_ok(self, form: FormData, session: str) -> bool:
        given = form.get(CSRF_FIELD)
        return self.csrf.check(session, given if isinstance(given, str) else None)

    # -- logging in -------------------------------------------------------------------------------

    def _login_page(self, request: Request, error: str = "", status: int = 200) -> Response:
        """The sign-in form, bound to the pre-login cookie (set here when there is none)."""
        anon = request.cookies.get(ANON) or secrets.token_urlsafe(24)
        context = {"viewer": None, "csrf": self.csrf.token(anon), "error": error}
        context["provider"] = self.provider_name
        page = self.templates.TemplateResponse(request, "login.html", context, status_code=status)
        page.set_cookie(ANON, anon, httponly=True, samesite="strict", path="/")
        if self._stale_cookie(request):
            page.delete_cookie(SESSION, path="/")
        return page

    async def login_form(self, request: Request) -> Response:
        return self._login_page(request)

    async def login(self, request: Request) -> Response:
        form = await self._form(request, SIGN_IN_FIELDS)
        token = str(form.get("token") or "").strip()
        fresh = self._csrf_ok(form, request.cookies.get(ANON, ""))
        await form.close()
        if not fresh:
            words = (
                "This sign-in form is out of date (the inbox restarted since it was shown, or "
                "its cookie is gone): paste your token again, or follow your link again."
            )
            return self._login_page(request, words, status=403)
        viewer = self.verify(token) if token else None
        if viewer is None:
            words = "That token is not valid here (wrong key, issuer or expired)."
            return self._login_page(request, words, status=401)
        return self._start_session(request, token, RedirectResponse("/", status_code=303))

    def _start_session(self, request: Request, credential: str, done: Response) -> Response:
        """The session of a verified credential: off the sign-out list, in the cookie."""
        self.sign_outs.sign_in(credential)
        done.set_cookie(
            SESSION,
            credential,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return done

    def login_refused(self, request: Request, status: int, words: str) -> Response:
        """A provider sign-in refused: the sign-in page, saying why in one line."""
        return self._login_page(request, words, status)

    def provider_signed_in(self, request: Request, credential: str) -> Response:
        """The session of a provider sign-in, on a page that moves on to ``/`` by itself."""
        page = self.templates.TemplateResponse(request, "signed_in.html", {"viewer": None})
        return self._start_session(request, credential, page)

    async def logout(self, request: Request) -> Response:
        """Signs the session out here and on the server (its streams end at once). A stale
        session -- expired, or already signed out -- has nothing left to protect: its cookie
        is cleared without asking for the form's token, which a restarted inbox cannot check."""
        form = await self._form(request, SIGN_IN_FIELDS)
        credential = self._credential(request)
        viewer = self._signed_in(credential)
        fresh = self._csrf_ok(form, credential)
        await form.close()
        if viewer is not None:
            if not fresh:
                words = (
                    "This sign-out form is out of date (the inbox restarted since it was "
                    "shown, or you signed in again): sign out with the button on this page."
                )
                return self._refused(request, 403, words, error=CSRF_REFUSED)
            self.sign_outs.sign_out(credential, viewer)
            self.service.wake()
        done = RedirectResponse("/login", status_code=303)
        done.delete_cookie(SESSION, path="/")
        return done

    # -- the list ---------------------------------------------------------------------------------

    def _filters(self, request: Request) -> tuple[str, str]:
        interaction = request.query_params.get("interaction", "")
        thread = request.query_params.get("thread", "")
        return interaction[:200], thread[:200]

    def _after(self, request: Request) -> str | None:
        """The page's cursor (``?after=``, a page's next); ``ValueError`` when it is none."""
        after = request.query_params.get("after", "")[:1000] or None
        if after is not None:
            page_bound(after)
        return after

    def _bad_cursor(self, request: Request, exc: ValueError) -> Response:
        return self._refused(request, 400, f"refused: {exc}", error="bad_cursor")

    def _list_context(self, request: Request, viewer: Viewer, after: str | None) -> dict[str, Any]:
        interaction, thread = self._filters(request)
        now = self.service.clock()
        page = list_page(
            self.service.store,
            viewer,
            now,
            interaction=interaction or None,
            thread=thread or None,
            after=after,
            limit=self.page_size,
        )
        query = {"interaction": interaction, "thread": thread}
        kept = {k: v for k, v in query.items() if v}
        return {
            "viewer": viewer,
            "rows": page.rows,
            "now": now,
            "interaction": interaction,
            "thread": thread,
            "interactions": self.service.tl.interactions.names,
            "after": after or "",
            "next": urlencode(kept | {"after": page.next}) if page.next else "",
            "first": urlencode(kept) if after else "",
        }

    async def index(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request)
        try:
            after = self._after(request)
        except ValueError as exc:
            return self._bad_cursor(request, exc)
        return self._render(request, "list.html", self._list_context(request, viewer, after))

    async def rows(self, request: Request) -> Response:
        """The list's rows (the page's ``#rows``); with ``?token=`` (repeated), only the rows
        of those pauses still pending for the viewer and taken by the filters: what the page's
        script inserts when the live stream says they arrived."""
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request, page=False)
        if _navigation(request):  # the page's script fetches these rows; a person wants the list
            query = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(f"/{query}", status_code=303)
        tokens = request.query_params.getlist("token")
        if tokens:
            return self._render(request, "_added.html", self._added(request, viewer, tokens))
        try:
            after = self._after(request)
        except ValueError as exc:
            return self._bad_cursor(request, exc)
        return self._render(request, "_rows.html", self._list_context(request, viewer, after))

    def _added(self, request: Request, viewer: Viewer, tokens: list[str]) -> dict[str, Any]:
        interaction, thread = self._filters(request)
        wanted = thread.strip().lower()
        rows = []
        for token_id in dict.fromkeys(t[:200] for t in tokens[: max(self.page_size, LIST_LIMIT)]):
            view = self.service.pause(viewer, token_id)
            if view is None or view.status != PENDING:
                continue
            if interaction and view.interaction != interaction:
                continue
            if wanted and wanted not in view.thread_id.lower():
                continue
            rows.append(view)
        rows.sort(key=lambda v: v.order)
        return {"viewer": viewer, "rows": rows, "now": self.service.clock()}

    async def events(self, request: Request) -> Response:
        """The live stream of the viewer's page (the list's filters and cursor, or one pause:
        ``?token=``): a snapshot of the ids it shows, then what moved -- the ids added and
        removed, read from the projection's changes feed -- and a fresh snapshot when the feed
        no longer holds where the stream stood (:class:`~turnlog.inbox.service.LiveList`).
        Each event's id says where the stream stands, so a reconnect goes on from there. It
        holds the credential it was opened with and checks it again at every change, every
        heartbeat, the moment the credential expires and at every sign-out: a stream outlives
        neither its token nor its session (it ends with ``event: signed-out``, which the page's
        script acts on)."""
        credential = self._credential(request)
        if self._signed_in(credential) is None:
            return self._unauthorized(request, page=False)
        if _navigation(request):  # an EventSource asks for text/event-stream, not HTML
            return RedirectResponse("/", status_code=303)
        interaction, thread = self._filters(request)
        try:
            after = self._after(request)
        except ValueError as exc:
            return self._bad_cursor(request, exc)
        token = request.query_params.get("token", "")[:200] or None
        live = LiveList(
            self.service,
            interaction=interaction,
            thread=thread,
            after=after,
            token=token,
            limit=self.page_size,
        )
        resume = request.headers.get("last-event-id", "")[:100]
        service, heartbeat = self.service, self.heartbeat

        async def stream() -> AsyncIterator[str]:
            loop = asyncio.get_running_loop()
            # -1: the first pass after the snapshot reads the feed from where it stands (a
            # reconnect's changes made while it was away are sent at once).
            version, due, started = -1, loop.time(), False
            while not service.closing.is_set():
                viewer = self._signed_in(credential)
                if viewer is None:
                    yield 'event: signed-out\ndata: "your session ended: sign in again"\n\n'
                    return
                if not started:
                    started = True
                    first = live.start(viewer, resume)
                    yield live.wire(first) if first else ": resumed\n\n"
                    due = loop.time() + heartbeat
                elif service.version != version or loop.time() >= due:
                    version = service.version
                    moved = live.step(viewer)
                    if moved is not None:
                        yield live.wire(moved)
                        due = loop.time() + heartbeat
                    elif loop.time() >= due:
                        yield ": heartbeat\n\n"  # the connection kept open; nothing moved
                        due = loop.time() + heartbeat
                wait = max(0.0, due - loop.time())
                if viewer.expires_at is not None:  # wake just past the expiry to end then
                    left = (viewer.expires_at - service.clock()).total_seconds()
                    wait = min(wait, max(0.0, left) + 0.05)
                await service.changed(version, wait)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
        )

    # -- one pause --------------------------------------------------------------------------------

    async def detail(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request)
        view = self.service.pause(viewer, request.path_params["token_id"])
        if view is None:
            return self._render(request, "missing.html", {"viewer": viewer}, status=404)
        return self._render(request, "detail.html", self._detail_context(viewer, view))

    def _detail_context(
        self,
        viewer: Viewer,
        view: PauseView,
        problem: str = "",
        given: Mapping[str, list[str]] | None = None,
    ) -> dict[str, Any]:
        """The pause's page: ``problem`` beside the Send button and the form as the person
        filled it (``given``) when an answer sent without the page's script was not taken."""
        interactions = self.service.tl.interactions
        start = ""
        if not view.questions and view.tool is None and view.interaction in interactions:
            start = skeleton(interactions.get(view.interaction).response_schema)
        return {
            "viewer": viewer,
            "pause": view,
            "now": self.service.clock(),
            "skeleton": start,
            "problem": problem,
            "given": given or {},
            "answered_by": self.service.answered_by(viewer, view.token_id),
        }

    def _answer_page(
        self,
        request: Request,
        viewer: Viewer,
        status: int,
        problem: str,
        given: Mapping[str, list[str]] | None = None,
    ) -> Response:
        """The pause's page again, its form fresh (this session's CSRF token) with ``problem``
        beside the Send button and ``given`` filled back in -- what a mistake made without the
        page's script leads to, rather than a page that loses the form."""
        view = self.service.pause(viewer, request.path_params["token_id"])
        if view is None:
            return self._render(request, "missing.html", {"viewer": viewer}, status=404)
        # A browser sends a textarea's line breaks as CRLF: shown back as the person typed them.
        typed = {k: [v.replace("\r\n", "\n") for v in vs] for k, vs in (given or {}).items()}
        context = self._detail_context(viewer, view, problem, typed)
        return self._render(request, "detail.html", context, status=status)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's own refusals (no such route, a method a route does not take) as the
        inbox's: a page for a person, JSON for a script."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        words = {404: "there is no such page here", 405: "this page does not take that request"}
        return self._refused(request, status, words.get(status, f"refused ({status})"))

    async def state(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request, page=False)
        if _navigation(request):  # the page's script asks this; a person wants the pause
            return RedirectResponse(f"/pause/{request.path_params['token_id']}", status_code=303)
        view = self.service.pause(viewer, request.path_params["token_id"])
        if view is None:
            return JSONResponse({"status": "gone", "words": "no longer available"})
        words = {
            "pending": "waiting for an answer",
            "answered": "already answered",  # the page's script says by whom it knows
            "expired": "expired: the pause's window closed before an answer",
        }[view.status]
        return JSONResponse({"status": view.status, "words": words})

    async def answer(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request)
        token_id = request.path_params["token_id"]
        form = await self._form(request)
        if not self._csrf_ok(form, self._session(request)):
            await form.close()
            if _wants_json(request):
                words = (
                    "this form is out of date (the inbox restarted since it was shown, or you "
                    "signed in again): reload the pause and answer again; nothing was sent"
                )
                back = f"/pause/{token_id}"
                return self._refused(request, 403, words, back=back, error=CSRF_REFUSED)
            # The page again with a fresh form, empty: what a form that fails this check said
            # is not filled back in (it may not be this person's).
            words = (
                "Nothing was sent: this form was out of date (the inbox restarted, or you signed "
                "in again). Here it is again; answer once more."
            )
            return self._answer_page(request, viewer, 403, words)
        fields = {
            key: [v for v in form.getlist(key) if isinstance(v, str)]
            for key in form
            if key != CSRF_FIELD
        }
        await form.close()
        try:
            answer_id = await self.service.answer(viewer, token_id, fields)
        except LookupError:
            return self._said(request, 404, "not found", "no such pause to answer")
        except Closed as exc:
            return self._said(request, 409, "closed", str(exc), exc.reason)
        except FormProblem as exc:
            if not _wants_json(request):
                return self._answer_page(request, viewer, 422, str(exc), fields)
            return self._said(request, 422, "invalid", str(exc))
        except (TurnlogError, KafkaError, OSError, TimeoutError) as exc:
            # Kafka unreachable (past the outage budget), or the publish failed: nothing was
            # taken, so the person may simply send again.
            log.warning("inbox: could not publish an answer to %s: %s", token_id, exc)
            words = "could not send the answer just now (Kafka is not reachable); try again"
            if not _wants_json(request):
                return self._answer_page(request, viewer, 503, words, fields)
            return self._said(request, 503, "unavailable", words)
        if _wants_json(request):
            return JSONResponse({"state": "sent", "answer_id": answer_id}, status_code=202)
        return RedirectResponse(f"/answers/{answer_id}", status_code=303)

    def _said(
        self, request: Request, status: int, state: str, words: str, reason: str = ""
    ) -> Response:
        if _wants_json(request):
            shown = visible(words, multiline=True)
            said = {"state": state, "words": shown} | ({"reason": reason} if reason else {})
            return JSONResponse(said, status_code=status)
        context = {"viewer": self._viewer(request), "state": state, "words": words}
        return self._render(request, "outcome.html", context, status=status)

    async def outcome(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request)
        try:
            wait = min(25.0, max(0.0, float(request.query_params.get("wait", "20"))))
        except ValueError:
            wait = 20.0
        found = await self.service.outcome(viewer, request.path_params["answer_id"], wait)
        if found is None:
            return self._said(request, 404, "not found", "no answer of yours by that id")
        if _wants_json(request):
            return JSONResponse({k: visible(v, multiline=True) for k, v in found.items()})
        context = {"viewer": viewer, "state": found["state"], "words": found.get("words", "")}
        context["decision"] = found.get("decision", "")
        return self._render(request, "outcome.html", context)
