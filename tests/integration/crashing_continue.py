"""A continue step that dies after its claim, before done, for the crash tests: SIGKILL it.

    python -m tests.integration.crashing_continue TOKEN FILE

Settings come from the ``TURNLOG_*`` environment. It continues the paused Pydantic AI run of
TOKEN with ``continue_run``; the approved ``deploy`` appends the idempotency key it was handed
to FILE (a line, flushed at once) and then waits forever -- the claim is taken, the side effect
has run, and done is never said until the parent kills the process.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.models.test import TestModel

from turnlog import Settings, Turnlog
from turnlog.adapters.pydantic_ai import continue_run


def hanging_agent(ran: Path) -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool(requires_approval=True)
    async def deploy(ctx: RunContext[None], service: str, region: str) -> str:
        with ran.open("a") as out:
            out.write(f"{(ctx.tool_call_metadata or {}).get('idempotency_key')}\n")
        await asyncio.Event().wait()  # the process dies here, never saying done
        return "unreachable"

    return agent


async def main(token: str, ran: Path) -> None:
    async with Turnlog(Settings.from_env()) as tl:
        await continue_run(tl, token, hanging_agent(ran))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
