"""``turnlog inbox --demo``: a local inbox with a few paused turns, for a newcomer to click through.

On the local broker, under a topic prefix of its own: three turns pause for the demo viewer's
tenant (an ``ask_user`` with choices, one asking for free text, and a tool call awaiting
approval, with a long argument shown whole) and one for another tenant, which the demo viewer never
sees. A projector, a resume worker and a stand-in agent run in this process, so an answer given
in the browser really resumes its turn -- the terminal prints each resumed turn's new tool
message. The page is served until the stop event; then everything the demo made is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from turnlog.api import Turnlog
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import TurnResumed
from turnlog.contracts.interactions import ASK_USER
from turnlog.inbox.app import create_app
from turnlog.inbox.auth import ViewerTokens
from turnlog.inbox.server import InboxServer
from turnlog.inbox.service import InboxService
from turnlog.kafka.outage import ride_out
from turnlog.kafka.topics import TopicSet, admin_client, ensure_topics
from turnlog.projections.projector import CheckpointProjector
from turnlog.projections.store import Store
from turnlog.settings import Settings
from turnlog.tokens import Keyring, generate_ed25519

log = logging.getLogger(__name__)

#: The demo viewer's tenant, and the one it must not see.
DEMO_SCOPE, OTHER_SCOPE = "tenant-acme", "tenant-globex"

REFUND = {
    "order": "A-1042",
    "amount_eur": 120.0,
    "note": (
        "Customer reports the parcel arrived damaged; photos attached to the ticket. "
        "Refund the full amount and waive the return shipping, as the courier confirmed "
        "the damage happened in transit."
    ),
}


@dataclass(frozen=True, slots=True)
class DemoTurn:
    """One turn to pause: its checkpoint, what it asks, and the interaction."""

    checkpoint: TurnCheckpoint
    request: Any
    interaction: str


def _turn(
    thread: str, scope: str, said: str, call: ReservedCall, interaction: str, user: str
) -> TurnCheckpoint:
    return TurnCheckpoint(
        run_id=f"run-{thread}",
        session_id=f"session-{thread}",
        thread_id=thread,
        checkpoint_id="cp-1",
        scope_hash=scope,
        tool_call_id=call.id,
        interrupt_id=f"int-{thread}",
        name=interaction,
        prompt="Continue with the person's answer.",
        messages=captured_messages(
            [
                {"role": "system", "content": "You are a careful operations assistant."},
                {"role": "user", "content": user},
            ],
            said,
            [call],
        ),
        sequence=1,
        tenant_id=scope,
        created_at=utc_now(),
        package_version="inbox-demo",
    )


def demo_turns(tag: str) -> list[DemoTurn]:
    """The demo's paused turns, thread ids suffixed with ``tag``."""
    region = {
        "questions": [
            {
                "question": "Deploy the billing service to which region?",
                "header": "Region",
                "options": [
                    {"label": "eu-west-1", "description": "Ireland, where the data lives"},
                    {"label": "us-east-1", "description": "Virginia"},
                ],
            }
        ]
    }
    wording = {"questions": [{"question": "What should I tell the customer about the delay?"}]}
    report = {"questions": [{"question": "Send the quarterly report now?", "options": ["yes"]}]}
    return [
        DemoTurn(
            _turn(
                f"deploy-billing-{tag}", DEMO_SCOPE, "I need the target region first.",
                ReservedCall("call-region", ASK_USER, region), ASK_USER,
                "Please deploy the billing service.",
            ),
            region,
            ASK_USER,
        ),
        DemoTurn(
            _turn(
                f"support-4711-{tag}", DEMO_SCOPE, "How should I word the reply?",
                ReservedCall("call-wording", ASK_USER, wording), ASK_USER,
                "Answer ticket 4711: the order is late.",
            ),
            wording,
            ASK_USER,
        ),
        DemoTurn(
            _turn(
                f"refund-a1042-{tag}", DEMO_SCOPE, "I will refund order A-1042.",
                ReservedCall("call-refund", "issue_refund", REFUND), APPROVE_TOOL_CALL,
                "The customer of order A-1042 wants a refund.",
            ),
            approval_request("issue_refund", REFUND),
            APPROVE_TOOL_CALL,
        ),
        DemoTurn(
            _turn(
                f"globex-report-{tag}", OTHER_SCOPE, "Ready to send.",
                ReservedCall("call-report", ASK_USER, report), ASK_USER,
                "Prepare the quarterly report.",
            ),
            report,
            ASK_USER,
        ),
    ]  # fmt: skip


async def run_inbox_demo(
    base: Settings,
    say: Callable[[str], None],
    stop: asyncio.Event,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
) -> None:
    """Set the demo up, serve it until ``stop`` is set, then delete what it made."""
    tag = uuid.uuid4().hex[:6]
    scratch = Path(tempfile.mkdtemp(prefix="turnlog-inbox-demo-"))
    settings = base.with_(
        topic_prefix=f"turnlog.inbox-demo.{tag}.",
        application_id=f"turnlog-inbox-demo-{tag}",
        state_dir=scratch,
        partitions=3,
        commit_interval_ms=50,
    )
    topics = TopicSet.from_settings(settings)
    keyring = Keyring.ed25519("demo-key", generate_ed25519("demo-key")[0])
    viewers = ViewerTokens(Keyring.ed25519("demo-viewer", generate_ed25519("demo-viewer")[0]))
    tasks: list[asyncio.Task[Any]] = []
    store: Store | None = None
    projector: CheckpointProjector | None = None
    try:
        await ride_out(
            lambda: _create_topics(settings, topics), settings=settings, who="inbox demo"
        )
        async with Turnlog(settings, keyring=keyring) as tl:
            for turn in demo_turns(tag):
                await tl.pause(
                    turn.checkpoint,
                    request=turn.request,
                    interaction=turn.interaction,
                    ttl=timedelta(hours=8),
                )
            say(f"paused 4 turns under the topic prefix {settings.topic_prefix}")
            store = Store.open(scratch / "projection")
            projector = CheckpointProjector(settings.connection, store, topics)
            await projector.start()
            await projector.catch_up()
            tasks.append(asyncio.create_task(projector.follow()))
            # The demo's topics are scratch, deleted at Ctrl-C: the worker's warning about a
            # single-replica cluster is for a deployment, and would only interleave with the
            # page's lines here.
            logging.getLogger("turnlog.kafka.topics").setLevel(logging.ERROR)
            tasks.append(asyncio.create_task(tl.run_worker()))
            tasks.append(asyncio.create_task(_agent(tl, say)))
            async with InboxService(tl, scratch / "projection") as service:
                server = InboxServer(create_app(service, viewers), host, port)
                await server.start()
                token = viewers.mint(
                    "newcomer", [DEMO_SCOPE], ttl=timedelta(hours=8), now=utc_now()
                )
                say(f"the inbox is at {server.url}/  (Ctrl-C stops the demo)")
                say(f"log in with this link: {server.url}/login#token={token}")
                say(f"(the viewer answers for {DEMO_SCOPE}; the {OTHER_SCOPE} pause stays hidden)")
                try:
                    await stop.wait()
                finally:
                    service.closing.set()
                    await server.stop()
    finally:
        if projector is not None:
            projector.request_stop()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if projector is not None:
            await projector.stop()
        if store is not None:
            store.close()
        await _delete_topics(settings, topics)
        shutil.rmtree(scratch, ignore_errors=True)


async def _agent(tl: Turnlog, say: Callable[[str], None]) -> None:
    """The continuing side: prints what each resumed turn now holds for the model."""
    async with tl.resumed() as turns:
        async for turn in turns:
            if not isinstance(turn, TurnResumed):
                continue
            said = next(
                (m["content"] for m in turn.history if m.get("tool_call_id") == turn.tool_call_id),
                "(the approved call runs now)",
            )
            say(f"resumed {turn.thread_id}: {said.splitlines()[-1]}")


async def _create_topics(settings: Settings, topics: TopicSet) -> list[str]:
    admin = admin_client(settings)
    try:
        await admin.start()
        return await ensure_topics(admin, topics)
    finally:
        await admin.close()


async def _delete_topics(settings: Settings, topics: TopicSet) -> None:
    admin = admin_client(settings)
    try:
        await admin.start()
        await admin.delete_topics([s.name for s in topics.specs()])
    except Exception as exc:  # noqa: BLE001 - cleaning up must not hide how the demo ended
        log.warning("could not delete the inbox demo's topics: %s", exc)
    finally:
        await admin.close()
