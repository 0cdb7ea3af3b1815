"""Reading resumed turns downstream, and continuing them.

An agent worker iterates :class:`ResumedTurns` and continues each turn through its own ``run``,
``stream`` or typed-stream callable. The offset of a turn is committed only after the caller's
handling of it returns, so a worker that crashes mid-turn gets the turn again (at-least-once
downstream; the resume itself happened exactly once upstream). The history handed to the
callable already holds the answer: there is no way to enter the agent first and rehydrate after.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from turnlog.codec import decode
from turnlog.contracts.events import AskUserAnswered, PauseExpired, TurnResumed
from turnlog.errors import DecodeError
from turnlog.settings import Settings
from turnlog.topics import TopicSet


def history_dicts(turn: TurnResumed) -> list[dict[str, Any]]:
    """The history as plain role/content/tool-call dicts (OpenAI-style), ``None`` keys dropped."""
    out: list[dict[str, Any]] = []
    for message in turn.history:
        item: dict[str, Any] = {"role": message["role"], "content": message["content"]}
        if message.get("tool_calls"):
            item["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in message["tool_calls"]
            ]
        if message.get("tool_call_id") is not None:
            item["tool_call_id"] = message["tool_call_id"]
        if message.get("name") is not None:
            item["name"] = message["name"]
        out.append(item)
    return out


def history_langchain(turn: TurnResumed) -> list[Any]:
    """The history as langchain-core messages (needs the ``langchain`` extra)."""
    try:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    except ImportError as exc:
        raise ImportError("history_langchain needs `pip install turnlog[langchain]`") from exc
    import json

    messages: list[Any] = []
    for m in turn.history:
        role, content = m["role"], m["content"]
        if role == "system":
            messages.append(SystemMessage(content=content))
        elif role == "user":
            messages.append(HumanMessage(content=content))
        elif role == "assistant":
            calls = [
                {"id": c["id"], "name": c["name"], "args": json.loads(c["arguments"] or "{}")}
                for c in m.get("tool_calls") or ()
            ]
            messages.append(AIMessage(content=content, tool_calls=calls))
        else:
            messages.append(ToolMessage(content=content, tool_call_id=m["tool_call_id"] or ""))
    return messages


@dataclass(frozen=True, slots=True)
class Delivery:
    """One downstream record: a resumed turn, or the news that a pause expired unanswered."""

    event: TurnResumed | PauseExpired
    partition: int
    offset: int


class ResumedTurns:
    """An async iterator over the resumed topic (``read_committed``, its own consumer group).

    ``async for turn in turns`` commits a turn's offset when the loop asks for the next one, i.e.
    after the body handled it. Undecodable records are skipped and counted, never raised.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        group_id: str,
        topics: TopicSet | None = None,
        include_expired: bool = False,
        from_beginning: bool = True,
    ) -> None:
        self.topics = topics or TopicSet.from_settings(settings)
        self.include_expired = include_expired
        self.skipped = 0
        self._consumer = AIOKafkaConsumer(
            self.topics.resumed,
            bootstrap_servers=settings.bootstrap_servers,
            group_id=group_id,
            client_id=f"turnlog-resumed-{uuid.uuid4().hex[:6]}",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
        )
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self._consumer.start()
            self._started = True

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._consumer.stop()

    async def __aenter__(self) -> ResumedTurns:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def deliveries(self) -> AsyncIterator[Delivery]:
        await self.start()
        while True:
            record = await self._consumer.getone()
            tp = TopicPartition(record.topic, record.partition)
            try:
                event = decode(record.value) if record.value is not None else None
            except DecodeError:
                event = None
            if isinstance(event, TurnResumed) or (
                self.include_expired and isinstance(event, PauseExpired)
            ):
                yield Delivery(event, record.partition, record.offset)
            elif not isinstance(event, PauseExpired):
                self.skipped += 1
            # Reached only when the caller asks for the next item: its handling is done.
            await self._consumer.commit({tp: record.offset + 1})

    def __aiter__(self) -> AsyncIterator[TurnResumed | PauseExpired]:
        return self._events()

    async def _events(self) -> AsyncIterator[TurnResumed | PauseExpired]:
        async for delivery in self.deliveries():
            yield delivery.event


# -- continuing a resumed turn -----------------------------------------------------------------


def answered_event(turn: TurnResumed) -> AskUserAnswered | None:
    """The answered record owed first on the typed surface (``ask_user`` with answers only)."""
    return turn.answered


async def resume_run(run: Callable[..., Awaitable[Any]], turn: TurnResumed, **options: Any) -> Any:
    """Continue through a blocking ``run(prompt, *, run_id, session_id, history, **options)``."""
    return await run(
        turn.prompt,
        run_id=turn.run_id,
        session_id=turn.session_id,
        history=history_dicts(turn),
        **options,
    )


def resume_stream(
    stream: Callable[..., AsyncIterator[Any]], turn: TurnResumed, **options: Any
) -> AsyncIterator[Any]:
    """Continue through a streaming callable; same arguments as :func:`resume_run`."""
    return stream(
        turn.prompt,
        run_id=turn.run_id,
        session_id=turn.session_id,
        history=history_dicts(turn),
        **options,
    )


async def resume_stream_typed(
    stream_typed: Callable[..., AsyncIterator[Any]], turn: TurnResumed, **options: Any
) -> AsyncIterator[Any]:
    """Continue through a typed stream; the answered record comes first, as callers expect."""
    answered = answered_event(turn)
    if answered is not None:
        yield answered
    events = resume_stream(stream_typed, turn, **options)
    try:
        async for event in events:
            yield event
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
