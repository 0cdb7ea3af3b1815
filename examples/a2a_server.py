"""An A2A agent whose deploy waits for a person's approval, on turnlog (``pip install
turnlog[a2a]``). Every process started this way is the same agent: a task created through one is
read and continued through any other, also after the first was killed.

    turnlog worker &                                       # beside the agent, as everywhere
    DEPLOY_LOG=deploys.log python examples/a2a_server.py --port 8001
    DEPLOY_LOG=deploys.log python examples/a2a_server.py --port 8002   # another replica

The message ``deploy SERVICE to REGION`` creates a task that pauses in ``input-required`` (a
turnlog pause: ``turnlog pending`` lists it). A message on that task saying ``approve`` or
``reject`` continues it -- once, whichever replica gets it, however often it is sent: approved,
the task completes with ``deployed SERVICE to REGION`` (an artifact and the status message) and
that line is appended to ``DEPLOY_LOG``; rejected, it ends ``rejected``. Anything else is refused
with ``awaiting_answer`` and the task keeps waiting. Settings come from ``TURNLOG_*``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)
from starlette.applications import Starlette

from turnlog import Settings, Turnlog
from turnlog.a2a import A2ADoor, TaskLog, continuation

#: The side effect: ``deploy(service, region, idempotency_key)``.
Deploy = Callable[[str, str, str], Awaitable[None]]
ASKED = re.compile(r"deploy (\S+) to (\S+)")


def agent_card(url: str) -> AgentCard:
    return AgentCard(
        name="deployer",
        description="Deploys a service once a person approves it",
        version="1.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="deploy",
                name="deploy",
                description="deploy SERVICE to REGION",
                tags=["deploy"],
                examples=["deploy billing to eu"],
            )
        ],
    )


class DeployAgent(AgentExecutor):
    def __init__(self, door: A2ADoor, deploy: Deploy) -> None:
        self.door = door
        self.deploy = deploy

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        held = continuation(context)  # set when this message continues a paused task
        if held is None:  # a new task: ask before deploying anything
            if context.current_task is None:
                history = [context.message] if context.message is not None else []
                submitted = new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED,
                                     history=history)  # fmt: skip
                await event_queue.enqueue_event(submitted)
            asked = ASKED.fullmatch(context.get_user_input().strip())
            if asked is None:
                said = updater.new_agent_message([new_text_part("say: deploy SERVICE to REGION")])
                await updater.reject(said)
                return
            service, region = asked.groups()
            question = f"Deploy {service} to {region}? Reply approve or reject."
            arguments = {"service": service, "region": region}
            await self.door.ask(context, event_queue, question, tool="deploy", arguments=arguments)
            return
        if not held.approved:
            await updater.reject(updater.new_agent_message([new_text_part("rejected")]))
            return
        arguments = held.arguments
        await self.deploy(arguments["service"], arguments["region"], held.idempotency_key)
        line = f"deployed {arguments['service']} to {arguments['region']}"
        await updater.add_artifact([new_text_part(line)], name="deploy")
        await updater.complete(updater.new_agent_message([new_text_part(line)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("a deploy is not cancelled half-way")


def deploy_log(path: Path) -> Deploy:
    async def deploy(service: str, region: str, idempotency_key: str) -> None:
        with path.open("a") as log:
            log.write(f"deployed {service} to {region}\n")

    return deploy


def build_app(door: A2ADoor, deploy: Deploy, url: str) -> Starlette:
    card = agent_card(url)
    handler = door.request_handler(DeployAgent(door, deploy), card)
    routes = create_jsonrpc_routes(handler, "/") + create_agent_card_routes(card)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # the tasks this replica runs, drained

    return Starlette(routes=routes, lifespan=lifespan)


async def serve(port: int) -> None:
    settings = Settings.from_env()
    deploy = deploy_log(Path(os.environ.get("DEPLOY_LOG", "deploys.log")))
    async with Turnlog(settings) as tl, TaskLog(settings) as tasks:
        app = build_app(A2ADoor(tl, tasks), deploy, f"http://127.0.0.1:{port}/")
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        await uvicorn.Server(config).serve()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(serve(parser.parse_args().port))
