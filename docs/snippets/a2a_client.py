"""What any A2A client does with a paused task, through a2a-sdk's own client: send a message,
read the task, continue it with a message on the same task id and context id.

    python docs/snippets/a2a_client.py http://127.0.0.1:8001 "deploy billing to eu"
    python docs/snippets/a2a_client.py http://127.0.0.1:8002 approve TASK_ID CONTEXT_ID

A retry of a message is the same message: keep its ``message_id`` (``--message-id``), and any
replica answers it as the first send was answered, running nothing again.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)


async def send_text(
    url: str, text: str, *, task_id: str = "", context_id: str = "", message_id: str = ""
) -> Task:
    """Send ``text``; on a paused task, name it by ``task_id`` and ``context_id``."""
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        message = Message(
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            message_id=message_id or uuid.uuid4().hex,
            task_id=task_id,
            context_id=context_id,
        )
        async for response in client.send_message(SendMessageRequest(message=message)):
            return response.task
        raise RuntimeError(f"{url} sent no response")
    finally:
        await client.close()


async def read_task(url: str, task_id: str) -> Task:
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        return await client.get_task(GetTaskRequest(id=task_id))
    finally:
        await client.close()


def status_line(task: Task) -> str:
    said = " ".join(part.text for part in task.status.message.parts)
    return f"{task.id} {task.context_id} {TaskState.Name(task.status.state)} {said}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("text")
    parser.add_argument("task_id", nargs="?", default="")
    parser.add_argument("context_id", nargs="?", default="")
    parser.add_argument("--message-id", default="")
    args = parser.parse_args()
    task = asyncio.run(
        send_text(args.url, args.text, task_id=args.task_id, context_id=args.context_id,
                  message_id=args.message_id)
    )  # fmt: skip
    print(status_line(task))
