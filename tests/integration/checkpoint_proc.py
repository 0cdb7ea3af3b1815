"""A process of its own for the checkpoint service's tests (settings from ``TURNLOG_*`` alone).

python -m tests.integration.checkpoint_proc read THREAD
    prints one JSON line: the thread's checkpoint ids as ``tl.checkpoints`` lists them
    (``listed``) and its ``latest``, read from the log by a process that wrote none of them.
python -m tests.integration.checkpoint_proc crash THREAD CHECKPOINT
    pauses CHECKPOINT of THREAD unfinalized (the crash window), prints one JSON line
    (``token_id``, ``partition``, ``offset``) and dies by SIGKILL before it finalizes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from tests.deployment import REQUEST, sample_checkpoint
from turnlog import Settings, Turnlog


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def read(thread: str) -> None:
    async with Turnlog(Settings.from_env()) as tl:
        listed = await tl.checkpoints.list_checkpoints(thread)
        latest = await tl.checkpoints.latest(thread)
        emit(
            listed=[ref.checkpoint_id for ref in listed],
            latest=None if latest is None else latest.checkpoint_id,
        )


async def crash(thread: str, checkpoint: str) -> None:
    tl = Turnlog(Settings.from_env())
    cp = sample_checkpoint(thread, checkpoint_id=checkpoint)
    paused = await tl.pause(cp, request=REQUEST, finalized=False)
    emit(
        token_id=paused.pause.token_id,
        token=paused.token,
        partition=paused.partition,
        offset=paused.offset,
    )
    os.kill(os.getpid(), signal.SIGKILL)  # the crash: nothing closed, nothing finalized


def main() -> None:
    verb, *args = sys.argv[1:]
    asyncio.run(read(*args) if verb == "read" else crash(*args))


if __name__ == "__main__":
    main()
