"""What an MCP ``request_state`` is bound to, and how a client's answer becomes turnlog's.

The state a tool hands out is the pause's own signed token. The token already binds the tool and
the SHA-256 of its arguments (an ``approve_tool_call`` pause's claims) and the window; this
module adds the rest of the specification's binding in the token's axes: the server (the
session axis, ``mcp:<server>``) and the authenticated principal (the scope axis, a digest of
the SDK's principal, or ``mcp-anonymous`` on a transport with none). A retry is checked against
all of them before anything is read or written, and a mismatch is refused by name.

No I/O here: the checks take the verified claims and the retry's values.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approve, arguments_hash, reject
from turnlog.contracts.claims import PauseClaims

#: The key of the one form elicitation an approval asks for, in ``input_requests``.
APPROVAL_KEY: Final = "approval"
#: The form the client shows its person: one decision, and a message the tool's caller reads.
DECISION_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "reject"], "title": "Decision"},
        "message": {"type": "string", "title": "Message (optional)"},
    },
    "required": ["decision"],
}

ANONYMOUS: Final = "mcp-anonymous"


class StateRefused(Exception):
    """A ``request_state`` or a retry refused before anything ran; ``reason`` names the rule.

    The reasons are turnlog's token refusals (``token_invalid``, ``token_expired``,
    ``token_wrong_audience``, ...), the answer refusals the worker writes (``pause_expired``,
    ...), and the door's own: ``state_foreign`` (a turnlog token, not of this server's
    approvals), ``state_request_mismatch`` (another tool or other arguments),
    ``state_principal_mismatch`` (another principal), ``response_invalid`` (an answer that is
    no decision), ``already_continued`` (another retry runs the tool and has recorded no result
    yet).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"request_state refused ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


def principal_scope(principal: str | None) -> str:
    """The scope axis of a pause made for ``principal`` (the SDK's ``authenticated_principal``):
    a digest, so the token carries no identity in clear."""
    if principal is None:
        return ANONYMOUS
    digest = hashlib.sha256(b"turnlog/mcp/principal:" + principal.encode("utf-8", "surrogatepass"))
    return f"mcp-principal:{digest.hexdigest()[:32]}"


def server_session(server: str) -> str:
    """The session axis of every pause a server makes: a state of another server is foreign."""
    return f"mcp:{server}"


def check_binding(
    claims: PauseClaims,
    *,
    server: str,
    tool: str,
    arguments: Mapping[str, Any],
    principal: str | None,
) -> None:
    """:class:`StateRefused` unless the verified token is this server's approval of exactly
    ``tool(arguments)`` for ``principal``."""
    if claims.interaction != APPROVE_TOOL_CALL or claims.session_id != server_session(server):
        raise StateRefused(
            "state_foreign",
            f"the state is a turnlog pause of {claims.session_id!r} ({claims.interaction}), "
            f"not an approval of MCP server {server!r}",
        )
    if claims.tool_name != tool or claims.arguments_hash != arguments_hash(dict(arguments)):
        raise StateRefused(
            "state_request_mismatch",
            f"the state was issued for {claims.tool_name!r} with arguments "
            f"{claims.arguments_hash[:12]}..., the retry calls {tool!r} with arguments "
            f"{arguments_hash(dict(arguments))[:12]}...",
        )
    if claims.scope_hash != principal_scope(principal):
        raise StateRefused(
            "state_principal_mismatch",
            "the state was issued to another principal than the one retrying",
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """The person's decision, from an elicitation result: what turnlog is answered with."""

    approved: bool
    message: str | None

    def response(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The ``approve_tool_call`` response deciding exactly ``tool(arguments)``."""
        if self.approved:
            return approve(tool, dict(arguments), message=self.message)
        return reject(tool, dict(arguments), self.message or "rejected through MCP")

    def answer_id(self, token_id: str) -> str:
        """The same decision on the same pause is the same answer: a repeated retry collapses
        onto the first (consumed at most once); a different decision is a different answer,
        refused as ``already_consumed`` if the first was taken."""
        text = json.dumps([token_id, self.approved, self.message], ensure_ascii=True)
        return f"mcp-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def decision_of(response: object) -> Decision:
    """The decision an elicitation result states: ``accept`` with ``decision: approve``
    approves; ``accept`` with ``reject``, ``decline`` and ``cancel`` reject; anything else is
    refused as ``response_invalid`` (a form the client filled in wrong decides nothing)."""
    if hasattr(response, "model_dump"):
        response = response.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(response, Mapping):
        raise StateRefused("response_invalid", "the approval's response is no elicitation result")
    action = response.get("action")
    content = response.get("content") or {}
    if not isinstance(content, Mapping):
        raise StateRefused("response_invalid", "the elicitation result's content is no object")
    message = content.get("message")
    if message is not None and not isinstance(message, str):
        raise StateRefused("response_invalid", "the message must be text")
    if action in ("decline", "cancel"):
        return Decision(False, message or f"the person chose {action}")
    if action != "accept":
        raise StateRefused("response_invalid", f"action {action!r} is not accept/decline/cancel")
    decision = content.get("decision")
    if decision not in ("approve", "reject"):
        raise StateRefused(
            "response_invalid", f'content.decision must be "approve" or "reject", not {decision!r}'
        )
    return Decision(decision == "approve", message or None)


__all__ = [
    "ANONYMOUS",
    "APPROVAL_KEY",
    "DECISION_SCHEMA",
    "Decision",
    "StateRefused",
    "check_binding",
    "decision_of",
    "principal_scope",
    "server_session",
]
