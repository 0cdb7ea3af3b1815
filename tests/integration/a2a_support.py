"""examples/a2a_server.py's agent on turnlog's A2A door, for the tests: a replica is one door,
one request handler and one in-process ASGI app, with clients of its own; two replicas over one
deployment share nothing but Kafka, as two processes would."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.helpers.proto_helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types.a2a_pb2 import AgentCard, Message, Role, SendMessageRequest, StreamResponse
from starlette.applications import Starlette

from turnlog import Turnlog
from turnlog.a2a import A2ADoor, TaskLog
from turnlog.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "a2a_server.py"
URL = "http://agent/"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("a2a_server_example", EXAMPLE)
    if spec is None or spec.loader is None:
        raise ImportError(EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AGENT = example()
CARD: AgentCard = AGENT.agent_card(URL)


def owner_of(context: ServerCallContext) -> str:
    """The test's stand-in for authentication: the ``x-user`` header names the owner."""
    headers = context.state.get("headers") or {}
    return str(headers.get("x-user", ""))


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


def _closing(handler: DefaultRequestHandlerV2) -> Callable[[Starlette], Any]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # the claims being said done, then the SDK's tasks

    return lifespan


@asynccontextmanager
async def replica(
    settings: Settings,
    ran: list[str],
    name: str,
    gate: asyncio.Event | None = None,
    *,
    agent: Callable[[A2ADoor], AgentExecutor] | None = None,
    timeout: float = 45,
) -> AsyncIterator[Replica]:
    """A replica of the example's agent whose deploy appends to ``ran`` and then, when ``gate``
    is given, waits for it: a test holds a deploy open to see what the other replica does
    meanwhile. ``agent`` runs another executor instead."""

    async def deploy(service: str, region: str, idempotency_key: str) -> None:
        ran.append(f"deployed {service} to {region}")
        if gate is not None:
            await gate.wait()

    async with Turnlog(settings) as tl, TaskLog(settings) as tasks:
        door = A2ADoor(tl, tasks, owner_resolver=owner_of, claimant=name, timeout=timeout)
        if agent is None:
            app = AGENT.build_app(door, deploy, URL)
        else:
            handler = door.request_handler(agent(door), CARD)
            routes = create_jsonrpc_routes(handler, "/") + create_agent_card_routes(CARD)
            app = Starlette(routes=routes, lifespan=_closing(handler))
        async with app.router.lifespan_context(app):
            yield Replica(tl, door, app)


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
