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

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
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


#: ``answer``'s ways to decide on an approval, each instead of a ``--response``.
DECISION_OPTIONS = "--approve, --edit ARGUMENTS or --reject MESSAGE"


def decision_response(
    claims: Any,
    *,
    approve: bool,
    edit: str | None,
    reject: str | None,
    message: str | None,
) -> str:
    """The ``approve_tool_call`` response deciding on the call the token ``claims`` bind (its
    tool and arguments' hash), as ``approve`` / ``edit`` / ``reject`` write it -- so a person
    approves from the command line without computing a hash. ``ValueError`` (a usage error)
    for a token of another interaction or edited arguments that are not JSON."""
    from turnlog.contracts.approvals import APPROVE, APPROVE_TOOL_CALL, EDIT, REJECT

    if claims.interaction != APPROVE_TOOL_CALL or not claims.tool_name:
        raise ValueError(
            f"{DECISION_OPTIONS} decide on an {APPROVE_TOOL_CALL} pause; this one asks "
            f"{claims.interaction}: answer it with --response JSON"
        )
    edited: str | None = None
    if edit is not None:
        try:
            edited = json.dumps(json.loads(edit), sort_keys=True)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"--edit takes the arguments as JSON: {exc}") from None
    decision = APPROVE if approve else EDIT if edit is not None else REJECT
    response = {
        "decision": decision,
        "tool": claims.tool_name,
        "arguments_hash": claims.arguments_hash,
        "arguments_json": edited,
        "message": reject if decision == REJECT else message,
    }
    return json.dumps(response, ensure_ascii=False)


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


def waiting_row(pause: Any, now_ms: int) -> dict[str, Any]:
    """A row of ``turnlog pending`` from the store's waiting index (a ``WaitingPause``): the
    same fields as :meth:`Open.row`, without reading the pause's record."""
    return {
        "token_id": pause.token_id,
        "thread_id": pause.thread_id,
        "checkpoint_id": pause.checkpoint_id,
        "interaction": pause.interaction,
        "expires_at_ms": pause.expires_at_ms,
        "expires_in": human_seconds((pause.expires_at_ms - now_ms) / 1000),
        "scope": pause.scope,
        "session": pause.session,
        "run": pause.run,
        "call": pause.call,
    }


def asked_rows(store: Any, rows: list[dict[str, Any]]) -> None:
    """Add to each ``pending`` row what its pause asks (``tool``, ``arguments``, ``asks``:
    marked and clipped), read from the stored pauses with one multi-get and no decoding of
    their messages; of a pause of several calls, the row's own call's request."""
    from turnlog.contracts.asked import Asked, asked
    from turnlog.errors import DecodeError
    from turnlog.wire.skim import read_stored

    for row, stored in zip(rows, store.pause_values([r["token_id"] for r in rows]), strict=True):
        found = Asked(row["interaction"], None, None, "")
        if stored is not None:
            try:
                pause = read_stored(stored)
            except DecodeError:
                pause = None
            if pause is not None:
                request, name = pause.request_json, pause.response_schema
                for call in pause.group:
                    if call["token_id"] == row["token_id"]:
                        request, name = str(call["request_json"]), str(call["response_schema"])
                found = asked(name, request)
        row.update(found.as_dict())


def call_rows(pause: PauseRecorded, outcomes: dict[str, str | None]) -> list[dict[str, Any]]:
    """Each call of ``pause`` as ``show`` prints it: its id, token, what it asks and its state
    (``outcomes``: each call token's ledger outcome, ``None`` when unanswered)."""
    from turnlog.contracts.asked import asked
    from turnlog.contracts.group import call_state, calls_of, group_state

    calls = calls_of(pause)
    state = group_state([outcomes.get(c.token_id) for c in calls])
    return [
        {
            "call": call.tool_call_id or call.interrupt_id,
            "token_id": call.token_id,
            **asked(call.response_schema, call.request_json).as_dict(),
            "state": call_state(state, outcomes.get(call.token_id)),
        }
        for call in calls
    ]


def claim_of_row(entry: Any) -> dict[str, Any] | None:
    """The continuation claim a ledger row (a ``LedgerEntry``) carries, as ``show``,
    ``status`` and ``pending`` print it (``None``: nobody claimed the turn): who holds it, since
    when, and whether its holder said done (``finished``) or not (``claimed``: running, or its
    holder died before done -- ``continue_turn(token, retake=True)`` takes it again)."""
    if entry is None or not entry.claim_state:
        return None
    at = datetime.fromtimestamp(entry.claimed_at_ms / 1000, UTC)
    return {
        "claim_id": entry.claim_id,
        "claimant": entry.claimant,
        "claimed_at": at.isoformat(timespec="seconds"),
        "state": entry.claim_state,
    }


def claim_words(claim: dict[str, Any]) -> str:
    """``claimed by X at T, not finished`` / ``continued by X at T, finished``: a claim in a
    line (its holder's name marked as the inbox marks it)."""
    from turnlog.contracts.ledger import ClaimState
    from turnlog.contracts.visible import clip, visible

    who = clip(visible(claim["claimant"] or "an unnamed claimant"), 120)
    if claim["state"] == ClaimState.FINISHED:
        return f"continued by {who} at {claim['claimed_at']}, finished"
    return f"claimed by {who} at {claim['claimed_at']}, not finished"


def unfinished_claims(store: Any, now_ms: int) -> list[dict[str, Any]]:
    """The resumed turns claimed and not said done, oldest claim first, each with its thread,
    token and claim (``age_seconds``: how long it has been held)."""
    rows = []
    for token_id, entry in store.unfinished_claims():
        claim = claim_of_row(entry)
        if claim is not None:
            age = round(max(0, now_ms - entry.claimed_at_ms) / 1000, 1)
            rows.append(
                {"thread_id": entry.thread_id, "token_id": token_id, **claim, "age_seconds": age}
            )
    return rows


#: What a claim left unfinished is followed by in ``pending`` and ``status``.
RETAKE_HINT = (
    "running, or its holder died before done: continue_turn(token, retake=True) retakes it"
)


def recorded_of(store: Any, token_id: str) -> PauseRecorded | None:
    """The recorded pause behind ``token_id``, decoded (``None``: not in the store, or bytes
    that are not a pause); of a pause of several calls, the view of the token's own call."""
    from turnlog.contracts.group import view_for_token
    from turnlog.errors import DecodeError
    from turnlog.wire.codec import decode

    info = store.pause_for_token(token_id)
    if info is None:
        return None
    try:
        return view_for_token(decode(info.value, PauseRecorded), token_id)
    except DecodeError:
        return None


def open_pauses(store: Any, now: datetime, thread: str) -> list[Open]:
    """The pending pauses of ``thread`` in ``store``, soonest deadline first: read through the
    thread's own keys, never the whole of what waits."""
    found = []
    for pause in store.waiting_of_thread(thread, int(now.timestamp() * 1000)):
        recorded = recorded_of(store, pause.token_id)
        if recorded is not None:
            found.append(Open(recorded, pause.expires_at_ms))
    return found


_AGE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?")


def age_ms(text: str, option: str) -> int:
    """``90``, ``90s``, ``15m``, ``2h``, ``3d``, ``1h30m``: milliseconds; ``ValueError`` naming
    the option for anything else."""
    found = _AGE.fullmatch(text.strip())
    if not text.strip() or found is None or not any(found.groups()):
        raise ValueError(f"{option} takes an age such as 90s, 15m, 2h, 3d or 1h30m, got {text!r}")
    days, hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000


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
    """Print what the worker decided for the answer: resumed, or held for the other calls of
    its pause (both exit 0); a rejection exits 3, no decision 1."""
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
    if outcome.held is not None:
        waiting = list(outcome.waiting)
        data["outcome"] = {
            "resumed": False,
            "held": True,
            "thread_id": outcome.held.thread_id,
            "waiting": waiting,
        }
        if as_json:
            print_json(data)
        else:
            thread = outcome.held.thread_id
            calls = (
                f"waiting on {', '.join(waiting)}"
                if waiting
                else "no other call waits: they were answered or expired "
                f"(turnlog trail {thread} tells which)"
            )
            out.print(
                f"held for the other calls of its pause on thread {thread} — {calls}",
                highlight=False,
                soft_wrap=True,
            )
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
