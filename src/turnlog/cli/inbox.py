"""``turnlog inbox``: serve the web inbox; ``turnlog inbox token``: mint a viewer's token.

The inbox reads the projection (``turnlog project`` keeps it) and answers with the deployment's
signing key; viewers log in with tokens signed by a viewer key (``--viewer-keys``, by default
``<keys dir>/viewers``, created by the first ``turnlog inbox token``). ``--demo`` needs none of
this: it sets up its own paused turns, keys and viewer on the local broker.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from turnlog.cli.app import (
    EXIT_FAILURE,
    EXIT_USAGE,
    BrokerTimeoutOpt,
    Interrupts,
    State,
    app,
    err,
    fail,
    out,
    run_async,
    run_state,
)
from turnlog.cli.observe import LogFormatOpt, LogLevelOpt, setup_logs

inbox_app = typer.Typer(
    help="The web inbox: people see the pauses waiting on them, and answer.",
    invoke_without_command=True,
)

app.add_typer(inbox_app, name="inbox")

ViewerKeysOpt = Annotated[
    Path | None,
    typer.Option(
        "--viewer-keys",
        metavar="DIR",
        help="Keys that sign viewer tokens (default: <keys dir>/viewers).",
    ),
]
ViewerIssuerOpt = Annotated[
    str, typer.Option("--viewer-issuer", help="The iss and aud of viewer tokens.")
]


#: The ``--oidc-*`` options: sign-in from the team's OpenID Connect provider (see
#: :mod:`turnlog.inbox.oidc_config`); each falls back to its ``TURNLOG_INBOX_OIDC_*`` variable.
OIDC_OPTIONS = {
    "issuer": ("The provider's issuer URL; sets provider sign-in up", "URL"),
    "client_id": ("This inbox's client id at the provider (the browser sign-in)", "ID"),
    "client_secret_file": ("A file holding the client secret (a confidential client)", "FILE"),
    "audience": ("Audiences an access token may name besides the client id", "AUD"),
    "scopes_claim": ("The claim (or path, a.b) whose values give scopes; default groups", "CLAIM"),
    "scope_map": ('JSON: claim value to scopes, {"group": ["scope_hash"], "ops": "*"}', "JSON"),
    "jwks_file": ("The provider's keys from this JWKS file instead of its discovery", "FILE"),
    "redirect_base": ("The inbox's public URL; <URL>/login/callback is the redirect URI", "URL"),
    "name": ("What the button says: Sign in with NAME (default: the issuer's host)", "NAME"),
}


def _oidc(key: str) -> Any:
    """The option ``--oidc-<key>``, its help saying its ``TURNLOG_INBOX_OIDC_*`` variable."""
    words, metavar = OIDC_OPTIONS[key]
    env = f"TURNLOG_INBOX_OIDC_{key.upper()}"
    return typer.Option(
        "--oidc-" + key.replace("_", "-"), metavar=metavar, help=f"{words} (env {env})."
    )


_EXTRA_MODULES = ("starlette", "uvicorn", "jinja2", "multipart")

EXTRA_MISSING = "the inbox needs the 'inbox' extra: pip install 'turnlog[inbox]'"


def _require_extra() -> None:
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in _EXTRA_MODULES):
        raise fail(EXTRA_MISSING, EXIT_FAILURE)


def _viewer_dir(state: State, given: Path | None) -> Path:
    return given if given is not None else state.settings.keys_dir / "viewers"


@inbox_app.callback()
def inbox(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to serve on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve on (0: any free port).")] = 8765,
    viewer_keys: ViewerKeysOpt = None,
    viewer_issuer: ViewerIssuerOpt = "turnlog-inbox",
    demo: Annotated[
        bool,
        typer.Option("--demo", help="Pause a few turns on the local broker and serve them."),
    ] = False,
    broker_timeout: BrokerTimeoutOpt = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
    oidc_issuer: Annotated[str | None, _oidc("issuer")] = None,
    oidc_client_id: Annotated[str | None, _oidc("client_id")] = None,
    oidc_client_secret_file: Annotated[str | None, _oidc("client_secret_file")] = None,
    oidc_audience: Annotated[str | None, _oidc("audience")] = None,
    oidc_scopes_claim: Annotated[str | None, _oidc("scopes_claim")] = None,
    oidc_scope_map: Annotated[str | None, _oidc("scope_map")] = None,
    oidc_jwks_file: Annotated[str | None, _oidc("jwks_file")] = None,
    oidc_redirect_base: Annotated[str | None, _oidc("redirect_base")] = None,
    oidc_name: Annotated[str | None, _oidc("name")] = None,
) -> None:
    """Serve the inbox until Ctrl-C (beside `turnlog project`, which keeps its projection)."""
    if ctx.invoked_subcommand is not None:
        return
    _require_extra()
    if not 0 <= port <= 65535:
        raise fail(f"--port must be 0..65535, not {port}", EXIT_USAGE)
    _serve(
        ctx,
        host=host,
        port=port,
        viewer_keys=viewer_keys,
        viewer_issuer=viewer_issuer,
        demo=demo,
        broker_timeout=broker_timeout,
        log_level=log_level,
        log_format=log_format,
        oidc={
            "issuer": oidc_issuer,
            "client_id": oidc_client_id,
            "client_secret_file": oidc_client_secret_file,
            "audience": oidc_audience,
            "scopes_claim": oidc_scopes_claim,
            "scope_map": oidc_scope_map,
            "jwks_file": oidc_jwks_file,
            "redirect_base": oidc_redirect_base,
            "name": oidc_name,
        },
    )


@run_async
async def _serve(
    ctx: typer.Context,
    *,
    host: str,
    port: int,
    viewer_keys: Path | None,
    viewer_issuer: str,
    demo: bool,
    broker_timeout: float | None,
    log_level: str | None,
    log_format: str | None,
    oidc: dict[str, str | None],
) -> None:
    interrupts = Interrupts()
    setup_logs(ctx, log_level, log_format)
    stop = asyncio.Event()
    interrupts.on_stop(stop.set)
    state = run_state(ctx)
    if demo:
        from turnlog.inbox.demo import run_inbox_demo

        await run_inbox_demo(
            state.settings, lambda line: out.print(line, soft_wrap=True), stop, host=host, port=port
        )
        return
    from turnlog.api import Turnlog
    from turnlog.cli.common import keyring, projection_dir
    from turnlog.errors import ConfigurationError
    from turnlog.inbox.app import create_app
    from turnlog.inbox.auth import ViewerTokens, viewer_keyring
    from turnlog.inbox.oidc import ProviderRefused
    from turnlog.inbox.oidc_config import build
    from turnlog.inbox.oidc_flow import Provider
    from turnlog.inbox.server import InboxServer
    from turnlog.inbox.service import InboxService
    from turnlog.kafka.outage import serve_as

    serve_as("inbox")  # a broker down at its start is waited out, as an outage would be
    settings = state.settings
    try:
        config = build(os.environ, **oidc)
    except ConfigurationError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    directory = _viewer_dir(state, viewer_keys)
    viewers = None  # with a provider and no viewer keys: provider sign-in alone
    if config is None or (directory.is_dir() and any(directory.glob("*.pem"))):
        viewers = ViewerTokens(
            viewer_keyring(directory), issuer=viewer_issuer, audience=viewer_issuer
        )
    provider = Provider(config) if config is not None else None
    if provider is not None:
        try:
            await provider.discover()
        except ProviderRefused as exc:  # tried again at the first sign-in
            err.print(f"warning: {provider.config.issuer}: {exc}", soft_wrap=True)
    async with (
        Turnlog(settings, keyring=keyring(settings)) as tl,
        InboxService(tl, projection_dir(settings)) as service,
    ):
        app = create_app(service, viewers or (lambda _: None), provider=provider)
        server = InboxServer(app, host, port)
        await server.start()
        err.print(
            f"inbox on {server.url}/ reading {projection_dir(settings)}; Ctrl-C stops",
            soft_wrap=True,
        )
        try:
            await stop.wait()
        finally:
            service.closing.set()
            await server.stop()


@inbox_app.command("token")
def token(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(help="Who the viewer is (shown in the inbox).")],
    scope: Annotated[
        list[str],
        typer.Option(help="A tenant scope (scope_hash) they may answer; repeat it; '*' for all."),
    ],
    hours: Annotated[float, typer.Option(help="How long the token is valid.")] = 8.0,
    viewer_keys: ViewerKeysOpt = None,
    viewer_issuer: ViewerIssuerOpt = "turnlog-inbox",
) -> None:
    """Print a viewer token (creating the viewer key on first use); log in with it."""
    from turnlog.clock import utc_now
    from turnlog.errors import TurnlogError
    from turnlog.inbox.auth import ViewerTokens, viewer_keyring

    directory = _viewer_dir(run_state(ctx), viewer_keys)
    if not 0 < hours <= 24 * 366:
        raise fail(f"--hours must be above 0 and at most a year, not {hours}", EXIT_USAGE)
    try:
        viewers = ViewerTokens(
            viewer_keyring(directory, create=True), issuer=viewer_issuer, audience=viewer_issuer
        )
        minted = viewers.mint(name, scope, ttl=timedelta(hours=hours), now=utc_now())
    except (TurnlogError, OSError) as exc:
        raise fail(
            str(exc), EXIT_USAGE if isinstance(exc, TurnlogError) else EXIT_FAILURE
        ) from None
    out.print(minted, soft_wrap=True, highlight=False)
