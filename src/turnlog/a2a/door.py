"""An A2A task's ``input-required`` as a turnlog pause, and the client's continuing message as
its answer, continued once across replicas.

The agent asks through :meth:`A2ADoor.ask`: the task's conversation becomes a checkpoint, the
question a pause on Kafka (``turnlog pending``, the inbox and the CLI see it), and the task goes
``input-required``; the pause's token stays on the server, on the tasks topic. A message on that
task (same task id and context id) is taken apart before a2a-sdk runs anything -- in the request
context builder, which the SDK consults before it starts the agent -- and goes through
turnlog's resume contract as an answer (the worker checks the token, the four axes, the request
hash, the response schema, the checkpoint, and consumes the token once), then through the
continuation claim. Only the claim's holder reaches the agent's ``execute()``; every other
message -- the same message on another replica, a retry, a different decision -- is refused by
name with a JSON-RPC error and runs nothing, writes nothing. Why not after ``execute()``: the
SDK runs the agent before its versioned save, so a conflict found at the save is found after the
side effect ran twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

from a2a.helpers.proto_helpers import get_message_text, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.agent_execution.simple_request_context_builder import (
    SimpleRequestContextBuilder,
)
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.types.a2a_pb2 import (
    AgentCard,
    Message,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import TaskNotFoundError

from turnlog.a2a.answers import (
    A2AContinuation,
    answer_id,
    conversation,
    owner_scope,
    refusal,
    response_from_text,
)
from turnlog.a2a.fold import TERMINAL, PauseLink
from turnlog.a2a.store import KafkaTaskEventStream, KafkaTaskStore, OwnerResolver
from turnlog.a2a.tasklog import TaskLog
from turnlog.api import Paused, Turnlog
from turnlog.clock import utc_now
from turnlog.consumers.continuation import AlreadyContinued, ContinuationRefused
from turnlog.contracts.approvals import (
    APPROVE_TOOL_CALL,
    approval_request,
)
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.interactions import ASK_USER
from turnlog.contracts.refusals import Refused
from turnlog.errors import TurnlogError

log = logging.getLogger(__name__)

#: Where a won claim rides from the context builder to ``execute()``: the request's own
#: ``ServerCallContext.state``, so nothing outlives the request in the process.
_HELD = "turnlog.a2a.continuation"


class _ContextBuilder(SimpleRequestContextBuilder):
    def __init__(self, door: A2ADoor) -> None:
        super().__init__(should_populate_referred_tasks=False, task_store=None)
        self.door = door

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        built = await super().build(context, params, task_id, context_id, task)
        if task_id and params is not None:
            held = await self.door.admit(context, params.message, task_id)
            if held is not None:
                context.state[_HELD] = held
        return built


class _DoorHandler(DefaultRequestHandlerV2):
    """a2a-sdk's handler, with one step before it: a retry of the message that continued a
    task now finished gets the finished task back, as the first send did, and runs nothing."""

    door: A2ADoor

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        replayed = await self.door.replayed(context, params.message)
        if replayed is not None:
            return replayed
        sent: Message | Task = await super().on_message_send(params, context)
        return sent

    async def aclose(self) -> None:
        """The claims still being said done first (a replica stopping right after a task
        finished), then the SDK's own teardown."""
        await self.door.finishing()
        await super().aclose()


class _Finishing(AgentExecutor):
    """The agent's executor, saying done on the claim once ``execute()`` returned: a claim
    whose holder died mid-way stays taken (``turnlog show``), to be retaken knowingly. Done
    is said beside the response, not before it, and a stopping replica waits for it."""

    def __init__(self, inner: AgentExecutor, door: A2ADoor) -> None:
        self.inner = inner
        self.door = door

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self.inner.execute(context, event_queue)
        held = continuation(context)
        if held is not None:
            self.door.finish(held, str(context.task_id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self.inner.cancel(context, event_queue)


def continuation(context: RequestContext) -> A2AContinuation | None:
    """The claim this request holds, when its message continued a paused task; else ``None``
    (a new task, or a task not paused through the door)."""
    held = context.call_context.state.get(_HELD) if context.call_context else None
    return cast("A2AContinuation | None", held)


class A2ADoor:
    """One replica's A2A door: the task store and event stream on Kafka, pausing through
    ``tl``, continuing under the claim. Every replica builds its own over the same settings::

        door = A2ADoor(tl, TaskLog(tl.settings))
        handler = door.request_handler(MyExecutor(door), agent_card)
        routes = create_jsonrpc_routes(handler, "/") + create_agent_card_routes(agent_card)

    A ``turnlog worker`` runs beside the replicas, as everywhere.
    """

    def __init__(
        self,
        tl: Turnlog,
        tasks: TaskLog,
        *,
        owner_resolver: OwnerResolver = resolve_user_scope,
        claimant: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.tl = tl
        self.tasks = tasks
        self.owner_resolver = owner_resolver
        self.claimant = claimant
        self.timeout = timeout
        self.store = KafkaTaskStore(tasks, owner_resolver=owner_resolver)
        self.stream = KafkaTaskEventStream(tasks)
        self._finishing: set[asyncio.Task[None]] = set()

    def finish(self, held: A2AContinuation, task_id: str) -> None:
        """Say done on ``held``'s claim, in a task of its own that the request's cancellation
        does not reach; :meth:`finishing` waits for every one still under way."""
        done = asyncio.ensure_future(self._finish(held, task_id))
        self._finishing.add(done)
        done.add_done_callback(self._finishing.discard)

    async def _finish(self, held: A2AContinuation, task_id: str) -> None:
        try:
            await held.claim.done()
        except (TurnlogError, TimeoutError) as exc:
            # The agent's work is done and saved: it is not failed for this. The claim stays
            # taken and visible (``turnlog show``), every later message refused.
            log.warning("task %s ran, but its claim was not marked done: %s", task_id, exc)

    async def finishing(self) -> None:
        """Wait until every claim this door is saying done is decided."""
        while self._finishing:
            await asyncio.wait(set(self._finishing))

    def request_handler(
        self, executor: AgentExecutor, agent_card: AgentCard, **options: Any
    ) -> DefaultRequestHandlerV2:
        """a2a-sdk's default handler on this door's store, stream and context builder.

        ``interrupted_task_timeout`` defaults to 60 s: a task waiting on a person is on the
        log, so a replica lets go of its in-memory copy after a minute instead of holding one
        per paused task for as long as the person takes (a later message re-reads it)."""
        options.setdefault("interrupted_task_timeout", 60.0)
        handler = _DoorHandler(
            _Finishing(executor, self),
            self.store,
            agent_card,
            event_stream=self.stream,
            request_context_builder=_ContextBuilder(self),
            **options,
        )
        handler.door = self
        return handler

    async def ask(
        self,
        context: RequestContext,
        event_queue: EventQueue,
        question: str,
        *,
        tool: str | None = None,
        arguments: Any = None,
        ttl: timedelta | float | None = None,
    ) -> Paused:
        """Pause the task on ``question``: an approval of ``tool(arguments)`` when ``tool`` is
        given, else a free-text question (``ask_user``). Writes the pause, links it to the task
        and puts the task in ``input-required`` with the question as its status message. The
        task must exist already (enqueue it first, as a2a-sdk asks)."""
        task_id, context_id = str(context.task_id), str(context.context_id)
        owner = self.owner_resolver(context.call_context)
        call_id = f"a2a-{uuid.uuid4().hex[:16]}"
        if tool is not None:
            interaction, request = APPROVE_TOOL_CALL, approval_request(tool, arguments)
            reserved = ReservedCall(call_id, tool, arguments)
        else:
            interaction = ASK_USER
            request = {"questions": [{"question": question, "options": []}]}
            reserved = ReservedCall(call_id, ASK_USER, request)
        records = conversation(context.current_task, context.message)
        checkpoint = TurnCheckpoint(
            run_id=task_id,
            session_id=context_id,
            thread_id=task_id,
            checkpoint_id=f"a2a-{uuid.uuid4().hex}",
            scope_hash=owner_scope(owner),
            tool_call_id=call_id,
            interrupt_id=call_id,
            name=interaction,
            prompt=question,
            messages=captured_messages(records, question, [reserved]),
            created_at=utc_now(),
        )
        paused = await self.tl.pause(checkpoint, request=request, interaction=interaction, ttl=ttl)
        link = PauseLink(
            paused.token,
            paused.token_id,
            call_id,
            interaction,
            tool or "",
            json.dumps(arguments, sort_keys=True) if tool is not None else "",
        )
        await self.tasks.link_pause(task_id, owner, link)
        asked = new_text_message(question, context_id=context_id, task_id=task_id,
                                 role=Role.ROLE_AGENT)  # fmt: skip
        await event_queue.enqueue_event(
            TaskStatusUpdateEvent(
                task_id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED, message=asked),
            )
        )
        return paused

    def response_of(self, link: PauseLink, text: str) -> dict[str, Any] | None:
        """The answer a message's text gives (:func:`response_from_text`), or ``None`` when it
        gives none and the task keeps waiting. Override it to read structured parts."""
        return response_from_text(link, text)

    async def replayed(self, context: ServerCallContext, message: Message) -> Task | None:
        """The finished task ``message`` continued, when ``message`` is a retry of that
        continuation (same task, same message id); else ``None``."""
        if not message.task_id:
            return None
        owner = self.owner_resolver(context)
        link = await self.tasks.pause_of(message.task_id, owner)
        stored = self.tasks.fold.owned(message.task_id, owner)
        if link is None or stored is None or stored.state not in TERMINAL:
            return None
        continued = self.tasks.fold.continued_pause(message.task_id, owner, message.message_id)
        if continued != link.token_id:
            return None
        task = Task()
        task.ParseFromString(stored.task)
        return task

    async def admit(
        self, context: ServerCallContext, message: Message, task_id: str
    ) -> A2AContinuation | None:
        """Decide a message on an existing task before anything runs: ``None`` for a task not
        paused through the door; the claim when this message continues it; else a named
        JSON-RPC error (and nothing written on the task)."""
        owner = self.owner_resolver(context)
        link = await self.tasks.pause_of(task_id, owner)
        if link is None:
            return None
        stored = self.tasks.fold.owned(task_id, owner)
        if stored is None:
            raise TaskNotFoundError(message=f"Task {task_id} not found")
        if stored.state in TERMINAL:
            raise refusal(
                "already_continued",
                f"task {task_id} is finished ({stored.state}); read it with GetTask",
            )
        earlier = self.tasks.fold.continued_pause(task_id, owner, message.message_id)
        if earlier is not None and earlier != link.token_id:
            raise refusal(
                "message_reused",
                f"message {message.message_id} answered an earlier question of task {task_id}; "
                "a new answer is a new message",
            )
        text = get_message_text(message)
        response = self.response_of(link, text)
        if response is None:
            wanted = "'approve' or 'reject'" if link.tool else "an answer"
            raise refusal("awaiting_answer", f"task {task_id} waits for {wanted}")
        axes = {
            "scope_hash": owner_scope(owner),
            "session_id": Task.FromString(stored.task).context_id,
            "run_id": task_id,
            "call_id": link.call_id,
        }
        try:
            await self._answer(link, task_id, owner, response, answer_id(task_id, message), axes)
            claim = await self.tl.continue_turn(
                link.token, timeout=self.timeout, claimant=self.claimant
            )
        except TimeoutError:  # no outcome, no resumed turn or no claim decision in time
            raise refusal(
                "not_decided",
                f"no worker decided the answer to task {task_id} within {self.timeout:.0f}s "
                "(is a turnlog worker running?); send the same message again",
            ) from None
        except AlreadyContinued as taken:
            raise refusal("already_continued", taken.refusal.detail) from None
        except ContinuationRefused as refused:
            raise refusal(refused.refusal.reason, refused.refusal.detail) from None
        await self.tasks.note_continued(task_id, owner, link, message.message_id)
        consumed = json.loads(claim.turn.response_json)
        return A2AContinuation(claim, link, consumed)

    async def _answer(
        self,
        link: PauseLink,
        task_id: str,
        owner: str,
        response: Mapping[str, Any],
        answer_id: str,
        axes: Mapping[str, str],
    ) -> None:
        """The message as an answer through the seven steps; refused by name unless the worker
        took it -- or took it before (a retry: same answer id), or the pause was answered
        outside A2A (the inbox, the CLI), whose answer this message then continues with."""
        try:
            sent = await self.tl.answer(
                link.token, response, answer_id=answer_id, answered_by=owner or None, **axes
            )
        except Refused as refused:
            raise refusal(refused.refusal.reason, refused.refusal.detail) from None
        outcome = await self.tl.outcome(sent.answer_id, thread_id=task_id, timeout=self.timeout)
        if outcome.accepted:
            return
        if outcome.reason == "already_consumed":
            turn = await self.tl.peek_resumed_turn(
                task_id, token_id=link.token_id, timeout=self.timeout
            )
            if turn.answer_id == answer_id or not turn.answer_id.startswith("a2a-"):
                return
            raise refusal(
                "already_answered",
                f"task {task_id} was answered by another message; read it with GetTask",
            )
        detail = outcome.rejected.detail if outcome.rejected is not None else ""
        raise refusal(outcome.reason or "rejected", detail)


__all__ = ["A2ADoor", "continuation"]
