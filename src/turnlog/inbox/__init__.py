"""The inbox: a web page where people see the paused turns waiting on them, and answer them.

``turnlog inbox`` serves it (Starlette under uvicorn, pages rendered on the server, a little
plain JavaScript for live updates; the ``inbox`` extra). It reads the local projection through a
secondary store, so it runs beside a projector or a worker, and answers through the library's own
pre-checked path (:meth:`turnlog.Turnlog.answer`).

- :mod:`~turnlog.inbox.auth`: who the viewer is (a verifier hook; viewer JWTs by default) and
  which scopes they may see and answer; CSRF tokens bound to the session;
- :mod:`~turnlog.inbox.views`: the pending pauses and one pause, as the pages show them;
- :mod:`~turnlog.inbox.forms`: a submitted form into an interaction's response, and refusals
  into plain words;
- :mod:`~turnlog.inbox.service`: the store follower, the answer path, the outcome watch;
- :mod:`~turnlog.inbox.oidc`, :mod:`~turnlog.inbox.oidc_config`, :mod:`~turnlog.inbox.oidc_flow`:
  sign-in from the team's OpenID Connect provider (its tokens verified through its keys, claims
  mapped to scopes, the browser's code flow with PKCE);
- :mod:`~turnlog.inbox.app`: the ASGI app (routes, security headers);
- :mod:`~turnlog.inbox.server`: uvicorn inside a running loop, on a socket bound first;
- :mod:`~turnlog.inbox.demo`: a local inbox with a few paused turns, for a newcomer.

Nothing here is imported by ``turnlog`` itself: without the extra, the package still imports.
"""
