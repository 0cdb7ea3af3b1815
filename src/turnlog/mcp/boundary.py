"""The SDK's request-state boundary, stood aside for the gated tools only.

``MCPServer`` installs a ``RequestStateBoundary`` that seals every ``request_state`` under its
own keys and TTL. A gated tool's state is turnlog's signed token instead, verified by the gate
(which names what it refuses), so its calls pass through untouched; every other request --
other tools, prompts, resources -- still goes through the SDK's boundary.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary


class GatedStateBoundary:
    """The SDK's ``RequestStateBoundary`` for every tool but the gated ones, whose state is a
    turnlog token the gate verifies itself (and names what it refuses)."""

    def __init__(self, inner: RequestStateBoundary, tools: Collection[str]) -> None:
        self.inner = inner
        self.tools = tools

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call" and (ctx.params or {}).get("name") in self.tools:
            return await call_next(ctx)
        return await self.inner(ctx, call_next)


__all__ = ["GatedStateBoundary"]
