"""The ASGI app: pages rendered on the server, a live stream, and the answer endpoint.

Routes (every POST checks the CSRF token bound to the session; every response carries the
security headers of :class:`SecurityHeaders`):

- ``GET /login``, ``POST /login``, ``POST /logout``: a viewer token in, an HttpOnly
  ``SameSite=Strict`` session cookie out (a ``Bearer`` header works without logging in);
- ``GET /`` the pending pauses the viewer may answer (``?interaction=``, ``?thread=``), and
  ``GET /rows`` the same rows alone, which the page fetches when ``GET /events`` (server-sent
  events: the ids pending for this viewer, at every change) says the list moved;
- ``GET /pause/{token_id}`` the conversation and the answer form, ``GET /pause/{id}/state``
  whether it is still open, ``POST /pause/{id}/answer`` the answer;
- ``GET /answers/{answer_id}`` what the worker made of it (``resumed``, or the refusal's plain
  words), as JSON for the page's script or as a page.

A pause the viewer may not answer is a 404 everywhere, the same as one that does not exist.
Everything a pause says is rendered through :func:`~turnlog.inbox.views.visible` (a filter of
the templates, and their ``finalize`` for whatever a template forgets), so no control or format
character reaches a page raw.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

import jinja2
from aiokafka.errors import KafkaError
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnlog.errors import TurnlogError
from turnlog.inbox.auth import Csrf, Viewer, ViewerVerifier
from turnlog.inbox.forms import FormProblem
from turnlog.inbox.service import Closed, InboxService
from turnlog.inbox.views import clip, duration, pending_for, visible

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
SESSION: Final = "turnlog_session"
ANON: Final = "turnlog_anon"
CSRF_FIELD: Final = "csrf"

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


def create_app(
    service: InboxService,
    verify_viewer: ViewerVerifier,
    *,
    csrf: Csrf | None = None,
    heartbeat_seconds: float = 10.0,
) -> Starlette:
    """The inbox over ``service``; ``verify_viewer`` turns a credential into a viewer."""
    pages = _Pages(service, verify_viewer, csrf or Csrf(), heartbeat_seconds)
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
    app = Starlette(routes=routes)
    app.add_middleware(SecurityHeaders)
    return app


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


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
        self.templates = Jinja2Templates(env=_environment())

    # -- who is asking ----------------------------------------------------------------------------

    def _credential(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return header[7:].strip()
        return request.cookies.get(SESSION, "")

    def _viewer(self, request: Request) -> Viewer | None:
        credential = self._credential(request)
        return self.verify(credential) if credential else None

    def _session(self, request: Request) -> str:
        """What the CSRF token is bound to: the credential, else the pre-login cookie."""
        return self._credential(request) or request.cookies.get(ANON, "")

    def _render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        context.setdefault("viewer", None)
        context["csrf"] = self.csrf.token(self._session(request))
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def _unauthorized(self, request: Request, *, page: bool = True) -> Response:
        """A page sends the visitor to log in; a script's request (the live stream, the rows,
        a JSON call, a POST) gets a 401 it can act on."""
        if not page or _wants_json(request) or request.method != "GET":
            return JSONResponse({"error": "log in first"}, status_code=401)
        return RedirectResponse("/login", status_code=303)

    async def _checked_form(self, request: Request) -> FormData | Response:
        form = await request.form()
        given = form.get(CSRF_FIELD)
        if not self.csrf.check(self._session(request), given if isinstance(given, str) else None):
            await form.close()
            return JSONResponse(
                {"error": "refused: the form's CSRF token is missing or not this session's"},
                status_code=403,
            )
        return form

    # -- logging in -------------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        anon = request.cookies.get(ANON) or secrets.token_urlsafe(24)
        page = self.templates.TemplateResponse(
            request, "login.html", {"viewer": None, "csrf": self.csrf.token(anon), "error": ""}
        )
        page.set_cookie(ANON, anon, httponly=True, samesite="strict", path="/")
        return page

    async def login(self, request: Request) -> Response:
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        token = str(form.get("token") or "").strip()
        await form.close()
        viewer = self.verify(token) if token else None
        if viewer is None:
            return self._render(
                request,
                "login.html",
                {"error": "That token is not valid here (wrong key, issuer or expired)."},
                status=401,
            )
        done = RedirectResponse("/", status_code=303)
        done.set_cookie(
            SESSION,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return done

    async def logout(self, request: Request) -> Response:
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        await form.close()
        done = RedirectResponse("/login", status_code=303)
        done.delete_cookie(SESSION, path="/")
        return done

    # -- the list ---------------------------------------------------------------------------------

    def _filters(self, request: Request) -> tuple[str, str]:
        interaction = request.query_params.get("interaction", "")
        thread = request.query_params.get("thread", "")
        return interaction[:200], thread[:200]

    def _list_context(self, request: Request, viewer: Viewer) -> dict[str, Any]:
        interaction, thread = self._filters(request)
        now = self.service.clock()
        rows = pending_for(
            self.service.store,
            viewer,
            now,
            interaction=interaction or None,
            thread=thread or None,
        )
        return {
            "viewer": viewer,
            "rows": rows,
            "now": now,
            "interaction": interaction,
            "thread": thread,
            "interactions": self.service.tl.interactions.names,
        }

    async def index(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request)
        return self._render(request, "list.html", self._list_context(request, viewer))

    async def rows(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request, page=False)
        return self._render(request, "_rows.html", self._list_context(request, viewer))

    async def events(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request, page=False)
        service, heartbeat = self.service, self.heartbeat

        async def stream() -> AsyncIterator[str]:
            version = -1
            while not service.closing.is_set():
                version = await service.changed(version, heartbeat)
                ids = service.visible_ids(viewer)
                yield f"event: pending\ndata: {json.dumps(ids)}\n\n"

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
        context = {"viewer": viewer, "pause": view, "now": self.service.clock()}
        return self._render(request, "detail.html", context)

    async def state(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request, page=False)
        view = self.service.pause(viewer, request.path_params["token_id"])
        if view is None:
            return JSONResponse({"status": "gone", "words": "no longer available"})
        words = {
            "pending": "waiting for an answer",
            "answered": "already answered",
            "expired": "expired: the pause's window closed before an answer",
        }[view.status]
        return JSONResponse({"status": view.status, "words": words})

    async def answer(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if viewer is None:
            return self._unauthorized(request)
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        fields = {
            key: [v for v in form.getlist(key) if isinstance(v, str)]
            for key in form
            if key != CSRF_FIELD
        }
        await form.close()
        token_id = request.path_params["token_id"]
        try:
            answer_id = await self.service.answer(viewer, token_id, fields)
        except LookupError:
            return self._said(request, 404, "not found", "no such pause to answer")
        except Closed as exc:
            return self._said(request, 409, "closed", str(exc))
        except FormProblem as exc:
            return self._said(request, 422, "invalid", str(exc))
        except (TurnlogError, KafkaError, OSError, TimeoutError) as exc:
            # Kafka unreachable (past the outage budget), or the publish failed: nothing was
            # taken, so the person may simply send again.
            log.warning("inbox: could not publish an answer to %s: %s", token_id, exc)
            words = "could not send the answer just now (Kafka is not reachable); try again"
            return self._said(request, 503, "unavailable", words)
        if _wants_json(request):
            return JSONResponse({"state": "sent", "answer_id": answer_id}, status_code=202)
        return RedirectResponse(f"/answers/{answer_id}", status_code=303)

    def _said(self, request: Request, status: int, state: str, words: str) -> Response:
        if _wants_json(request):
            shown = visible(words, multiline=True)
            return JSONResponse({"state": state, "words": shown}, status_code=status)
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
        return self._render(request, "outcome.html", context)
