"""An agent process of its own -- one web worker of several in one container -- for the tests of
processes that share one set of settings (one ``TURNLOG_STATE_DIR``, keys dir and bootstrap).

    python -m tests.integration.agent_proc --thread T --go FILE

Settings come from the ``TURNLOG_*`` environment alone, as a deployment's would. The process
pauses a turn on thread T, reads it back through ``tl.checkpoints``, prints one JSON line
(``paused``: the token and axes), and then stays open until the parent writes FILE: a JSON
object naming a token and axes to answer (another process's pause, so answering works from
any process too). It answers it, waits for the worker's outcome, prints ``answered`` and exits.
Stdout carries only these JSON lines, flushed at once; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from turnlog import Settings, Turnlog


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


async def main(args: argparse.Namespace) -> None:
    async with Turnlog(Settings.from_env()) as tl:
        paused = await tl.pause(sample_checkpoint(args.thread), request=REQUEST)
        latest = await tl.checkpoints.latest(args.thread)
        emit(
            "paused",
            thread=args.thread,
            token=paused.token,
            axes=dict(paused.axes),
            latest=None if latest is None else latest.checkpoint_id,
        )
        go = Path(args.go)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while not await asyncio.to_thread(
            go.exists
        ):  # the parent renames the file into place once it is whole
            if loop.time() > deadline:
                raise TimeoutError(f"no {go} within 120 s")
            await asyncio.sleep(0.02)
        task = json.loads(await asyncio.to_thread(go.read_text))
        sent = await tl.answer(task["token"], ANSWER, **task["axes"])
        outcome = await tl.outcome(sent.answer_id, thread_id=task["thread"], timeout=90)
        emit(
            "answered",
            thread=task["thread"],
            answer_id=sent.answer_id,
            accepted=outcome.accepted,
            reason=outcome.reason,
            resumed_thread=None if outcome.resumed is None else outcome.resumed.thread_id,
        )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent_proc")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--go", required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main(parse(sys.argv[1:])))
