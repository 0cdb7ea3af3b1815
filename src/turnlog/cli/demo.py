"""``turnlog demo``: the whole promise, on a real Kafka, in well under a minute.

An agent turn pauses on ``ask_user`` with three reserved calls; its token is printed; a person's
answer is published; a resume worker that never saw the pause resumes it; the rehydrated
transcript is printed; the same answer sent again and a forged token are refused by name; and
the store is rebuilt from the log with the same digest. Every run uses its own topic prefix and a
throw-away state directory, so the demo can be run again and again on the same broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from turnlog.clock import utc_now
from turnlog.consumers.continuation import AlreadyContinued, claim_request, decide
from turnlog.consumers.resumed import ResumedTurns
from turnlog.consumers.worker import ResumeWorker
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import AnswerRejected, TokenConsumed, TurnResumed
from turnlog.contracts.interactions import default_interactions
from turnlog.contracts.refusals import Refused
from turnlog.errors import TurnlogError
from turnlog.kafka.outage import ride_out
from turnlog.kafka.reader import LogReader
from turnlog.kafka.topics import TopicSet, admin_client, ensure_topics
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.projections.projector import CheckpointProjector, rebuild
from turnlog.projections.store import Store
from turnlog.settings import Settings
from turnlog.tokens import Keyring, TokenIssuer, TokenVerifier, generate_ed25519
from turnlog.wire.codec import decode

log = logging.getLogger(__name__)


class DemoFailed(TurnlogError):
    """A step of the demo did not show what it should have."""


#: What the model asked the person: one question, two regions to choose from.
_ASKED = {
    "questions": [{"question": "Deploy to which region?", "options": ["eu-west-1", "us-east-1"]}]
}


def _checkpoint(thread_id: str) -> TurnCheckpoint:
    calls = [
        ReservedCall("call_region", "ask_user", _ASKED),
        ReservedCall("call_quota", "check_quota", {"service": "billing"}),
        ReservedCall("call_notify", "notify_team", {"channel": "#deploys"}),
    ]
    messages = captured_messages(
        [
            {"role": "system", "content": "You are a careful deployment assistant."},
            {"role": "user", "content": "Please deploy the billing service."},
        ],
        "Before I deploy I need the target region.",
        calls,
    )
    return TurnCheckpoint(
        run_id="run-42",
        session_id="session-7",
        thread_id=thread_id,
        checkpoint_id="cp-1",
        scope_hash="tenant-acme",
        tool_call_id="call_region",
        interrupt_id="interrupt-1",
        name="ask_user",
        prompt="Continue the deployment with the person's answer.",
        messages=messages,
        sequence=1,
        tenant_id="acme",
        created_at=utc_now(),
        package_version="demo",
    )


async def _wait_for(reader: Any, want: int, timeout: float = 30.0) -> list[Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    found: list[Any] = []
    while len(found) < want:
        if loop.time() > deadline:
            raise DemoFailed(f"waited {timeout:.0f}s for {want} record(s), saw {len(found)}")
        found.extend(await reader.poll(timeout_ms=200))
    return found


async def run_demo(base: Settings, console: Console) -> None:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    scratch = Path(tempfile.mkdtemp(prefix="turnlog-demo-"))
    settings = base.with_(
        topic_prefix=f"turnlog.cli.demo.{tag}.",
        application_id=f"turnlog-demo-{tag}",
        state_dir=scratch,
        partitions=3,
        commit_interval_ms=50,
    )
    topics = TopicSet.from_settings(settings)
    step = _Steps(console)
    try:
        step("Topics", f"creating the topic set with prefix [bold]{settings.topic_prefix}[/bold]")

        async def create() -> list[str]:
            admin = admin_client(settings)
            try:
                await admin.start()
                return await ensure_topics(admin, topics)
            finally:
                await admin.close()

        # An absent broker is waited for (broker_timeout_seconds), then BrokerUnavailable.
        created = await ride_out(create, settings=settings, who="demo")
        console.print("  " + ", ".join(created))

        private_pem, _ = generate_ed25519("demo-key")
        keyring = Keyring.ed25519("demo-key", private_pem)
        issuer = TokenIssuer(keyring, issuer=settings.issuer, audience=settings.audience)
        verifier = TokenVerifier(keyring, issuer=settings.issuer, audience=settings.audience)

        step("Pause", "an agent turn stops before dispatching ask_user (3 calls reserved)")
        checkpoint = _checkpoint(f"thread-{tag}")
        async with PauseRecorder(settings, issuer, create_topics=False) as recorder:
            pause = await recorder.record(checkpoint, request_json=json.dumps(_ASKED))
        console.print(
            f"  PauseRecorded committed at {topics.pauses}[{pause.partition}]@{pause.offset}"
        )
        console.print(f"  token ({len(pause.token)} chars): [cyan]{pause.token[:48]}…[/cyan]")

        worker_store = Store.open(scratch / "worker")
        worker = ResumeWorker(
            settings, store=worker_store, verifier=verifier, interactions=default_interactions()
        )
        worker_task = asyncio.create_task(worker.run())
        rejections = LogReader(settings.connection, client_id="demo-rejections")
        await rejections.start()
        parts = await rejections.partitions_of(topics.rejections)
        from aiokafka import TopicPartition

        await rejections.assign({TopicPartition(topics.rejections, p): None for p in parts})
        try:
            step("Answer", "a person answers from another process: [bold]eu-west-1[/bold]")
            axes = {
                "scope_hash": checkpoint.scope_hash,
                "session_id": checkpoint.session_id,
                "run_id": checkpoint.run_id,
                "call_id": checkpoint.tool_call_id,
            }
            response = {"answers": [{"selections": ["eu-west-1"], "other": None}]}
            async with AnswerPublisher(settings, verifier) as publisher:
                sent = await publisher.publish(pause.token, response, **axes)
                console.print(f"  AnswerSubmitted {sent.answer_id} → partition {sent.partition}")

                step("Resume", "the worker owns the partition, checks the 7 steps, commits once")
                async with ResumedTurns(
                    settings, group_id=f"{settings.application_id}-agent"
                ) as turns:
                    turn = await asyncio.wait_for(anext(aiter(turns)), timeout=30)
                if not isinstance(turn, TurnResumed):
                    raise DemoFailed(f"expected a TurnResumed, got {type(turn).__name__}")
                _print_transcript(console, turn)

                step("Continue", "two agent replicas continue the turn at once → one runs it")
                claims = [
                    claim_request(turn.thread_id, turn.token_id, action="claim", claimant=who)
                    for who in ("agent-replica-a", "agent-replica-b")
                ]
                decided = await asyncio.gather(
                    *(decide(settings, topics, publisher, c, timeout=30) for c in claims),
                    return_exceptions=True,
                )
                won = [d for d in decided if isinstance(d, TokenConsumed)]
                lost = [d for d in decided if isinstance(d, AlreadyContinued)]
                if len(won) != 1 or len(lost) != 1:
                    raise DemoFailed(f"expected one claim granted and one refused: {decided}")
                console.print(f"  granted to [bold]{won[0].claimant}[/bold]: it runs the next step")
                console.print(f"  the other is told: [red]{lost[0].refusal.reason.value}[/red] —")
                console.print(f"  {lost[0].refusal.detail}", markup=False, highlight=False)
                await _wait_for(rejections, 1)  # that refusal, read past before the next step's

                step("Retry", "the publisher retries with the same answer id → nothing new")
                await publisher.publish(pause.token, response, **axes, answer_id=sent.answer_id)
                step("Again", "a second, different submission for the spent token")
                await publisher.publish(pause.token, response, **axes)
                refused = await _wait_for(rejections, 1)
                _print_rejection(console, refused[-1].value)

                step("Forgery", "a token signed by a key this deployment never issued")
                forged_ring = Keyring.ed25519("demo-key", generate_ed25519("demo-key")[0])
                forged_issuer = TokenIssuer(
                    forged_ring, issuer=settings.issuer, audience=settings.audience
                )
                from turnlog.tokens import PauseClaims

                forged = forged_issuer.issue(PauseClaims.for_pause(pause.pause))
                try:
                    await publisher.publish(forged, response, **axes)
                    raise DemoFailed("the publisher accepted a forged token")
                except Refused as exc:
                    console.print(
                        f"  publisher refused before Kafka: [red]{exc.reason.value}[/red]"
                    )
                candidate = publisher.build(forged, response, **axes)
                await publisher.publish_unchecked(candidate)
                refused = await _wait_for(rejections, 1)
                console.print("  sent anyway, straight to the topic; the worker says:")
                _print_rejection(console, refused[-1].value)
        finally:
            await rejections.stop()
            worker.request_stop()
            await worker_task
        stats = worker.stats
        if stats.resumed != 1 or stats.duplicates != 1 or stats.rejected != 3:
            raise DemoFailed(f"unexpected worker counts: {stats}")
        console.print(
            f"  worker totals: resumed {stats.resumed}, duplicates ignored {stats.duplicates}, "
            f"rejected {stats.rejected} (one of them the second claim)"
        )

        step("Rebuild", "drop the store, replay the compacted topics, compare digests")
        async with CheckpointProjector(settings.connection, worker_store, topics) as proj:
            await proj.catch_up()
        live = worker_store.digest()
        worker_store.close()
        rebuilt = await rebuild(settings.connection, scratch / "rebuilt", topics)
        same = "[green]equal[/green]" if live == rebuilt else "[red]DIFFERENT[/red]"
        console.print(f"  live    {live}\n  rebuilt {rebuilt}  → {same}")
        if live != rebuilt:
            raise DemoFailed("the rebuilt store differs from the live one")
        console.print(
            Panel.fit(
                f"paused → answered → resumed exactly once, refusals named, rebuilt from the log "
                f"in {time.monotonic() - started:.1f}s",
                style="green",
            )
        )
    finally:
        await _delete_topics(settings, topics)
        shutil.rmtree(scratch, ignore_errors=True)


class _Steps:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.n = 0

    def __call__(self, title: str, text: str) -> None:
        self.n += 1
        self.console.print(f"\n[bold]{self.n}. {title}[/bold] — {text}")


def _print_transcript(console: Console, turn: TurnResumed) -> None:
    table = Table("role", "call", "content", title="rehydrated history handed to the next worker")
    for message in turn.history:
        calls = ", ".join(c["id"] for c in message.get("tool_calls") or ())
        content = message["content"]
        if calls:
            content = f"{content}  [dim](calls: {calls})[/dim]"
        table.add_row(message["role"], message.get("tool_call_id") or "", content)
    console.print(table)
    if turn.answered is not None:
        console.print(
            "  answered event first on the typed surface: "
            f"labels={list(turn.answered.selected_labels)}"
        )


def _print_rejection(console: Console, raw: bytes | None) -> None:
    event = decode(raw or b"", AnswerRejected)
    console.print(
        f"  AnswerRejected: [red]{event.reason}[/red] (step {event.step}) — {event.detail}"
    )


async def _delete_topics(settings: Settings, topics: TopicSet) -> None:
    admin = admin_client(settings)
    try:
        await admin.start()
        await admin.delete_topics([s.name for s in topics.specs()])
    except Exception as exc:  # noqa: BLE001 - cleanup of a demo must not hide its result
        log.warning("could not delete the demo topics: %s", exc)
    finally:
        await admin.close()
