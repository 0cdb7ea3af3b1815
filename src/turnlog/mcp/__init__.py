"""MCP tools that wait for a person through turnlog and run once (the ``mcp`` extra).

An MCP server (the official ``mcp`` SDK, 2.3 or later, protocol 2026-07-28) gates a tool with
:class:`ApprovalGate`: the first call pauses on Kafka and returns ``input_required`` with a form
elicitation and the pause's signed token as ``request_state``; a retry carrying the person's
decision answers the pause through the resume contract; the resumed turn is claimed, so the tool
runs once whichever replica, restart or repeated retry gets there, and its result is recorded so
every later retry returns it without running anything. Refusals name their rule
(:class:`StateRefused`, sent as JSON-RPC error -32602 with ``data.reason``).
See docs/adapters/mcp.md.
"""

from __future__ import annotations

from turnlog.mcp.binding import APPROVAL_KEY, DECISION_SCHEMA, StateRefused
from turnlog.mcp.boundary import GatedStateBoundary
from turnlog.mcp.gate import ApprovalGate
from turnlog.mcp.results import RecordedResult, results_topic
from turnlog.mcp.shapes import RunTool

__all__ = [
    "APPROVAL_KEY",
    "DECISION_SCHEMA",
    "ApprovalGate",
    "GatedStateBoundary",
    "RecordedResult",
    "RunTool",
    "StateRefused",
    "results_topic",
]
