"""Session fixtures: a real Kafka broker, and fresh names per test.

The broker is, in order: the one named by ``TURNLOG_BOOTSTRAP_SERVERS``; a Kafka testcontainer
when a Docker engine answers; else the local Apache Kafka of ``compose/kafka-local`` (started
here and stopped at the end if this session started it). If none can be had the integration
tests fail with the broker's log tail -- they never skip.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KAFKA_SCRIPT = REPO / "compose" / "kafka-local" / "kafka.sh"


def _docker_engine_answers() -> bool:
    """Whether a Docker engine answers a ping (not just whether the client is installed)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return _docker_client_pings()
    path = host.removeprefix("unix://")
    if not Path(path).exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b" 200 " in sock.recv(64)
        except OSError:
            return False


def _docker_client_pings() -> bool:
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError:
        return False
    client = None
    try:
        client = docker.from_env(timeout=3)
        return bool(client.ping())
    except Exception:
        return False
    finally:
        if client is not None:
            client.close()


def _log_tail() -> str:
    home = Path(os.environ.get("KAFKA_LOCAL_HOME", REPO / ".kafka"))
    log = home / "single" / "server.log"
    if not log.exists():
        return "(no broker log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-40:])


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    configured = os.environ.get("TURNLOG_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    if _docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    status = subprocess.run([str(KAFKA_SCRIPT), "status"], capture_output=True, check=False)
    started = status.returncode != 0
    if started:
        run = subprocess.run(
            [str(KAFKA_SCRIPT), "start"], capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            pytest.fail(f"could not start the local Kafka broker:\n{run.stderr}\n{_log_tail()}")
    host = os.environ.get("KAFKA_LOCAL_HOST", "127.0.0.1")
    port = os.environ.get("KAFKA_LOCAL_PORT", "9092")
    try:
        yield f"{host}:{port}"
    finally:
        if started:
            subprocess.run([str(KAFKA_SCRIPT), "stop"], capture_output=True, check=False)


@dataclass(frozen=True)
class Names:
    """Topic prefix, group and application id unique to one test."""

    prefix: str
    group: str
    app: str

    def topic(self, suffix: str) -> str:
        return f"{self.prefix}{suffix}"


@pytest.fixture
def names() -> Names:
    tag = uuid.uuid4().hex[:10]
    return Names(prefix=f"t{tag}.", group=f"g{tag}", app=f"app{tag}")


@pytest.fixture
def broker_log_tail() -> str:
    return _log_tail()
