"""An inbox served by uvicorn in a process of its own, so a test can measure that process's memory
while it is attacked (``/proc/<pid>/status``: ``VmHWM`` is its peak resident size).

Run as ``python -m tests.integration.inbox_server_proc DIR`` from the repository root: it makes
an empty projection in ``DIR``, serves the inbox on a free port of 127.0.0.1, prints
``port <n>`` once it listens, and stops when its stdin closes. Kafka is an address nothing
listens on: nothing the attack sends could be published anyway.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


async def serve(directory: Path) -> None:
    from turnlog import Settings, Turnlog
    from turnlog.inbox.app import create_app
    from turnlog.inbox.auth import ViewerTokens
    from turnlog.inbox.server import InboxServer
    from turnlog.inbox.service import InboxService
    from turnlog.projections.store import Store
    from turnlog.tokens import Keyring, generate_ed25519

    Store.open(directory / "projection").close()
    settings = Settings(
        bootstrap_servers="127.0.0.1:1", state_dir=directory / "state", broker_timeout_seconds=1
    )
    ring = Keyring.ed25519("k", generate_ed25519("k")[0])
    viewers = ViewerTokens(Keyring.ed25519("v", generate_ed25519("v")[0]))
    async with (
        Turnlog(settings, keyring=ring) as tl,
        InboxService(tl, directory / "projection", projection_wait=0) as service,
    ):
        server = InboxServer(create_app(service, viewers), "127.0.0.1", 0)
        await server.start()
        print(f"port {server.port}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
        service.closing.set()
        await server.stop()


if __name__ == "__main__":
    asyncio.run(serve(Path(sys.argv[1])))
