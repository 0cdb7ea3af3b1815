"""An a2a-sdk agent on turnlog's A2A door for the tests: a replica is one door, one request
handler and one in-process ASGI app, with clients of its own; two replicas over one deployment
share nothing but Kafka, as two processes would."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.helpers.proto_helpers import new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from starlette.applications import Starlette

from turnlog import Turnlog
from turnlog.a2a import A2ADoor, TaskLog, continuation
from turnlog.settings import Settings

CARD = AgentCard(
    name="deployer",
    description="Deploys a service once a person approves",
    version="1.0",
    supported_interfaces=[
        AgentInterface(url="http://agent/", protocol_binding="JSONRPC", protocol_version="1.0")
    ],
    capabilities=AgentCapabilities(streaming=False),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain"],
    skills=[
        AgentSkill(
            id="deploy", name="deploy", description="deploy SERVICE to REGION", tags=["deploy"]
        )
    ],
)


def owner_of(context: ServerCallContext) -> str:
    """The test's stand-in for authentication: the ``x-user`` header names the owner."""
    headers = context.state.get("headers") or {}
    return str(headers.get("x-user", ""))


class DeployAgent(AgentExecutor):
    """``deploy SERVICE to REGION`` asks for approval; ``approve`` deploys (appends to
    ``ran``, the side effect the tests count), ``reject`` ends the task rejected. A deploy
    waits for ``gate`` (when given) after saying it started in ``ran``: a test holds it open
    to see what the other replica does meanwhile."""

    def __init__(self, door: A2ADoor, ran: list[str], gate: asyncio.Event | None) -> None:
        self.door = door
        self.ran = ran
        self.gate = gate

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        held = continuation(context)
        if held is None:
            asked = re.fullmatch(r"deploy (\S+) to (\S+)", context.get_user_input().strip())
            if context.current_task is None:
                history = [context.message] if context.message is not None else []
                await event_queue.enqueue_event(
                    new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
                )
            if asked is None:
                await updater.reject(
                    updater.new_agent_message([new_text_part("say: deploy S to R")])
                )
                return
            service, region = asked.groups()
            await self.door.ask(
                context,
                event_queue,
                f"Deploy {service} to {region}? Reply approve or reject.",
                tool="deploy",
                arguments={"service": service, "region": region},
            )
            return
        if not held.approved:
            await updater.reject(updater.new_agent_message([new_text_part("rejected")]))
            return
        arguments = json.loads(held.link.arguments_json)
        line = f"deployed {arguments['service']} to {arguments['region']}"
        self.ran.append(line)
        if self.gate is not None:
            await self.gate.wait()
        await updater.add_artifact([new_text_part(line)], name="deploy")
        await updater.complete(updater.new_agent_message([new_text_part(line)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


@dataclass
class Replica:
    tl: Turnlog
    door: A2ADoor
    app: Starlette

    @asynccontextmanager
    async def client(self, user: str = "alice") -> AsyncIterator[Client]:
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://agent", headers={"x-user": user}, timeout=60
        ) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(CARD)
            try:
                yield client
            finally:
                await client.close()


@asynccontextmanager
async def replica(
    settings: Settings, ran: list[str], name: str, gate: asyncio.Event | None = None
) -> AsyncIterator[Replica]:
    async with Turnlog(settings) as tl, TaskLog(settings) as tasks:
        door = A2ADoor(tl, tasks, owner_resolver=owner_of, claimant=name, timeout=45)
        handler = door.request_handler(DeployAgent(door, ran, gate), CARD)
        routes = create_jsonrpc_routes(handler, "/") + create_agent_card_routes(CARD)
        try:
            yield Replica(tl, door, Starlette(routes=routes))
        finally:
            await handler.aclose()


def message(
    text: str, *, task_id: str = "", context_id: str = "", message_id: str = ""
) -> SendMessageRequest:
    said = new_text_message(text, context_id=context_id or None, task_id=task_id or None,
                            role=Role.ROLE_USER)  # fmt: skip
    if message_id:
        said.message_id = message_id
    return SendMessageRequest(message=said)


async def send(client: Client, request: SendMessageRequest) -> StreamResponse:
    """The one response of a non-streaming send."""
    responses = [r async for r in client.send_message(request)]
    if len(responses) != 1:
        raise AssertionError(f"one response expected, got {responses}")
    return responses[0]


def text_of(said: Message) -> str:
    return "\n".join(part.text for part in said.parts)
