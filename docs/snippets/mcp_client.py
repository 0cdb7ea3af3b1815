"""What any MCP client does with a gated tool: the SDK's own loop, or the rounds by hand.

``tests/integration/test_mcp.py`` runs both against examples/mcp_server.py's server.
"""

from __future__ import annotations

from typing import Any

from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, InputRequiredResult


async def ask_the_person(
    context: ClientRequestContext, params: ElicitRequestParams
) -> ElicitResult:
    print(params.message)  # "Approve deploy({"region": "eu-west-1", "service": "api"})?"
    return ElicitResult(action="accept", content={"decision": "approve"})


async def deploy_in_band(server: Any) -> CallToolResult:
    """The SDK runs the retry loop: the person answers in the client, the result comes back."""
    async with Client(server, elicitation_callback=ask_the_person) as client:
        return await client.call_tool("deploy", {"service": "api", "region": "eu-west-1"})


async def deploy_by_hand(server: Any, decision: str) -> CallToolResult:
    """The rounds by hand: keep ``request_state`` (it may be days before the person answers),
    retry with the answer -- or with the state alone to see whether someone answered elsewhere."""
    arguments = {"service": "api", "region": "eu-west-1"}
    async with Client(server) as client:
        first = await client.session.call_tool("deploy", arguments, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        state = first.request_state  # a turnlog pause token: store it with the job
        answer = {"approval": ElicitResult(action="accept", content={"decision": decision})}
        result = await client.session.call_tool(
            "deploy", arguments, input_responses=answer, request_state=state,
            allow_input_required=True,
        )  # fmt: skip
        assert isinstance(result, CallToolResult)
        return result
