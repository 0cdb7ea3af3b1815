"""A pause of several calls: one asking round, several calls that each wait on a person.

Models call tools in parallel, so one round may ask for two approvals, or an approval and a
question. The turn can only continue once every one of those calls has its result -- a provider
refuses a transcript with a call left unanswered -- so the round pauses once, for all of them:
one ``PauseRecorded`` (one checkpoint, one record on the log) whose ``group`` lists each call
with its own token, request and interaction. Each call is answered on its own, bound to its
call by its token; the answers that come before the last are *held* (their token is spent with
the ``held`` outcome and the response kept on its ledger row), and the answer that completes
the group resumes the turn once, with every call's observation in the order of the calls. A
window closing expires the calls still open.

A pause of one call has an empty ``group`` and is what every pause was before groups, on the
wire and here: :func:`calls_of` gives it as a group of one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.ledger import Outcome
from turnlog.contracts.messages import NOT_DISPATCHED, normalize_message
from turnlog.contracts.refusals import RefusalReason, refuse
from turnlog.contracts.rehydration import asking_round


class PausedCall(NamedTuple):
    """One call of a pause (a ``PausedCall`` record of ``PauseRecorded.group``)."""

    tool_call_id: str
    interrupt_id: str
    token_id: str
    request_json: str
    request_hash: str
    response_schema: str

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> PausedCall:
        return cls(*(str(record[name]) for name in cls._fields))

    def record(self) -> dict[str, str]:
        return self._asdict()


class CallAnswer(NamedTuple):
    """One call's answer, as a resumed group turn reports it (``TurnResumed.answers``)."""

    tool_call_id: str
    interrupt_id: str
    token_id: str
    answer_id: str
    name: str
    response_json: str

    def record(self) -> dict[str, str]:
        return self._asdict()


class Observed(NamedTuple):
    """What rehydration folds in for one answered call: its observation text, or, for an
    approved call, ``leave_open`` (the arguments it runs with; empty: the model's own)."""

    call_id: str
    observation: str
    leave_open: str | None = None


def is_group(pause: Any) -> bool:
    """Whether ``pause`` (a ``PauseRecorded`` or its skim) waits on more than one call."""
    return len(getattr(pause, "group", ())) > 1


def calls_of(pause: PauseRecorded) -> tuple[PausedCall, ...]:
    """Every call the pause waits on, in the order of the calls: its group, or the one call."""
    if pause.group:
        return tuple(PausedCall.of(call) for call in pause.group)
    cp = pause.checkpoint
    return (
        PausedCall(
            cp.tool_call_id,
            cp.interrupt_id,
            pause.token_id,
            pause.request_json,
            pause.request_hash,
            pause.response_schema,
        ),
    )


def call_of_token(pause: PauseRecorded, token_id: str) -> PausedCall | None:
    """The call whose token is ``token_id``, ``None`` when the pause has no such token."""
    for call in calls_of(pause):
        if call.token_id == token_id:
            return call
    return None


def view_for_token(pause: PauseRecorded, token_id: str) -> PauseRecorded:
    """The pause as its call ``token_id`` sees it: the top-level token, request, interaction,
    and the checkpoint's call and interrupt, are that call's (``group`` is kept whole). Every
    rule written for a pause of one call -- the resume contract, the token re-signed from the
    record, what the inbox shows -- then reads the right call. A token the pause does not hold
    gives the pause as it is (the resume contract then refuses it by name)."""
    if not pause.group:
        return pause
    call = call_of_token(pause, token_id)
    if call is None:
        return pause
    checkpoint = pause.checkpoint
    if (checkpoint.tool_call_id, checkpoint.interrupt_id, checkpoint.name) != (
        call.tool_call_id,
        call.interrupt_id,
        call.response_schema,
    ):
        checkpoint = _with_call(checkpoint, call)
    return dataclasses.replace(
        pause,
        checkpoint=checkpoint,
        token_id=call.token_id,
        request_json=call.request_json,
        request_hash=call.request_hash,
        response_schema=call.response_schema,
    )


def _with_call(checkpoint: TurnCheckpoint, call: PausedCall) -> TurnCheckpoint:
    # Built without __post_init__: the messages are already canonical.
    copy = object.__new__(TurnCheckpoint)
    for f in dataclasses.fields(TurnCheckpoint):
        object.__setattr__(copy, f.name, getattr(checkpoint, f.name))
    object.__setattr__(copy, "tool_call_id", call.tool_call_id)
    object.__setattr__(copy, "interrupt_id", call.interrupt_id)
    object.__setattr__(copy, "name", call.response_schema)
    return copy


def rehydrate_calls(
    checkpoint: TurnCheckpoint, observed: Sequence[Observed]
) -> tuple[dict[str, Any], ...]:
    """The checkpoint's messages, then, for every call of the asking round in its order, the
    observation of an answered call, nothing for an approved one (the continuing agent runs it;
    edited arguments are written into the asking round), and "not dispatched" for a call that
    waited on nobody. Raises ``Refused(asking_round_missing)`` as rehydration does."""
    messages = checkpoint.messages
    found = asking_round(messages)
    if found.position < 0:
        raise refuse(
            RefusalReason.ASKING_ROUND_MISSING,
            f"checkpoint {checkpoint.checkpoint_id!r} holds no assistant message with tool calls",
        )
    by_call = {o.call_id: o for o in observed}
    reserved = dict(found.calls)
    for call_id in by_call:
        if call_id not in reserved:
            raise refuse(
                RefusalReason.ASKING_ROUND_MISSING,
                f"the asking round of checkpoint {checkpoint.checkpoint_id!r} did not reserve "
                f"the answered call {call_id!r}",
            )
        if call_id in found.observed:
            raise refuse(
                RefusalReason.ASKING_ROUND_MISSING,
                f"call {call_id!r} already has a result; its asking round is closed",
            )
    rebuilt = [dict(m) for m in messages]
    edits = {o.call_id: o.leave_open for o in observed if o.leave_open}
    if edits:
        asking = dict(rebuilt[found.position])
        asking["tool_calls"] = [
            {**call, "arguments": edits[call.get("id")]} if call.get("id") in edits else call
            for call in asking["tool_calls"]
        ]
        rebuilt[found.position] = normalize_message(asking)
    added = []
    for call_id, name in found.calls:
        if not call_id or call_id in found.observed:
            continue
        answer = by_call.get(call_id)
        if answer is None:
            added.append(_tool_message(call_id, name, NOT_DISPATCHED))
        elif answer.leave_open is None:
            added.append(_tool_message(call_id, name, answer.observation))
    return (*rebuilt, *added)


def _tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    return normalize_message(
        {"role": "tool", "content": content, "tool_call_id": call_id, "name": name or None}
    )


@dataclasses.dataclass(frozen=True, slots=True)
class CallToPause:
    """One call of the asking round to pause on, for a pause of several calls
    (``Turnlog.pause_calls``).

    ``interaction`` defaults to the call's own tool name in the asking round (``ask_user``
    calls); an approval names ``approve_tool_call`` and gives ``request`` (``approval_request``
    of the call). ``request`` -- JSON text, or a value that becomes JSON -- defaults to the
    arguments the model gave the call. ``interrupt_id`` is a framework's own id for the call
    (a LangGraph interrupt), when it has one.
    """

    tool_call_id: str
    interaction: str | None = None
    request: Any = None
    interrupt_id: str = ""


def group_state(outcomes: Sequence[str | None]) -> str:
    """Where a pause stands, from each of its calls' ledger outcome (``None``: unanswered):
    ``resumed`` once its turn resumed (the held answers were folded into it), ``expired`` when
    a window closed on it, ``held`` while some calls are answered and others wait, else
    ``pending``. A pause of one call is its call's outcome."""
    for state in (Outcome.RESUMED, Outcome.EXPIRED, Outcome.HELD):
        if state in outcomes:
            return state.value
    return "pending"


def call_state(group: str, outcome: str | None) -> str:
    """One call's state in a pause whose :func:`group_state` is ``group``: a resumed or expired
    pause's every call is so; while it is held, each call is held or still pending."""
    if group != Outcome.HELD:
        return group
    return Outcome.HELD.value if outcome == Outcome.HELD else "pending"


def call_name(checkpoint: TurnCheckpoint, call_id: str) -> str | None:
    """The tool name the asking round gave call ``call_id`` (``None``: no such call)."""
    return dict(asking_round(checkpoint.messages).calls).get(call_id)


def call_order(checkpoint: TurnCheckpoint) -> dict[str, int]:
    """Each call id of the asking round and its position in it."""
    return {call_id: i for i, (call_id, _) in enumerate(asking_round(checkpoint.messages).calls)}
