"""MCP: an approval retry to the tool's result, through turnlog.mcp and through the SDK alone.

One worker process; the harness serves examples/mcp_server.py's ``deploy`` (an
``ApprovalGate`` on a Turnlog with clients of its own) to the MCP SDK's own client over the
in-memory transport. Each step, one at a time (a steady closed loop): the first call (the pause,
not timed), then the timed retry carrying ``input_responses`` and the echoed ``request_state`` --
the answer through the resume contract, the claim, the tool run, the result recorded -- until
the ``CallToolResult`` is back. The baseline is the same tool as a team writes it today on the
SDK's own round trip: ``request_state`` sealed by the SDK, the answer taken from
``input_responses``, an in-memory set of spent states for single use (nothing survives the
process, nothing is shared with a replica). Reported: p50 and p99 per repeat.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.server.mcpserver import Context as ToolContext
from mcp.server.mcpserver import MCPServer
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
)

from bench.common import create_topics, make_deployment, unique_prefix
from bench.common import scenario_topics as topics_of
from bench.measure import median, percentile
from bench.report import Row
from bench.scenarios import Context, client_settings, worker_config
from bench.workerproc import WorkerProcess
from turnlog import Turnlog
from turnlog.mcp import APPROVAL_KEY, DECISION_SCHEMA

#: Approvals per repeat (full, --quick).
STEPS = (200, 30)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_server.py"
ARGS = {"service": "api", "region": "eu-west-1"}
APPROVE = {APPROVAL_KEY: ElicitResult(action="accept", content={"decision": "approve"})}


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("mcp_server_example", EXAMPLE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {EXAMPLE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sdk_only(log: Path) -> MCPServer:
    """The baseline: the SDK's own round trip, single use kept in this process's memory."""
    server = MCPServer("deployer")
    spent: set[str] = set()

    @server.tool()
    async def deploy(
        service: str, region: str, ctx: ToolContext
    ) -> CallToolResult | InputRequiredResult:
        state = ctx.request_state
        if state is None:
            form = ElicitRequestFormParams(
                message="Approve?", requested_schema=dict(DECISION_SCHEMA)
            )
            return InputRequiredResult(
                input_requests={APPROVAL_KEY: ElicitRequest(params=form)},
                request_state=uuid.uuid4().hex,
            )
        if state in spent:
            return CallToolResult(content=[], is_error=True)
        spent.add(state)
        line = f"deployed {service} to {region}"
        with log.open("a") as out:
            out.write(line + "\n")
        return CallToolResult(content=[TextContent(type="text", text=line)])

    return server


async def _approve_each(server: Any, n: int) -> list[float]:
    timings: list[float] = []
    async with Client(server) as client:
        for _ in range(n):
            first = await client.session.call_tool("deploy", ARGS, allow_input_required=True)
            if not isinstance(first, InputRequiredResult):
                raise RuntimeError(f"the first call did not ask: {first}")
            began = time.perf_counter()
            done = await client.session.call_tool(
                "deploy", ARGS, input_responses=APPROVE, request_state=first.request_state,
                allow_input_required=True,
            )  # fmt: skip
            timings.append((time.perf_counter() - began) * 1000)
            if not isinstance(done, CallToolResult) or done.is_error:
                raise RuntimeError(f"the retry gave no result: {done}")
    return timings


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n = STEPS[1] if ctx.quick else STEPS[0]
    samples: dict[str, list[list[float]]] = {"turnlog": [], "sdk": []}
    async with topics_of(ctx.bootstrap, []) as prefixes:
        prefix = unique_prefix(ctx.run_id, "mcp")
        prefixes.append(prefix)
        dep = make_deployment(
            ctx.bootstrap, prefix, partitions=opts.partitions,
            commit_interval_ms=opts.commit_interval_ms,
        )  # fmt: skip
        await create_topics(dep)
        with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
            settings = client_settings(dep, Path(tmp))
            config = worker_config(
                ctx, dep, "turnlog", app_id=dep.settings.application_id,
                state_dir=Path(tmp) / "worker",
            )  # fmt: skip
            proc = WorkerProcess(config)
            await proc.start()
            try:
                await proc.wait_event("owned", 600)
                async with Turnlog(settings) as tl:
                    server, gate = _example().build_server(tl, Path(tmp) / "deploy.log")
                    baseline = _sdk_only(Path(tmp) / "sdk.log")
                    try:
                        for k in range(ctx.repeats):
                            samples["sdk"].append(await _approve_each(baseline, n))
                            samples["turnlog"].append(await _approve_each(server, n))
                            ctx.log(
                                f"repeat {k + 1}: turnlog p50 "
                                f"{percentile(samples['turnlog'][-1], 0.5):.1f} ms, SDK alone "
                                f"p50 {percentile(samples['sdk'][-1], 0.5):.2f} ms"
                            )
                    finally:
                        await gate.close()
                ran = len((Path(tmp) / "deploy.log").read_text().splitlines())
            finally:
                await proc.stop()

    def per_repeat(name: str, q: float) -> list[float]:
        return [percentile(values, q) for values in samples[name]]

    note = (
        f"{n} approvals per repeat, one at a time; deploy ran {ran} times for "
        f"{n * ctx.repeats} approvals; SDK alone p99 {median(per_repeat('sdk', 0.99)) or 0:.2f} ms"
    )
    base = "SDK round trip, spent states in memory"
    return [
        Row(
            scenario="mcp",
            metric="p50 approval retry -> tool result (turnlog.mcp)",
            unit="ms",
            samples=per_repeat("turnlog", 0.5),
            baseline_samples=per_repeat("sdk", 0.5),
            baseline_name=base,
            notes=note,
            details={"samples_ms": samples},
        ),
        Row(
            scenario="mcp",
            metric="p99 approval retry -> tool result (turnlog.mcp)",
            unit="ms",
            samples=per_repeat("turnlog", 0.99),
            baseline_samples=per_repeat("sdk", 0.99),
            baseline_name=base,
        ),
    ]
