"""A CheckpointProjector in a process of its own, for tests that need another process or a kill.

    python -m tests.integration.projector_proc --bootstrap HOST:PORT --prefix P --partitions N \
        --state DIR (--follow | --catch-up)

``--follow`` projects until SIGTERM; ``--catch-up`` applies everything committed as of its start
and exits. Stdout carries one JSON object per line, flushed at once, so a test can act on what
the process has done (``started``, ``progress`` after every applied batch, ``done`` with the
projector's stats and the store's digest). A progress line is written only after its batch was
committed to the store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from turnlog.kafka.topics import TopicSet
from turnlog.projections.projector import CheckpointProjector, Progress
from turnlog.projections.store import Store


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def on_progress(progress: Progress) -> None:
    emit("progress", applied=progress.applied, remaining=progress.remaining)


async def main(args: argparse.Namespace) -> None:
    topics = TopicSet(prefix=args.prefix, partitions=args.partitions)
    store = Store.open(Path(args.state))
    try:
        projector = CheckpointProjector(args.bootstrap, store, topics, on_progress=on_progress)
        async with projector:
            offsets = store.offsets()
            emit("started", offsets=sum(offsets.values()))
            applied = 0
            if args.follow:
                loop = asyncio.get_running_loop()
                loop.add_signal_handler(signal.SIGTERM, projector.request_stop)
                await projector.follow(poll_ms=100)
            else:
                applied = await projector.catch_up(timeout=120)
            stats = projector.stats
            emit(
                "done",
                applied=applied,
                stats_applied=stats.applied,
                skipped=stats.skipped,
                skipped_at=[list(where) for where in stats.skipped_at],
                digest=store.digest(),
            )
    finally:
        store.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="projector_proc")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--state", required=True)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--follow", action="store_true")
    mode.add_argument("--catch-up", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
