"""LangGraph: a graph's ``interrupt(payload)`` becomes a durable turnlog pause, and the resumed
turn the ``Command(resume={interrupt_id: value})`` that continues the graph, exactly once
(``pip install turnlog[langgraph]``).

LangGraph's own checkpointer keeps the graph's state; what it does not give is a pause that
survives the process, is answered from anywhere and continues exactly once. So each interrupt
is recorded as a call of a pause whose request is the interrupt's payload -- a question
(``ask_user``), or an approval when the payload is ``approval_request(tool, arguments)`` --
and the person's answer, checked against the interaction, is the value ``interrupt()``
returns::

    result = await graph.ainvoke(inputs, config)
    if interrupts_of(result):                       # parallel nodes: one pause for them all
        paused = await pause_run(tl, result, config, run_id=..., session_id=..., scope_hash=...)
    ...                                             # any process, a durable checkpointer
    result = await continue_run(tl, token, graph, config)   # AlreadyContinued if it ran already

:func:`continue_run` claims the resumed turn (``Turnlog.continue_turn``), refuses a config of
another thread than the pause's (the graph would silently do nothing) and a thread whose graph
no longer waits on the interrupts, invokes the graph with :func:`resume_command`, and says
done. Continuing in another process needs a durable checkpointer
(``langgraph-checkpoint-sqlite``'s ``AsyncSqliteSaver``, ``langgraph-checkpoint-postgres``),
not ``InMemorySaver``: the graph's state and pending interrupts are LangGraph's, the pause and
answer turnlog's.

In an approval node, :func:`approved_call` turns the decision ``interrupt()`` returns into the
call to run -- the shape ``turnlog.approved_call(turn)`` gives -- and :func:`idempotency_key`
is the call's key when the graph was continued by :func:`continue_run`.

It is one module on purpose: the pause and the continue share LangGraph's interrupt ids and
thread rules (the resume map keyed by id, a config of another thread refused on both sides),
and what a user imports is this module alone, as with the other adapters.
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

from turnlog.adapters import rejection_message, require_signing_key, with_asking_round
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, REJECT, arguments_hash
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.group import CallToPause
from turnlog.contracts.interactions import ASK_USER
from turnlog.errors import PauseInvalid, TurnlogError
from turnlog.tokens.peek import peek_claims

__all__ = [
    "GraphNotWaiting",
    "approved_call",
    "continue_run",
    "idempotency_key",
    "interaction_of",
    "interrupts_of",
    "pause_interrupt",
    "pause_interrupts",
    "pause_run",
    "rejection_message",
    "resume_command",
    "resume_value",
    "to_records",
]

#: LangGraph tells a resume map from a plain resume value by its keys: all of them interrupt
#: ids, the 32 lowercase hex digits of an xxh3-128 digest.
_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


class GraphNotWaiting(TurnlogError, LookupError):
    """:func:`continue_run` found the graph's thread not waiting on the resumed turn's
    interrupts: a checkpointer that did not outlive the pausing process (``InMemorySaver``),
    another checkpointer or graph, or a continuation that already went through. The claim was
    taken and is not done: once the graph is right, ``continue_run(..., retake=True)``."""

    def __init__(self, thread_id: str, interrupt_ids: Sequence[str]) -> None:
        super().__init__(
            f"the graph's thread {thread_id!r} is not waiting on interrupt "
            f"{', '.join(interrupt_ids)}: compile the graph on the durable checkpointer it was "
            "paused with (not InMemorySaver) -- nothing was invoked; the turn's claim stays "
            "taken and not done, so continue it again with retake=True"
        )
        self.thread_id = thread_id
        self.interrupt_ids = tuple(interrupt_ids)


def to_records(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """LangChain messages (a graph state's ``messages``) as role/content records, for
    ``messages=``; records given as mappings pass as they are."""
    records: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, Mapping):
            records.append(dict(message))
            continue
        role = _ROLES.get(str(getattr(message, "type", "")))
        if role is None:
            raise ValueError(f"a {type(message).__name__} is no system, human, ai or tool message")
        content = message.content
        text = content if isinstance(content, str) else message.text
        record: dict[str, Any] = {"role": role, "content": text}
        calls = getattr(message, "tool_calls", None) or ()
        if calls:
            record["tool_calls"] = [
                {"id": c.get("id") or "", "name": c["name"], "arguments": c.get("args")}
                for c in calls
            ]
        if role == "tool":
            record["tool_call_id"] = message.tool_call_id
            record["name"] = getattr(message, "name", None)
        records.append(record)
    return records


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


def interaction_of(interrupt: Interrupt) -> str:
    """The interaction an interrupt asks for, read from its payload: ``approve_tool_call`` for
    ``approval_request(tool, arguments)`` (``{"tool", "arguments"}``), ``ask_user`` for
    anything else. Pass ``interaction=`` to the pause functions for one of your own."""
    value = interrupt.value
    if isinstance(value, Mapping) and set(value) == {"tool", "arguments"}:
        return APPROVE_TOOL_CALL
    return ASK_USER


def _reserved(interrupt: Interrupt, interaction: str) -> ReservedCall:
    value = interrupt.value
    if interaction == APPROVE_TOOL_CALL and isinstance(value, Mapping):
        return ReservedCall(interrupt.id, str(value.get("tool", "")), value.get("arguments"))
    return ReservedCall(interrupt.id, interaction, value)


async def pause_run(
    tl: Turnlog,
    result: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    run_id: str | None = None,
    session_id: str | None = None,
    scope_hash: str,
    besides: Iterable[Interrupt | str] = (),
    interaction: str | Callable[[Interrupt], str] = interaction_of,
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> tuple[Paused, ...]:
    """Pause every interrupt the graph stopped on (``result`` of ``graph.invoke``), once, on
    the config's thread: questions and approvals in any mix (:func:`interaction_of`), the
    state's ``messages`` (when it has them) as the conversation. One ``Paused`` per interrupt;
    the turn resumes once, when the last is answered. ``besides``: interrupts paused already
    (pending before a resume), left out. ``run_id`` and ``session_id`` default to the thread
    id (one run per thread); ``scope_hash`` binds the answer to your tenant or scope."""
    thread_id = _thread_of(config)
    pending = interrupts_of(result, besides=besides)
    return await pause_interrupts(
        tl, pending, thread_id=thread_id, run_id=run_id or thread_id,
        session_id=session_id or thread_id, scope_hash=scope_hash, interaction=interaction,
        messages=result.get("messages") or (), prompt=prompt, ttl=ttl,
    )  # fmt: skip


def _thread_of(config: Mapping[str, Any]) -> str:
    thread = (config.get("configurable") or {}).get("thread_id")
    if not isinstance(thread, str) or not thread:
        raise PauseInvalid("config", 'has no {"configurable": {"thread_id": ...}}')
    return thread


async def pause_interrupt(
    tl: Turnlog,
    interrupt: Interrupt,
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    interaction: str | None = None,
    messages: Sequence[Any] = (),
    prompt: str = "",
    ttl: timedelta | float | None = None,
) -> Paused:
    """Record ``interrupt`` as a pause of ``thread_id`` (use the graph's own thread id, so the
    resumed turn names the graph thread to continue). ``interaction`` defaults to
    :func:`interaction_of` the interrupt; ``messages`` is the conversation so far (LangChain
    messages or role/content dicts); the interrupt is its asking round, once. Each interrupt
    of a thread paused so is a pause of its own (its checkpoint is ``interrupt-<id>``)."""
    require_signing_key(tl)
    name = interaction or interaction_of(interrupt)
    checkpoint = TurnCheckpoint(
        run_id=run_id,
        session_id=session_id,
        thread_id=thread_id,
        checkpoint_id=f"interrupt-{interrupt.id}",
        scope_hash=scope_hash,
        interrupt_id=interrupt.id,
        name=name,
        prompt=prompt,
        messages=with_asking_round(to_records(messages), [_reserved(interrupt, name)]),
        created_at=utc_now(),
    )
    return await tl.pause(checkpoint, request=interrupt.value, interaction=name, ttl=ttl)


async def pause_interrupts(
    tl: Turnlog,
    interrupts: Sequence[Interrupt],
    *,
    thread_id: str,
    run_id: str,
    session_id: str,
    scope_hash: str,
    interaction: str | Callable[[Interrupt], str] = interaction_of,
    messages: Sequence[Any] = (),
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
    every interrupt, or is a function choosing it from each (by default
    :func:`interaction_of`: an approval for an ``approval_request`` payload, else
    ``ask_user``). One interrupt is a pause of one call, as :func:`pause_interrupt` records
    it."""
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
    require_signing_key(tl)
    names = [name_of(one) for one in interrupts]
    first = interrupts[0]
    reserved = [_reserved(one, n) for one, n in zip(interrupts, names, strict=True)]
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
        messages=with_asking_round(to_records(messages), reserved),
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


def resume_command(
    turn: TurnResumed,
    config: Mapping[str, Any] | None = None,
    *,
    key_for: Callable[[str], str] | None = None,
) -> Command[Any]:
    """``Command(resume={turn.interrupt_id: response})`` for ``graph.invoke`` / ``ainvoke`` on
    the turn's thread -- and for a turn of several interrupts (:func:`pause_interrupts`),
    ``Command(resume={id: response, ...})`` answering every one of them at once.

    Give the ``config`` it is invoked with, and a config of another thread is refused
    (``ValueError``): LangGraph would find no such interrupt there and silently do nothing.
    An approval's response also carries its ``tool_call_id`` and, with ``key_for`` (a
    continuation's), its ``idempotency_key``, for :func:`approved_call` and
    :func:`idempotency_key` in the node.

    Always keyed by the interrupt's id, not only when several are pending: with two pending
    (parallel nodes interrupting) a bare value is LangGraph's ``RuntimeError``, and with one
    pending a bare value answers *whichever* interrupt is pending -- so a turn delivered again
    after its interrupt was answered would answer the graph's next question with the old
    answer. Keyed, the value reaches its own interrupt, and one no longer pending is ignored.
    ``ValueError`` for a turn whose interrupt id is no LangGraph id (paused otherwise than by
    this adapter), which LangGraph would take for a plain value.
    """
    if config is not None and _thread_of(config) != turn.thread_id:
        raise ValueError(
            f"the config is of thread {_thread_of(config)!r}, the resumed turn of thread "
            f"{turn.thread_id!r}: LangGraph would find no interrupt to resume there and do "
            "nothing"
        )
    answers = turn.answers or (
        {
            "interrupt_id": turn.interrupt_id,
            "tool_call_id": turn.tool_call_id or turn.interrupt_id,
            "name": turn.name,
            "response_json": turn.response_json,
        },
    )
    resume: dict[str, Any] = {}
    for answer in answers:
        interrupt_id = str(answer["interrupt_id"])
        if not _INTERRUPT_ID.fullmatch(interrupt_id):
            raise ValueError(
                f"turn {turn.token_id} has interrupt id {interrupt_id!r}, not a LangGraph "
                "interrupt's: pause the interrupt with this adapter's pause functions"
            )
        value = json.loads(str(answer["response_json"]))
        if answer.get("name") == APPROVE_TOOL_CALL and isinstance(value, dict):
            call_id = str(answer.get("tool_call_id") or interrupt_id)
            value["tool_call_id"] = call_id
            if key_for is not None and value.get("decision") != REJECT:
                value["idempotency_key"] = key_for(call_id)
        resume[interrupt_id] = value
    return Command(resume=resume)


async def continue_run(
    tl: Turnlog,
    token: str,
    graph: Any,
    config: Mapping[str, Any] | None = None,
    *,
    retake: bool = False,
    timeout: float = 30.0,
) -> Any:
    """Continue the graph paused with ``token`` (any call's token of the pause), exactly once,
    and return what ``graph.ainvoke`` returns: claim the resumed turn (``tl.continue_turn``;
    waits up to ``timeout`` for it), check that the graph's thread (``config``, by default the
    pause's thread) still waits on its interrupts, invoke ``resume_command``, and say done.

    Another caller of the same turn gets ``turnlog.AlreadyContinued`` naming who continued it,
    and invokes nothing; ``retake=True`` takes a claim whose holder died before done (each
    approval's idempotency key is the same as before). A config of another thread than the
    pause's is refused (``ValueError``) before anything is claimed; a thread not waiting on the
    interrupts is :class:`GraphNotWaiting`."""
    paused_thread = str(peek_claims(token).get("thread_id") or "")
    if config is not None and paused_thread and _thread_of(config) != paused_thread:
        raise ValueError(
            f"the config is of thread {_thread_of(config)!r}, the pause of thread "
            f"{paused_thread!r}: LangGraph would find no interrupt to resume there and do "
            "nothing; nothing was claimed"
        )
    async with tl.continue_turn(token, timeout=timeout, retake=retake) as claim:
        turn = claim.turn
        run_config: dict[str, Any] = dict(config or {})
        run_config["configurable"] = {
            **(run_config.get("configurable") or {}),
            "thread_id": turn.thread_id,
        }
        command = resume_command(turn, run_config, key_for=claim.key_for)
        waiting = {i.id for i in (await graph.aget_state(run_config)).interrupts}
        asked = list(command.resume) if isinstance(command.resume, dict) else []
        if not waiting.intersection(asked):
            raise GraphNotWaiting(turn.thread_id, asked)
        return await graph.ainvoke(command, run_config)


def approved_call(decision: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any] | None:
    """In the node, the call an approval lets run: ``{"id", "name", "arguments"}`` -- the shape
    ``turnlog.approved_call(turn)`` gives, arguments as a value with the person's edits
    applied, ``id`` the paused call's -- or ``None`` when the person rejected it (answer the
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
    return {"id": str(decision.get("tool_call_id") or ""), "name": tool, "arguments": arguments}


def idempotency_key(decision: Mapping[str, Any]) -> str | None:
    """In the node, the idempotency key of the approved call (``"<token id>:<call id>"``, the
    same on a retake) when the graph was continued by :func:`continue_run`, else ``None``. A
    tool that honours it cannot run twice even across a crash between the claim and done."""
    key = decision.get("idempotency_key")
    return key if isinstance(key, str) and key else None
