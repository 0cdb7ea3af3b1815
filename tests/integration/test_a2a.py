"""turnlog's A2A door on the real broker, through a2a-sdk's own client and server objects.

Two replicas -- two request handlers, each with its own Turnlog, task log and clients -- share
one deployment's topics and nothing else. A task created through one is read and continued
through the other; the continuing message sent to both at once runs the agent's side effect
once and the other replica's client gets a named refusal; the paused task is a turnlog pause
(``turnlog pending`` lists it); another owner's message and a forged pause link are refused.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

import pytest
from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import ConcurrentTaskModificationError, TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import A2AError

from tests.conftest import Names
from tests.integration.a2a_support import Replica, message, replica, send, text_of
from tests.integration.cli_support import Cli
from tests.integration.test_api import api_settings
from turnlog import reject
from turnlog.a2a import A2ADoor, KafkaTaskEventStream, KafkaTaskStore, TaskLog, continuation
from turnlog.clock import utc_now
from turnlog.contracts.interactions import ASK_USER
from turnlog.tokens import Keyring, TokenIssuer, generate_ed25519

pytestmark = pytest.mark.timeout(180)


async def _outcome(one: Replica, request: object) -> StreamResponse | A2AError:
    async with one.client() as client:
        try:
            return await send(client, request)  # type: ignore[arg-type]
        except A2AError as refused:
            return refused


async def _paused_task(a: Replica) -> tuple[str, str]:
    async with a.client() as client:
        created = await send(client, message("deploy billing to eu"))
    task = created.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    assert "Deploy billing to eu?" in text_of(task.status.message)
    return task.id, task.context_id


async def test_a_continuation_sent_to_two_replicas_runs_once_and_both_replicas_agree(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    ran: list[str] = []
    gate = asyncio.Event()
    async with (
        replica(settings, ran, "replica-a", gate) as a,
        replica(settings, ran, "replica-b", gate) as b,
    ):
        worker = asyncio.create_task(a.tl.run_worker())
        task_id, context_id = await _paused_task(a)

        # The pause is turnlog's: the CLI lists it, the thread is the task.
        env = {
            **os.environ,
            "TURNLOG_BOOTSTRAP_SERVERS": bootstrap,
            "TURNLOG_TOPIC_PREFIX": names.prefix,
            "TURNLOG_APPLICATION_ID": names.app,
            "TURNLOG_STATE_DIR": str(tmp_path / "cli-state"),
            "TURNLOG_KEYS_DIR": str(tmp_path / "keys"),
            "TURNLOG_PARTITIONS": "2",
        }
        pending = await asyncio.to_thread(Cli(env).json, "pending")
        assert isinstance(pending, dict)
        assert [p["thread_id"] for p in pending["pending"]] == [task_id], pending

        # The other replica reads the task the first one created.
        async with b.client() as client:
            seen = await client.get_task(GetTaskRequest(id=task_id))
        assert seen.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

        # One continuing message (one message id: a client's retry), to both replicas at once.
        # The deploy that starts is held open: the other replica must refuse meanwhile, not
        # start a second one.
        approve = message("approve", task_id=task_id, context_id=context_id, message_id="m-1")
        sends = {asyncio.create_task(_outcome(one, approve)) for one in (a, b)}
        first, rest = await asyncio.wait(sends, timeout=45, return_when=asyncio.FIRST_COMPLETED)
        assert len(first) == 1, f"no replica refused while a deploy ran: {ran}"
        lost = first.pop().result()
        assert isinstance(lost, A2AError) and "already_continued" in str(lost), lost
        assert len(ran) <= 1, ran
        gate.set()
        won = await rest.pop()
        assert isinstance(won, StreamResponse), won
        assert won.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert ran == ["deployed billing to eu"]

        # The same message again, after the end, through either replica: the finished task,
        # as the first send got it; nothing runs. Another message is refused by name.
        for one in (a, b):
            again = await _outcome(one, approve)
            assert isinstance(again, StreamResponse), again
            assert again.task.status.state == TaskState.TASK_STATE_COMPLETED
        late = await _outcome(b, message("approve", task_id=task_id, context_id=context_id))
        assert isinstance(late, A2AError) and str(late).startswith("already_continued:"), late
        assert ran == ["deployed billing to eu"]

        # GetTask through either replica agrees: completed, the artifact holds the deploy.
        for one in (a, b):
            async with one.client() as client:
                final = await client.get_task(GetTaskRequest(id=task_id))
            assert final.status.state == TaskState.TASK_STATE_COMPLETED
            assert [p.text for p in final.artifacts[0].parts] == ["deployed billing to eu"]
        assert not worker.done()


async def test_two_decisions_at_once_give_one_and_a_named_refusal(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    ran: list[str] = []
    async with replica(settings, ran, "replica-a") as a, replica(settings, ran, "replica-b") as b:
        worker = asyncio.create_task(a.tl.run_worker())
        task_id, context_id = await _paused_task(a)
        # A message that answers nothing keeps the task waiting and says what it needs.
        vague = await _outcome(b, message("maybe", task_id=task_id, context_id=context_id))
        assert isinstance(vague, A2AError) and "awaiting_answer" in str(vague)

        approve = message("approve", task_id=task_id, context_id=context_id)
        reject = message("reject, not today", task_id=task_id, context_id=context_id)
        outcomes = await asyncio.gather(_outcome(a, approve), _outcome(b, reject))
        won = [o for o in outcomes if isinstance(o, StreamResponse)]
        lost = [o for o in outcomes if isinstance(o, A2AError)]
        assert len(won) == 1 and len(lost) == 1, outcomes
        reason = str(lost[0])
        assert "already_answered" in reason or "already_continued" in reason, reason
        final = won[0].task.status.state
        assert final in (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_REJECTED)
        assert ran == (
            ["deployed billing to eu"] if final == TaskState.TASK_STATE_COMPLETED else []
        )
        assert not worker.done()


async def test_another_owners_message_and_a_forged_pause_are_refused_by_name(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    ran: list[str] = []
    async with replica(settings, ran, "replica-a") as a:
        worker = asyncio.create_task(a.tl.run_worker())
        task_id, context_id = await _paused_task(a)
        approve = message("approve", task_id=task_id, context_id=context_id)

        # Another owner: the task is not theirs, so it is not found (A2A's own refusal).
        async with a.client(user="mallory") as client:
            with pytest.raises(A2AError, match="not found"):
                await send(client, approve)
        # A context id that is not the task's: a2a-sdk refuses it before anything runs.
        forged_context = message("approve", task_id=task_id, context_id="ctx-forged")
        refused = await _outcome(a, forged_context)
        assert isinstance(refused, A2AError) and "does not match" in str(refused)

        # A pause link forged on the tasks topic (the pause's claims, signed by a key this
        # deployment does not hold): the answer is refused at step 1, by its reason's name.
        link = await a.door.tasks.pause_of(task_id, "alice")
        assert link is not None
        claims = a.tl.verifier.verify(link.token, utc_now())
        private, _ = generate_ed25519("intruder")
        intruder = TokenIssuer(Keyring.ed25519("intruder", private), issuer=settings.issuer,
                               audience=settings.audience)  # fmt: skip
        forged_link = replace(link, token=intruder.issue(claims))
        await a.door.tasks.link_pause(task_id, "alice", forged_link)
        forged = await _outcome(a, approve)
        assert isinstance(forged, A2AError), forged
        assert str(forged).startswith("token_unknown_key:"), str(forged)
        assert ran == []
        # Still waiting: the real link back, the real answer continues it once.
        await a.door.tasks.link_pause(task_id, "alice", link)
        done = await _outcome(a, message("approve", task_id=task_id, context_id=context_id))
        assert isinstance(done, StreamResponse), done
        assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert ran == ["deployed billing to eu"]
        assert not worker.done()


async def test_the_task_store_compares_and_swaps_by_log_order_across_replicas(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    context = ServerCallContext()
    async with TaskLog(settings) as one, TaskLog(settings) as two:
        a, b = KafkaTaskStore(one), KafkaTaskStore(two)
        task = new_task("t-1", "c-1", TaskState.TASK_STATE_SUBMITTED)
        first = await a.save(task, event=task, prev_version=TaskVersion.MISSING, context=context)
        with pytest.raises(ConcurrentTaskModificationError):  # a second first write
            await b.save(task, event=task, prev_version=TaskVersion.MISSING, context=context)
        seen = await b.get("t-1", context)
        assert seen is not None and seen.version == first

        # Both replicas derive a save from the same version, at once: one counts.
        def status(state: TaskState) -> TaskStatusUpdateEvent:
            return TaskStatusUpdateEvent(task_id="t-1", context_id="c-1",
                                         status=TaskStatus(state=state))  # fmt: skip

        async def save(store: KafkaTaskStore, state: TaskState) -> TaskVersion | Exception:
            event = status(state)
            changed = Task()
            changed.CopyFrom(task)
            changed.status.CopyFrom(event.status)
            try:
                return await store.save(changed, event=event, prev_version=first, context=context)
            except ConcurrentTaskModificationError as lost:
                return lost

        results = await asyncio.gather(
            save(a, TaskState.TASK_STATE_WORKING), save(b, TaskState.TASK_STATE_REJECTED)
        )
        won = [r for r in results if isinstance(r, TaskVersion)]
        assert len(won) == 1 and sum(isinstance(r, Exception) for r in results) == 1, results
        assert won[0].is_after(first)
        read = [await s.get("t-1", context) for s in (a, b)]
        assert [r.version for r in read if r] == [won[0], won[0]]
        assert read[0] is not None and read[0].task == read[1].task  # type: ignore[union-attr]

        # The other replica's event stream yields the counted events in version order; a
        # replica started now restores the same task from the log.
        stream = KafkaTaskEventStream(two)
        events = stream.subscribe("t-1", after=TaskVersion.MISSING)
        got = [await anext(events), await anext(events)]
        await events.aclose()
        assert [e.version for e in got] == [first, won[0]]
        assert isinstance(got[1].event, TaskStatusUpdateEvent)
        assert got[1].event.status.state == read[0].task.status.state
    async with TaskLog(settings) as later:
        again = await KafkaTaskStore(later).get("t-1", context)
        assert again is not None and again.version == won[0]
        assert (await KafkaTaskStore(later).get("t-1", ServerCallContext(
            user=_Named("mallory")))) is None  # fmt: skip


class _Named(User):
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.name


async def test_a_pause_answered_outside_a2a_is_continued_with_that_answer_by_the_next_message(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    ran: list[str] = []
    async with replica(settings, ran, "replica-a") as a:
        worker = asyncio.create_task(a.tl.run_worker())
        task_id, context_id = await _paused_task(a)
        # Someone rejects it in the inbox (any answering side: the pause's token and axes).
        link = await a.door.tasks.pause_of(task_id, "alice")
        assert link is not None
        pause = a.tl.verifier.verify(link.token, utc_now())
        arguments = {"service": "billing", "region": "eu"}
        sent = await a.tl.answer(
            link.token, reject("deploy", arguments, "not today"), scope_hash=pause.scope_hash,
            session_id=pause.session_id, run_id=pause.run_id, call_id=pause.tool_call_id,
        )  # fmt: skip
        assert (await a.tl.outcome(sent.answer_id, timeout=45)).accepted
        # The client, unaware, approves: the task continues once, with the recorded decision.
        late = await _outcome(a, message("approve", task_id=task_id, context_id=context_id))
        assert isinstance(late, StreamResponse), late
        assert late.task.status.state == TaskState.TASK_STATE_REJECTED
        assert ran == []
        assert not worker.done()


class _TwoQuestions(AgentExecutor):
    """Asks twice on one task (region, then approval), then completes with both answers."""

    def __init__(self, door: A2ADoor) -> None:
        self.door = door

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        held = continuation(context)
        if held is None:
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
            )
            await self.door.ask(context, event_queue, "Which region?")
        elif held.link.interaction == ASK_USER:
            await self.door.ask(context, event_queue, f"Deploy to {held.answer_text}?",
                                tool="deploy", arguments={"region": held.answer_text})  # fmt: skip
        else:
            updater = TaskUpdater(event_queue, task_id, context_id)
            said = f"{held.response['decision']}d {held.arguments['region']}"
            await updater.complete(updater.new_agent_message([new_text_part(said)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


async def test_a_message_that_answered_one_question_never_answers_the_next(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    async with replica(settings, [], "replica-a", agent=_TwoQuestions) as a:
        worker = asyncio.create_task(a.tl.run_worker())
        async with a.client() as client:
            first = (await send(client, message("deploy billing"))).task
            assert text_of(first.status.message) == "Which region?"
            ids = {"task_id": first.id, "context_id": first.context_id}
            region = message("eu-west", message_id="m-region", **ids)
            second = (await send(client, region)).task
            assert second.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert text_of(second.status.message) == "Deploy to eu-west?"
            # The first answer sent again (a late retry): it is no answer to the new question.
            with pytest.raises(A2AError, match=r"^message_reused: message m-region answered"):
                await send(client, message("approve", message_id="m-region", **ids))
            done = (await send(client, message("approve", message_id="m-go", **ids))).task
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert text_of(done.status.message) == "approved eu-west"
            again = (await send(client, message("approve", message_id="m-go", **ids))).task
            assert again.status.state == TaskState.TASK_STATE_COMPLETED
        assert not worker.done()


async def test_a_continuation_no_worker_decides_is_refused_by_name_and_runs_nothing(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    ran: list[str] = []
    async with replica(settings, ran, "replica-a", timeout=3) as a:
        task_id, context_id = await _paused_task(a)  # pausing needs no worker
        approve = message("approve", task_id=task_id, context_id=context_id, message_id="m-1")
        waiting = await _outcome(a, approve)
        assert isinstance(waiting, A2AError), waiting
        assert str(waiting).startswith("not_decided: no worker decided"), str(waiting)
        async with a.client() as client:
            still = await client.get_task(GetTaskRequest(id=task_id))
        assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert ran == []
