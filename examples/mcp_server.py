"""An MCP server whose deploy tool waits for a person's approval, on turnlog (``pip install
turnlog[mcp]``). Every process started this way is the same server: a pause made through one is
continued through any other, also after the first was killed.

    turnlog worker &                                       # beside the server, as everywhere
    DEPLOY_LOG=deploys.log python examples/mcp_server.py --port 8001
    DEPLOY_LOG=deploys.log python examples/mcp_server.py --port 8002   # another replica

Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (MCP 2026-07-28). ``deploy(service, region)``
first returns ``input_required``: one form elicitation (``decision``: ``approve`` or ``reject``)
and the pause's token as ``request_state`` (``turnlog pending`` lists the pause). The client's
retry with the person's answer continues it -- once, whichever replica gets it, however often it
is sent: approved, the result is ``deployed SERVICE to REGION`` and that line is appended to
``DEPLOY_LOG``; rejected (or declined, or cancelled), the result says ``rejected``. Settings come
from ``TURNLOG_*``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, InputRequiredResult

from turnlog import Settings, Turnlog, TurnlogError
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


async def serve(port: int) -> None:
    async with Turnlog(Settings.from_env()) as tl:
        server, gate = build_server(tl, Path(os.environ.get("DEPLOY_LOG", "deploys.log")))
        try:
            await server.run_streamable_http_async(host="127.0.0.1", port=port)
        finally:
            await gate.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    try:
        asyncio.run(serve(parser.parse_args().port))
    except TurnlogError as exc:  # no keys, a bad setting: one line, no traceback
        sys.exit(f"error: {exc}")
