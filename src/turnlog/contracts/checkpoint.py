"""The continuable state of one paused turn, and how the asking round is captured.

Every identity field is kept on the checkpoint *and* on the pause token: the resume path checks
them against each other, so a token can never continue a turn it does not describe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from turnlog.contracts.messages import normalize_message, tool_call

#: The version of the canonical JSON body this build writes and reads.
TURN_STATE_VERSION = 1

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class TurnCheckpoint:
    """One paused turn, keyed by ``thread_id`` and ``checkpoint_id``.

    ``messages`` are canonical mappings (see :mod:`turnlog.contracts.messages`); ``sequence``
    orders the checkpoints of a thread; ``created_at``, ``package_version``, ``safe_boundary``
    and ``tenant_id`` are the facts a checkpoint service registers for each write.
    """

    run_id: str = ""
    session_id: str = ""
    thread_id: str = ""
    checkpoint_id: str = ""
    scope_hash: str = ""
    tool_call_id: str = ""
    interrupt_id: str = ""
    name: str = ""
    prompt: str = ""
    messages: tuple[Mapping[str, Any], ...] = ()
    sequence: int = 0
    tenant_id: str = ""
    created_at: datetime = _EPOCH
    package_version: str = ""
    safe_boundary: bool = False
    version: int = TURN_STATE_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(normalize_message(m) for m in self.messages))
        if self.created_at.tzinfo is None:
            raise ValueError("created_at must be timezone-aware (UTC)")

    def body(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "thread_id": self.thread_id,
            "checkpoint_id": self.checkpoint_id,
            "scope_hash": self.scope_hash,
            "tool_call_id": self.tool_call_id,
            "interrupt_id": self.interrupt_id,
            "name": self.name,
            "prompt": self.prompt,
            "messages": [dict(m) for m in self.messages],
            "sequence": self.sequence,
            "tenant_id": self.tenant_id,
            "created_at": self.created_at.astimezone(UTC).isoformat(),
            "package_version": self.package_version,
            "safe_boundary": self.safe_boundary,
        }

    def call_arguments(self, call_id: str | None = None) -> str | None:
        """The arguments (JSON text) the model gave call ``call_id`` (default: the paused call,
        ``tool_call_id``) in the asking round -- what it asked, and so the pause's request when
        none is given. ``None`` when the round holds no such call."""
        wanted = self.tool_call_id if call_id is None else call_id
        for message in reversed(self.messages):
            if message.get("role") == "assistant" and message.get("tool_calls"):
                for call in message["tool_calls"]:
                    if call.get("id") == wanted:
                        return str(call.get("arguments") or "{}")
                return None
        return None

    def encode(self) -> str:
        """The canonical JSON body: the same value always gives the same text."""
        return json.dumps(self.body(), separators=(",", ":"), sort_keys=True, ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str | bytes) -> TurnCheckpoint:
        """Read a canonical body, refusing a version whose field meanings this build can't know."""
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"a recorded turn state must be JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ValueError(f"a recorded turn state must be a mapping, got {type(body).__name__}")
        version = body.get("version")
        if version != TURN_STATE_VERSION:
            raise ValueError(
                f"recorded turn state version {version!r} is not {TURN_STATE_VERSION}, "
                "the one this build reads; continuing from fields it cannot interpret could "
                "answer into the wrong turn"
            )
        messages = body.get("messages") or []
        if not isinstance(messages, list):
            raise ValueError("a recorded turn state's messages must be a list")
        created = body.get("created_at")
        return cls(
            run_id=str(body.get("run_id", "")),
            session_id=str(body.get("session_id", "")),
            thread_id=str(body.get("thread_id", "")),
            checkpoint_id=str(body.get("checkpoint_id", "")),
            scope_hash=str(body.get("scope_hash", "")),
            tool_call_id=str(body.get("tool_call_id", "")),
            interrupt_id=str(body.get("interrupt_id", "")),
            name=str(body.get("name", "")),
            prompt=str(body.get("prompt", "")),
            messages=tuple(messages),
            sequence=int(body.get("sequence", 0)),
            tenant_id=str(body.get("tenant_id", "")),
            created_at=datetime.fromisoformat(created) if created else _EPOCH,
            package_version=str(body.get("package_version", "")),
            safe_boundary=bool(body.get("safe_boundary", False)),
        )


@dataclass(frozen=True, slots=True)
class ReservedCall:
    """A tool call the asking round reserved: what the model asked for, not yet run."""

    id: str
    name: str
    arguments: Any = field(default=None)


def captured_messages(
    transcript: Sequence[Mapping[str, Any]],
    turn_text: str = "",
    requests: Sequence[ReservedCall | Mapping[str, Any]] = (),
) -> tuple[dict[str, Any], ...]:
    """The turn's messages at the moment it paused, the asking round included.

    ``transcript`` holds only the closed rounds. The round that stopped is still open, so the
    assistant message carrying the reserved calls exists only in ``turn_text`` and ``requests``;
    a checkpoint without it would resume into a conversation where the model never asked the
    question being answered, and strict providers refuse a tool result for an unseen call.
    """
    messages = [normalize_message(m) for m in transcript]
    if requests:
        calls = []
        for request in requests:
            if isinstance(request, ReservedCall):
                calls.append(tool_call(request.id, request.name, request.arguments))
            else:
                calls.append(
                    tool_call(
                        request.get("id", ""), request.get("name", ""), request.get("arguments")
                    )
                )
        messages.append(
            normalize_message(
                {"role": "assistant", "content": turn_text or "", "tool_calls": calls}
            )
        )
    return tuple(messages)


def doubled_calls(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The call ids a transcript reserves twice while still open: named twice in one assistant
    message, or again by a later one before any tool message answered the first.

    Such a transcript is what appending the asking round to a list that already held it
    gives (the OpenAI SDK's ``to_input_list()`` plus ``captured_messages``): rehydration would
    answer one of the two calls and leave the other unanswered, which a strict provider
    refuses, and a model shown it sees the same question asked twice. An id reused by a later
    round after its call was answered is no doubling.
    """
    open_ids: set[str] = set()
    doubled: list[str] = []
    for message in messages:
        if message.get("role") == "tool":
            open_ids.discard(str(message.get("tool_call_id")))
            continue
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            call_id = str(call.get("id", ""))
            if call_id in open_ids and call_id not in doubled:
                doubled.append(call_id)
            open_ids.add(call_id)
    return doubled
