"""A2A: an a2a-sdk agent's ``input-required`` tasks paused through turnlog and continued
exactly once across replicas, on Kafka (``pip install turnlog[a2a]``)::

    tasks = TaskLog(tl.settings)                  # the tasks topic, folded in this replica
    door = A2ADoor(tl, tasks)
    handler = door.request_handler(MyExecutor(door), agent_card)

    class MyExecutor(AgentExecutor):
        async def execute(self, context, event_queue):
            held = continuation(context)          # this message continues a paused task
            if held is None:
                ...                               # a new task: enqueue it, then ask
                await door.ask(context, event_queue, "Deploy billing?", tool="deploy",
                               arguments={"service": "billing"})
            elif held.approved:
                deploy(idempotency_key=held.idempotency_key)   # once, whichever replica

- :class:`KafkaTaskStore` / :class:`KafkaTaskEventStream`: a2a-sdk's cluster-mode
  ``VersionedTaskStore`` and ``TaskEventStream`` over ``<prefix>a2a.tasks``, compare-and-swap
  decided by the partition's log order.
- :class:`A2ADoor`: ``ask`` pauses a task (``turnlog pending`` sees it); a continuing message is
  an answer through the resume contract and then the continuation claim, before ``execute()``.
"""

from __future__ import annotations

try:
    import a2a.server.cluster  # noqa: F401
except ImportError as exc:  # the optional extra is not installed
    raise ImportError("turnlog.a2a needs `pip install turnlog[a2a]` (a2a-sdk 1.3)") from exc

from turnlog.a2a.answers import (
    A2AContinuation,
    answer_id,
    owner_scope,
    refusal,
    response_from_text,
)
from turnlog.a2a.door import A2ADoor, continuation
from turnlog.a2a.fold import PauseLink, TaskFold
from turnlog.a2a.store import KafkaTaskEventStream, KafkaTaskStore
from turnlog.a2a.tasklog import TaskLog, tasks_topic

__all__ = [
    "A2AContinuation",
    "A2ADoor",
    "KafkaTaskEventStream",
    "KafkaTaskStore",
    "PauseLink",
    "TaskFold",
    "TaskLog",
    "answer_id",
    "continuation",
    "owner_scope",
    "refusal",
    "response_from_text",
    "tasks_topic",
]
