"""An MCP server whose ``deploy`` tool waits for a person's approval through turnlog.

``build_server(tl, deploy_log)`` is what tests/integration/test_mcp.py serves to the SDK's own
client; a process serves it with ``server.run_streamable_http_async(...)`` beside a
``turnlog worker``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, InputRequiredResult

from turnlog import Turnlog
from turnlog.mcp import ApprovalGate


def build_server(tl: Turnlog, deploy_log: Path) -> tuple[MCPServer, ApprovalGate]:
    server = MCPServer("deployer")
    gate = ApprovalGate(tl, "deployer")
    # The gated tool's request_state is turnlog's signed token: the SDK's sealing stands aside.
    gate.install(server, tools=["deploy"])

    async def do_deploy(arguments: dict[str, Any], idempotency_key: str) -> str:
        line = f"deployed {arguments['service']} to {arguments['region']}"
        with deploy_log.open("a") as log:  # the side effect: once per approved call
            log.write(line + "\n")
        return line

    @server.tool()
    async def deploy(
        service: str, region: str, ctx: Context
    ) -> CallToolResult | InputRequiredResult:
        """Deploy SERVICE to REGION, once a person approved it."""
        arguments = {"service": service, "region": region}
        return await gate.handle(ctx, "deploy", arguments, run=do_deploy)

    return server, gate
