"""``turnlog inbox``: serve the web inbox; ``turnlog inbox token``: mint a viewer's token.

The inbox reads the projection (``turnlog project`` keeps it) and answers with the deployment's
signing key; viewers log in with tokens signed by a viewer key (``--viewer-keys``, by default
``<keys dir>/viewers``, created by the first ``turnlog inbox token``). ``--demo`` needs none of
this: it sets up its own paused turns, keys and viewer on the local broker.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Annotated

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
    from turnlog.inbox.app import create_app
    from turnlog.inbox.auth import ViewerTokens, viewer_keyring
    from turnlog.inbox.server import InboxServer
    from turnlog.inbox.service import InboxService

    settings = state.settings
    viewers = ViewerTokens(
        viewer_keyring(_viewer_dir(state, viewer_keys)),
        issuer=viewer_issuer,
        audience=viewer_issuer,
    )
    async with (
        Turnlog(settings, keyring=keyring(settings)) as tl,
        InboxService(tl, projection_dir(settings)) as service,
    ):
        server = InboxServer(create_app(service, viewers), host, port)
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
