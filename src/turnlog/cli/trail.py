"""``turnlog trail THREAD``: what happened to a thread's pauses, one line a fact, from the log.

Paused, answered by whom (as the answer's publisher verified them: the inbox's signed-in
viewer), the token spent, the turn resumed, an answer refused and why, a window closed -- read
from the thread's partition of the five topics, needing no store and no key.
"""

from __future__ import annotations

from typing import Annotated

import typer

from turnlog.cli.app import BrokerTimeoutOpt, JsonOpt, app, out, print_json, run_async, run_state


@app.command("trail")
@run_async
async def trail(
    ctx: typer.Context,
    thread_id: Annotated[str, typer.Argument(help="The thread whose pauses to follow.")],
    token: Annotated[
        str | None, typer.Option("--token", help="Only this pause's trail (its token id).")
    ] = None,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """A thread's trail: each pause, each answer and who sent it, and what came of it."""
    from turnlog.audit.trail import read_trail

    settings = run_state(ctx).settings
    entries = await read_trail(
        settings, thread_id, token_id=token, timeout=settings.broker_timeout_seconds
    )
    if as_json:
        print_json({"thread_id": thread_id, "trail": [e.as_dict() for e in entries]})
        return
    if not entries:
        out.print(f"nothing on the log for thread {thread_id}", markup=False, highlight=False)
        return
    for e in entries:
        ids = " ".join(
            part
            for part in (
                f"token {e.token_id}" if e.token_id else "",
                f"answer {e.answer_id}" if e.answer_id else "",
            )
            if part
        )
        stamp = e.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        out.print(
            f"{stamp}  {e.what:<8}  {ids}  {e.detail}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
