"""Two regions on one machine for the region tests: two single-node clusters of the test's own
(``tests.brokers.OwnBroker``) and a MirrorMaker 2 between them (``compose/kafka-local/mirror.sh``,
its own jars fetched through Maven once, like the brokers')."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from tests.brokers import HOST, BrokerControlError, free_ports

MIRROR_SCRIPT = Path(__file__).resolve().parents[2] / "compose" / "kafka-local" / "mirror.sh"


class Mirror:
    """One MirrorMaker process of one test, mirroring ``source`` to ``target``."""

    def __init__(self, data: Path, source: str, target: str, prefix: str, group: str) -> None:
        self.data = data
        self.log_path = data / "mirror.log"
        self.env = {
            **os.environ,
            "MIRROR_DATA": str(data),
            "MIRROR_SOURCE": source,
            "MIRROR_TARGET": target,
            "MIRROR_TOPIC_PREFIX": prefix,
            "MIRROR_GROUPS": group,
            "MIRROR_SYNC_SECONDS": "1",
            "MIRROR_REST_PORT": str(free_ports(1)),
            "KAFKA_LOCAL_HOST": HOST,
            "KAFKA_LOCAL_FAST": "1",
            "MIRROR_HEAP_OPTS": "-Xmx384m -Xms128m",
            "MIRROR_START_TIMEOUT": "120",
        }

    async def _script(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            str(MIRROR_SCRIPT), *args, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        text = out.decode(errors="replace")
        if proc.returncode != 0:
            raise BrokerControlError(
                f"mirror.sh {' '.join(args)} failed (rc {proc.returncode}):\n{text}\n"
                f"--- {self.log_path}:\n{self.log_tail()}"
            )
        return text

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def start(self) -> None:
        await self._script("start")

    def freeze(self) -> None:
        """SIGSTOP the MirrorMaker process: a mirror that has stalled (``kill`` ends it)."""
        os.kill(int((self.data / "mirror.pid").read_text()), signal.SIGSTOP)

    async def kill(self) -> None:
        await self._script("kill")

    async def stop(self) -> None:
        await self._script("stop")
