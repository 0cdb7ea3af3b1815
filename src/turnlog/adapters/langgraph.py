"""LangGraph: a graph's ``interrupt(payload)`` becomes a durable turnlog pause, and the resumed
turn the ``Command(resume={interrupt_id: value})`` that continues the graph
(``pip install turnlog[langgraph]``).

LangGraph's own checkpointer keeps the graph's state; what it does not give is a pause that
survives the process, is answered from anywhere and resumes exactly once. So the interrupt is
recorded as a pause whose request is the interrupt's payload and whose answered call is the
interrupt's id; the person's answer is checked against the interaction like any other; and the
resumed turn's response -- already validated -- is the value ``interrupt()`` returns::

    result = await graph.ainvoke(inputs, config)
    pending = interrupts_of(result)
    if pending:                                     # parallel nodes: one pause for them all
        paused = await pause_interrupts(tl, pending, thread_id=..., run_id=..., session_id=...,
                                        scope_hash=...)
    ...                                             # any process, a durable checkpointer
    before = (await graph.aget_state(config)).interrupts
    result = await graph.ainvoke(resume_command(turn), config)
    for pending in interrupts_of(result, besides=before):   # only the ones not paused yet
        ...

Continuing in another process needs a durable checkpointer (``langgraph-checkpoint-sqlite``'s
``AsyncSqliteSaver``, ``langgraph-checkpoint-postgres``), not ``InMemorySaver``: the graph's
state and pending interrupts are LangGraph's, the pause and answer turnlog's.

An interrupt for ``approve_tool_call`` carries the approval request (``{"tool", "arguments"}``);
its asking round is then that very call, so the approval is bound to it, and in the node
:func:`approved_call` turns the decision ``interrupt()`` returns into the call to run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

try:
    from langgraph.types import Command, Interrupt
except ImportError as exc:  # the optional extra is not installed
    raise ImportError("turnlog.adapters.langgraph needs `pip install turnlog[langgraph]`") from exc

from turnlog.adapters import rejection_message
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, REJECT, arguments_hash
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.group import CallToPause
from turnlog.contracts.interactions import ASK_USER
from turnlog.errors import PauseInvalid

__all__ = [
    "approved_call",
    "interrupts_of",
    "pause_interrupt",
    "pause_interrupts",
    "rejection_message",
    "resume_command",
    "resume_value",
]

#: LangGraph tells a resume map from a plain resume value by its keys: all of them interrupt
#: ids, the 32 lowercase hex digits of an xxh3-128 digest.
_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")


def interrupts_of(
    result: Mapping[str, Any], *, besides: Iterable[Interrupt | str] = ()
) -> list[Interrupt]:
    """The interrupts a ``graph.invoke`` result stopped on (none when the graph finished),
    leaving out ``besides`` (interrupts or their ids).

    After a resume, LangGraph lists every interrupt still pending -- a parallel node's that was
    paused before, with the same id, among them. Pass the interrupts pending before the resume
    (``graph.get_state(config).interrupts``) as ``besides`` and only the new ones are left,
    the ones to pause: pausing one twice would hand the person two tokens for one question.
    """
    known = {i if isinstance(i, str) else i.id for i in besides}
    return [i for i in result.get("__interrupt__", ()) if i.id not in known]


async def pause_interrupt(
    tl: Turnlog,
    interrupt: Interrupt,
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    interaction: str = ASK_USER,
    messages: Sequence[Mapping[str, Any]] = (),
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> Paused:
    """Record ``interrupt`` as a pause of ``thread_id`` (use the graph's own thread id, so the
    resumed turn names the graph thread to continue). ``messages`` is the conversation so far,
    as role/content dicts; the interrupt is appended as the asking round. Each interrupt of a
    thread is a pause of its own (its checkpoint is ``interrupt-<id>``), so parallel nodes'
    interrupts are answered and resumed one at a time."""
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"interrupt-{interrupt.id}",
        scope_hash=scope_hash,
        interrupt_id=interrupt.id,
        name=interaction,
        prompt=prompt,
        messages=captured_messages(messages, "", [_reserved(interrupt, interaction)]),
        created_at=utc_now(),
    )
    return await tl.pause(checkpoint, request=interrupt.value, interaction=interaction, ttl=ttl)


def _reserved(interrupt: Interrupt, interaction: str) -> ReservedCall:
    value = interrupt.value
    if interaction == APPROVE_TOOL_CALL and isinstance(value, Mapping):
        return ReservedCall(interrupt.id, str(value.get("tool", "")), value.get("arguments"))
    return ReservedCall(interrupt.id, interaction, value)


async def pause_interrupts(
    tl: Turnlog,
    interrupts: Sequence[Interrupt],
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    interaction: str | Callable[[Interrupt], str] = ASK_USER,
    messages: Sequence[Mapping[str, Any]] = (),
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> tuple[Paused, ...]:
    """Record every interrupt the graph stopped on (parallel nodes, each asking) as **one**
    pause: one ``Paused`` per interrupt, in the order given, each answered on its own; the turn
    resumes once, when the last is answered, and :func:`resume_command` then answers every
    interrupt in one ``Command(resume={id: value, ...})``.

    Resuming all of them at once is also what keeps the graph clear of LangGraph's own trouble
    with parallel interrupts resumed one at a time (a node run again after one of its siblings
    is resumed, a resolved interrupt raised again). ``interaction`` names the interaction of
    every interrupt, or is a function choosing it from each (``lambda i: APPROVE_TOOL_CALL if
    "tool" in i.value else ASK_USER``). One interrupt is a pause of one call, as
    :func:`pause_interrupt` records it."""
    interrupts = list(interrupts)
    if not interrupts:
        raise PauseInvalid("interrupts", "the graph stopped on no interrupt; nothing to pause")
    ids = [i.id for i in interrupts]
    if len(set(ids)) != len(ids):
        raise PauseInvalid("interrupts", "an interrupt is named twice; nothing was paused")

    def name_of(one: Interrupt) -> str:
        return interaction(one) if callable(interaction) else interaction

    if len(interrupts) == 1:
        (only,) = interrupts
        return (
            await pause_interrupt(
                tl, only, thread_id=thread_id, run_id=run_id, session_id=session_id,
                scope_hash=scope_hash, interaction=name_of(only), messages=messages,
                prompt=prompt, ttl=ttl,
            ),
        )  # fmt: skip
    names = [name_of(one) for one in interrupts]
    first = interrupts[0]
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        # One pause for the set: named after its interrupts, so pausing the same set again
        # is the same checkpoint.
        checkpoint_id="interrupts-" + "-".join(sorted(ids))[:200],
        scope_hash=scope_hash,
        interrupt_id=first.id,
        name=names[0],
        prompt=prompt,
        messages=captured_messages(
            messages, "", [_reserved(one, n) for one, n in zip(interrupts, names, strict=True)]
        ),
        created_at=utc_now(),
    )
    calls = [
        CallToPause(one.id, n, one.value, interrupt_id=one.id)
        for one, n in zip(interrupts, names, strict=True)
    ]
    return await tl.pause_calls(checkpoint, calls, ttl=ttl)


def resume_value(turn: TurnResumed) -> Any:
    """What ``interrupt()`` returns in the continued graph: the person's validated response."""
    return json.loads(turn.response_json)


def resume_command(turn: TurnResumed) -> Command[Any]:
    """``Command(resume={turn.interrupt_id: response})`` for ``graph.invoke`` / ``ainvoke`` on
    the turn's thread -- and for a turn of several interrupts (:func:`pause_interrupts`),
    ``Command(resume={id: response, ...})`` answering every one of them at once.

    Always keyed by the interrupt's id, not only when several are pending: with two pending
    (parallel nodes interrupting) a bare value is LangGraph's ``RuntimeError``, and with one
    pending a bare value answers *whichever* interrupt is pending -- so a turn delivered again
    after its interrupt was answered would answer the graph's next question with the old
    answer. Keyed, the value reaches its own interrupt, and one no longer pending is ignored.
    ``ValueError`` for a turn whose interrupt id is no LangGraph id (paused otherwise than by
    :func:`pause_interrupt` or :func:`pause_interrupts`), which LangGraph would take for a
    plain value.
    """
    answers = turn.answers or (
        {"interrupt_id": turn.interrupt_id, "response_json": turn.response_json},
    )
    resume: dict[str, Any] = {}
    for answer in answers:
        interrupt_id = str(answer["interrupt_id"])
        if not _INTERRUPT_ID.fullmatch(interrupt_id):
            raise ValueError(
                f"turn {turn.token_id} has interrupt id {interrupt_id!r}, not a LangGraph "
                "interrupt's: pause the interrupt with pause_interrupt() or pause_interrupts()"
            )
        resume[interrupt_id] = json.loads(str(answer["response_json"]))
    return Command(resume=resume)


def approved_call(decision: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any] | None:
    """In the node, the call an approval lets run: ``{"name", "arguments"}`` -- arguments as a
    value, the person's edits applied -- or ``None`` when the person rejected it (answer the
    call with :func:`rejection_message` then, the text every adapter gives the model)::

        request = approval_request(call["name"], call["args"])
        decision = interrupt(request)
        run = approved_call(decision, request)

    ``decision`` is what ``interrupt()`` returned, ``request`` what it was given. The worker
    bound the decision to the paused call; a node that re-runs and asks about another call
    (other arguments, another tool) gets ``ValueError`` instead of running it on that "yes".
    """
    tool, hashed = request.get("tool"), arguments_hash(request.get("arguments"))
    if decision.get("tool") != tool or decision.get("arguments_hash") != hashed:
        raise ValueError(
            f"the decision is on {decision.get('tool')!r} with arguments "
            f"{str(decision.get('arguments_hash'))[:12]}..., this node asks about {tool!r} with "
            f"arguments {hashed[:12]}...: the call must not run on that approval"
        )
    if decision["decision"] == REJECT:
        return None
    edited = decision.get("arguments_json")
    arguments = request.get("arguments") if edited is None else json.loads(edited)
    return {"name": tool, "arguments": arguments}
