"""What the secured-broker tests share: the operator's steps before any role connects (topics
made as admin, each role's ACLs granted and seen applied) and one pause, answer and resumed turn
run with each role as its own least-privilege principal -- whatever the mechanism (SCRAM, mutual
TLS, OAUTHBEARER) the roles' settings use."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from tests.brokers import SecureBroker
from tests.deployment import ANSWER, REQUEST, Deployment, axes, sample_checkpoint
from tests.integration.worker_support import running_worker
from tests.kafka_helpers import eventually
from turnlog import Turnlog
from turnlog.consumers.resumed import ResumedTurns
from turnlog.contracts.events import TurnResumed
from turnlog.kafka import clients
from turnlog.kafka.acls import role_acls
from turnlog.kafka.reader import LogReader
from turnlog.kafka.security import KafkaSecurity
from turnlog.kafka.topics import TopicSet, admin_client, ensure_topics
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.settings import Settings

#: The roles every flow below runs as, and the group the reader's ACLs name.
FLOW_ROLES = ("publisher", "agent", "worker", "reader")


def reader_group(base: Settings) -> str:
    return f"{base.application_id}.resumed"


async def prepare_cluster(
    broker: SecureBroker,
    base: Settings,
    admin: KafkaSecurity,
    *,
    admin_bootstrap: str | None = None,
    extra_roles: tuple[str, ...] = (),
) -> None:
    """As the operator: the topics made by ``admin`` (no role may create one), the ACLs of
    ``FLOW_ROLES`` (and ``extra_roles``) that ``turnlog acls`` prints granted, and waited for
    until the authorizer applies them (they reach it through the metadata log)."""
    topics = TopicSet.from_settings(base)
    client = admin_client(
        base.with_(kafka=admin, bootstrap_servers=admin_bootstrap or base.bootstrap_servers)
    )
    await client.start()
    try:
        await ensure_topics(client, topics)
    finally:
        await client.close()
    names = {role: role for role in (*FLOW_ROLES, *extra_roles)}
    roles = role_acls(topics, base.application_id, reader_group=reader_group(base), **names)
    await broker.grant(a.line() for entries in roles.values() for a in entries)


async def until_acls_apply(reader: Settings) -> None:
    """Poll, with a deadline, until ``reader``'s principal may describe the resumed topic."""
    topic = TopicSet.from_settings(reader).resumed

    async def applied() -> bool:
        log = LogReader(reader.connection)
        await log.start()
        try:
            await log.partitions_of(topic, timeout=5)
            return True
        except TopicAuthorizationFailedError:
            return False
        finally:
            await log.stop()

    await eventually(applied, timeout=30)


async def run_flow(
    dep: Deployment, as_: Callable[[str], Settings], thread: str, workdir: Path
) -> TurnResumed:
    """Pause as the agent, answer as the publisher, resume as the worker and read the turn as
    the reader -- each through its own principal -- and return the resumed turn."""
    cp = sample_checkpoint(thread)
    async with PauseRecorder(as_("agent"), dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST)
    async with (
        running_worker(dataclasses.replace(dep, settings=as_("worker")), workdir),
        AnswerPublisher(as_("publisher"), dep.verifier) as publisher,
        ResumedTurns(as_("reader"), group_id=reader_group(dep.settings)) as turns,
    ):
        await publisher.publish(pause.token, ANSWER, **axes(cp), answer_id=f"{thread}-1")
        event = await asyncio.wait_for(anext(aiter(turns)), 60)
        assert isinstance(event, TurnResumed)
        # The reader continues it under a claim: its principal writes the claim to answers
        # and reads its decision from consumptions and rejections, nothing more.
        async with (
            Turnlog(as_("reader"), keyring=dep.keyring) as tl,
            tl.continue_turn(event, timeout=60) as claimed,
        ):
            assert claimed.turn.token_id == event.token_id
    assert isinstance(event, TurnResumed)
    assert (event.thread_id, event.answer_id) == (thread, f"{thread}-1")
    return event


async def cannot_forge_a_resumed_turn(publisher: Settings) -> None:
    """The publisher's principal writes answers only: a record on the resumed topic is refused."""
    producer = clients.producer(publisher, client_id="not-a-worker")
    await producer.start()
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(TopicSet.from_settings(publisher).resumed, b"x", key=b"t")
    finally:
        await producer.stop()
