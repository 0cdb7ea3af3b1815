"""A2A: a continuing message -> the task completed, p50 and p99, one task at a time, through
a2a-sdk's own client against an in-process JSON-RPC app (httpx's ASGI transport), for three
back ends in one run on one machine:

- turnlog's door (examples/a2a_server.py's agent; the tasks topic, the answer, the worker's
  decision and the claim on the local broker; a worker in this process);
- a2a-sdk's ``VersionedDatabaseTaskStore`` + ``DatabaseTaskEventStream`` on SQLite;
- a2a-sdk's ``InMemoryTaskStore`` (one process, nothing durable).

    pip install 'a2a-sdk[sqlite]'      # the SQLite baseline's driver
    python -m bench.a2a_continuation [--n 40] [--bootstrap 127.0.0.1:9092]

Asserts nothing, is not part of the suite; its topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import DatabaseTaskEventStream, VersionedDatabaseTaskStore
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import Role, SendMessageRequest, Task, TaskState
from starlette.applications import Starlette

from turnlog import Settings, Turnlog, write_keypair
from turnlog.a2a import A2ADoor, TaskLog
from turnlog.kafka import clients

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "a2a_server.py"
URL = "http://agent/"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("a2a_server_example", EXAMPLE)
    if spec is None or spec.loader is None:
        raise ImportError(EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AGENT = _example()
CARD = AGENT.agent_card(URL)


class PlainDeployAgent(AgentExecutor):
    """The example's agent without turnlog: asks, then deploys on the next message."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        task = context.current_task
        if task is None:
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
            )
            await updater.requires_input(updater.new_agent_message([new_text_part("approve?")]))
            return
        await updater.add_artifact([new_text_part("deployed billing to eu")], name="deploy")
        await updater.complete(updater.new_agent_message([new_text_part("deployed")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def _app(handler: DefaultRequestHandlerV2) -> Starlette:
    routes = create_jsonrpc_routes(handler, "/") + create_agent_card_routes(CARD)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()

    return Starlette(routes=routes, lifespan=lifespan)


async def _send(client: Any, text: str, task: Task | None = None) -> Task:
    said = new_text_message(text, role=Role.ROLE_USER,
                            task_id=task.id if task else None,
                            context_id=task.context_id if task else None)  # fmt: skip
    async for response in client.send_message(SendMessageRequest(message=said)):
        return response.task  # type: ignore[no-any-return]
    raise RuntimeError("no response")


async def _measure(app: Starlette, n: int) -> list[float]:
    samples: list[float] = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://agent", timeout=60
        ) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(CARD)
            try:
                for i in range(n + 3):  # the first three warm up
                    task = await _send(client, "deploy billing to eu")
                    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                        raise RuntimeError(f"not paused: {task.status}")
                    started = time.perf_counter()
                    done = await _send(client, "approve", task)
                    took = time.perf_counter() - started
                    if done.status.state != TaskState.TASK_STATE_COMPLETED:
                        raise RuntimeError(f"not completed: {done.status}")
                    if i >= 3:
                        samples.append(took * 1000)
            finally:
                await client.close()
    return samples


def _row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"| {name} | {statistics.median(ordered):.1f} ms | {p99:.1f} ms | {len(ordered)} |"


async def _turnlog(bootstrap: str, n: int, root: Path) -> list[float]:
    tag = uuid.uuid4().hex[:8]
    write_keypair(root / "keys", "bench")
    settings = Settings(
        bootstrap_servers=bootstrap, topic_prefix=f"bench-a2a-{tag}.", application_id=f"a2a{tag}",
        state_dir=root / "state", keys_dir=root / "keys", partitions=2, commit_interval_ms=50,
    )  # fmt: skip

    async def deploy(service: str, region: str, key: str) -> None:
        del service, region, key

    try:
        async with Turnlog(settings) as tl, TaskLog(settings) as tasks:
            worker = asyncio.create_task(tl.run_worker())
            samples = await _measure(AGENT.build_app(A2ADoor(tl, tasks), deploy, URL), n)
            if worker.done():
                worker.result()
            return samples
    finally:
        admin = clients.admin(settings)
        await admin.start()
        try:
            names = [t for t in await admin.list_topics() if t.startswith(settings.topic_prefix)]
            await admin.delete_topics(names)
        finally:
            await admin.close()


async def _sqlite(n: int, root: Path) -> list[float]:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{root / 'tasks.db'}")
    try:
        store = VersionedDatabaseTaskStore(engine)
        await store.initialize()
        stream = DatabaseTaskEventStream(engine)
        await stream.initialize()
        handler = DefaultRequestHandlerV2(PlainDeployAgent(), store, CARD, event_stream=stream)
        return await _measure(_app(handler), n)
    finally:
        await engine.dispose()


async def _memory(n: int) -> list[float]:
    handler = DefaultRequestHandlerV2(PlainDeployAgent(), InMemoryTaskStore(), CARD)
    return await _measure(_app(handler), n)


async def main(n: int, bootstrap: str) -> None:
    runs: list[tuple[str, Callable[[Path], Any]]] = [
        ("turnlog door (Kafka, claim, worker in process)", lambda r: _turnlog(bootstrap, n, r)),
        ("a2a-sdk VersionedDatabaseTaskStore (SQLite)", lambda r: _sqlite(n, r)),
        ("a2a-sdk InMemoryTaskStore", lambda r: _memory(n)),
    ]
    print("| back end | p50 continuation -> completed | p99 | n |\n|---|---|---|---|")
    for name, run in runs:
        with tempfile.TemporaryDirectory() as root:
            print(_row(name, await run(Path(root))), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.bootstrap))
