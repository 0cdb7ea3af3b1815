"""What ``pending`` and ``answer`` need to close the loop from the command line alone.

A pause's token is never on the log: the pauses topic holds the token *id* and the claims' facts,
because a token on a topic would hand its authority to every reader of the topic. The CLI signs
the pause's token again from the recorded pause -- the same claims, the same token id and
window, the pause's own four axes -- with the deployment's signing key, as the inbox does on its
server. Only a process holding that key can, and such a process could sign any token already:
nothing is shown that it could not make. Exactly once is untouched: the token id is the
pause's, and the ledger spends it once whichever copy of the token is answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import typer

from turnlog.cli.app import EXIT_FAILURE, EXIT_REFUSED, fail, out, print_json, run_state
from turnlog.contracts.axes import Axes
from turnlog.contracts.events import PauseRecorded
from turnlog.settings import Settings


def human_seconds(seconds: float) -> str:
    """``604791`` -> ``6d 23h 59m``: the three largest units, or the seconds under a minute."""
    left = max(0, int(seconds))
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        count, left = divmod(left, size)
        if count or parts:
            parts.append(f"{count}{name}")
    shown = [p for p in parts[:3] if not p.startswith("0")] or ["0s"]
    return " ".join(shown)


def axes_of(recorded: PauseRecorded) -> dict[str, str | None]:
    """The four axes an answer to ``recorded`` states, under ``answer``'s own names."""
    axes = Axes.of_pause(recorded.checkpoint)
    return {
        "scope": axes.scope_hash,
        "session": axes.session_id,
        "run": axes.run_id,
        "call": axes.call_id,
    }


def reissued(settings: Settings, recorded: PauseRecorded) -> str:
    """The pause's token, signed again from its record with this deployment's signing key."""
    from turnlog.cli.common import issuer
    from turnlog.tokens import PauseClaims

    token: str = issuer(settings).issue(PauseClaims.for_pause(recorded))
    return token


@dataclass(frozen=True, slots=True)
class Open:
    """A pending pause as the store holds it."""

    recorded: PauseRecorded
    expires_at_ms: int

    @property
    def thread_id(self) -> str:
        return self.recorded.checkpoint.thread_id

    def row(self, now_ms: int) -> dict[str, Any]:
        cp = self.recorded.checkpoint
        return {
            "token_id": self.recorded.token_id,
            "thread_id": cp.thread_id,
            "checkpoint_id": cp.checkpoint_id,
            "interaction": self.recorded.response_schema,
            "expires_at_ms": self.expires_at_ms,
            "expires_in": human_seconds((self.expires_at_ms - now_ms) / 1000),
            **axes_of(self.recorded),
        }


def open_pauses(store: Any, now: datetime, thread: str | None = None) -> list[Open]:
    """The pending pauses in ``store`` (of ``thread`` only, when given), soonest deadline first."""
    from turnlog.contracts.group import view_for_token
    from turnlog.errors import DecodeError
    from turnlog.wire.codec import decode

    found = []
    for pause in store.pending(int(now.timestamp() * 1000)):
        if thread is not None and pause.thread_id != thread:
            continue
        info = store.pause_for_token(pause.token_id)
        if info is None:
            continue
        try:
            recorded = view_for_token(decode(info.value, PauseRecorded), pause.token_id)
        except DecodeError:
            continue
        found.append(Open(recorded, pause.expires_at_ms))
    return found


def chosen(pauses: list[Open], thread: str, call: str | None, fresh: str) -> Open | str:
    """The one pending pause of ``thread`` to answer (narrowed by ``call``), or why none is."""
    if call is not None:
        pauses = [p for p in pauses if axes_of(p.recorded)["call"] == call]
    if not pauses:
        which = f" for call {call!r}" if call is not None else ""
        return f"no pending pause on thread {thread!r}{which} (as of {fresh})"
    if len(pauses) > 1:
        calls = ", ".join(str(axes_of(p.recorded)["call"]) for p in pauses)
        many = len(pauses)
        return f"thread {thread!r} has {many} pending pauses (calls {calls}): name one with --call"
    return pauses[0]


async def wait_for_outcome(
    ctx: typer.Context,
    answer_id: str,
    thread_id: str,
    timeout: float,
    data: dict[str, Any],
    as_json: bool,
) -> None:
    """Print what the worker decided for the answer; a rejection exits 3, no decision 1."""
    from turnlog.consumers.outcomes import read_outcome
    from turnlog.kafka.topics import TopicSet

    settings = run_state(ctx).settings
    try:
        outcome = await read_outcome(
            settings, TopicSet.from_settings(settings), answer_id, thread_id=thread_id,
            timeout=timeout,
        )  # fmt: skip
    except TimeoutError as exc:
        raise fail(str(exc), EXIT_FAILURE) from None
    if outcome.resumed is not None:
        turn = outcome.resumed
        data["outcome"] = {
            "resumed": True,
            "thread_id": turn.thread_id,
            "messages": len(turn.history),
        }
        if as_json:
            print_json(data)
        else:
            out.print(f"resumed thread {turn.thread_id} — {len(turn.history)} messages")
        return
    rejected = outcome.rejected
    if rejected is None:  # an outcome is one or the other
        raise fail(f"no outcome for answer {answer_id}", EXIT_FAILURE)
    data["outcome"] = {"resumed": False, "reason": rejected.reason, "step": rejected.step}
    if as_json:
        print_json(data)
    raise fail(
        f"rejected: {rejected.reason} (step {rejected.step}): {rejected.detail}", EXIT_REFUSED
    )
