"""What a gated tool answers with, in MCP's shapes: the question, the tool's result, a rejection."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp_types import CallToolResult, TextContent

from turnlog.contracts.events import TurnResumed

#: What a gated tool runs once approved: ``run(arguments, idempotency_key)``.
RunTool = Callable[[dict[str, Any], str], Awaitable[Any]]


def question(tool: str, args: Mapping[str, Any]) -> str:
    shown = json.dumps(dict(args), ensure_ascii=False, sort_keys=True)
    return f"Approve {tool}({shown})?"


async def run_tool(run: RunTool, arguments: dict[str, Any], key: str) -> CallToolResult:
    """The tool's result as MCP's: a ``CallToolResult`` as is, text as text, anything else as
    JSON; an exception is the error result (it ran once; that is what it gave)."""
    try:
        value = await run(arguments, key)
    except Exception as exc:  # noqa: BLE001 -- the tool ran; its failure is its result
        return CallToolResult(
            content=[TextContent(type="text", text=f"{type(exc).__name__}: {exc}")], is_error=True
        )
    if isinstance(value, CallToolResult):
        return value
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)])


def rejected(turn: TurnResumed, tool: str, call_id: str) -> CallToolResult:
    said = next(
        (
            str(m.get("content") or "")
            for m in turn.history
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ),
        "",
    )
    return CallToolResult(
        content=[TextContent(type="text", text=f"rejected: {tool} was not run. {said}".strip())]
    )


__all__ = ["RunTool", "question", "rejected", "run_tool"]
