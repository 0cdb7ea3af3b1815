"""What a continuing message is, in turnlog's terms: the answer its text gives, the answer id a
retry shares, the scope an owner pauses under, the refusal a client reads -- and the claim a won
message carries into ``execute()``. No Kafka and no server here; the door (``door.py``) uses it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from a2a.helpers.proto_helpers import get_message_text
from a2a.types.a2a_pb2 import Message, Role, Task
from a2a.utils.errors import InvalidParamsError

from turnlog.a2a.fold import PauseLink
from turnlog.consumers.continuation import Continuation
from turnlog.contracts.approvals import APPROVE, APPROVE_TOOL_CALL, EDIT, approve, reject

APPROVE_WORDS = frozenset({"approve", "approved", "yes"})
REJECT_WORDS = frozenset({"reject", "rejected", "no", "deny"})


def answer_id(task_id: str, message: Message) -> str:
    """The answer a continuing message is: one id per task and message id, so a client's
    retry of the message is the same answer (consumed once) on any replica."""
    said = hashlib.sha256(f"{task_id}/{message.message_id}".encode()).hexdigest()[:32]
    return f"a2a-{said}"


def owner_scope(owner: str) -> str:
    """The pause's tenant scope: a digest of the A2A task's owner, so an answer stating
    another owner's scope is refused at step 2."""
    return "a2a-" + hashlib.sha256(owner.encode()).hexdigest()[:32]


def refusal(reason: str, detail: str) -> InvalidParamsError:
    """A JSON-RPC error (-32602) whose message opens with the reason's name."""
    return InvalidParamsError(message=f"{reason}: {detail}", data={"reason": reason})


def response_from_text(link: PauseLink, text: str) -> dict[str, Any] | None:
    """The answer a continuing message's text gives to the pause ``link`` names, or ``None``.

    An approval takes ``approve`` (``approved``, ``yes``) or ``reject`` (``rejected``, ``no``,
    ``deny``) as the first word, the whole text becoming a rejection's message; a question takes
    any text that is not blank, as its free-text answer."""
    words = text.strip().split()
    if not words:
        return None
    if link.interaction != APPROVE_TOOL_CALL:
        return {"answers": [{"selections": [], "other": text.strip()}]}
    first = words[0].lower().strip(".,!")
    arguments = json.loads(link.arguments_json) if link.arguments_json else None
    if first in APPROVE_WORDS:
        return approve(link.tool, arguments)
    if first in REJECT_WORDS:
        return reject(link.tool, arguments, text.strip())
    return None


@dataclass(frozen=True, slots=True)
class A2AContinuation:
    """The continuing message won the claim: this request continues the task, once.

    ``response`` is the answer as the worker consumed it (for an approval: ``decision``);
    ``answer_text`` the client's words; ``idempotency_key`` the approved call's key, for a
    side effect that can honour one."""

    claim: Continuation
    link: PauseLink
    response: Mapping[str, Any]

    @property
    def approved(self) -> bool:
        return self.link.interaction == APPROVE_TOOL_CALL and self.response.get("decision") in (
            APPROVE,
            EDIT,
        )

    @property
    def arguments(self) -> Any:
        """The arguments of the call the approval was asked for (``{}`` for a question)."""
        return json.loads(self.link.arguments_json) if self.link.arguments_json else {}

    @property
    def answer_text(self) -> str:
        if self.link.interaction == APPROVE_TOOL_CALL:
            return str(self.response.get("message") or self.response.get("decision") or "")
        answers = self.response.get("answers") or [{}]
        first = answers[0]
        return str(first.get("other") or ", ".join(first.get("selections") or ()))

    @property
    def idempotency_key(self) -> str:
        return self.claim.key_for(self.link.call_id)


def conversation(task: Task | None, first: Message | None) -> list[dict[str, str]]:
    """The task's conversation as turnlog's role/content records (text parts only)."""
    messages = list(task.history) if task is not None else []
    if first is not None and all(m.message_id != first.message_id for m in messages):
        messages.append(first)
    role = {Role.ROLE_USER: "user", Role.ROLE_AGENT: "assistant"}
    return [
        {"role": role.get(m.role, "user"), "content": get_message_text(m)}
        for m in messages
        if get_message_text(m)
    ]


__all__ = [
    "APPROVE_WORDS",
    "REJECT_WORDS",
    "A2AContinuation",
    "answer_id",
    "conversation",
    "owner_scope",
    "refusal",
    "response_from_text",
]
