"""Disposable Kafka brokers a test can stop, kill and start again, apart from the shared one.

Outage tests need a broker that goes away and comes back mid-test; doing that to the session's
broker would break every other test running against it. Two function-scoped fixtures start
their own from the same jars (``compose/kafka-local/kafka.sh``, fetched once through Maven like
the shared broker, so they need Java even when ``TURNLOG_BOOTSTRAP_SERVERS`` names a Docker
broker):

``own_broker`` -> :class:`OwnBroker`, one combined broker+controller node.
    ``.bootstrap``; ``await .stop()`` (SIGTERM, controlled shutdown), ``await .kill()``
    (SIGKILL), ``await .start()`` (same data directory, same port; returns once the broker
    answers metadata), ``await .outage(seconds, kill=False)`` (down, held down, up again),
    ``.running``, ``.log_tail()``.
``cluster3`` -> :class:`Cluster3`, three nodes (replication factor 3, ``min.insync.replicas`` 2).
    ``.bootstrap`` (all three), ``await .leader_of(topic, partition)`` (a node id, waiting for
    one to be elected), ``await .stop_node(id)`` / ``await .kill_node(id)`` /
    ``await .start_node(id)``, ``.node_bootstrap(id)``, ``.running_nodes``; ``await .stop()``
    and ``await .start()`` for the whole cluster; ``await .until_in_sync()`` (no partition of
    any topic under-replicated) and ``await .until_fenced(id)`` (a killed node dropped from the
    cluster), what a rolling restart or a hard bounce waits for before the next node.

Every control method is a coroutine: the code under test runs on the same event loop and must
keep running (retrying, logging) while a broker stops or starts. Both fixtures always stop what
they started (the cluster is SIGKILLed: its data is thrown away), and a failing test's report
carries the tail of each of its brokers' logs. With ``TURNLOG_KEEP_BROKER_LOGS=<dir>`` each
fixture copies its brokers' whole ``server.log`` into that directory when it ends, named by
test and port (``bench/soak_outage.py`` reads them). For the report section, register this
module as a plugin in the test module::

    pytest_plugins = ["tests.brokers"]

(PYTEST_DONT_REWRITE: this module has no asserts to rewrite, and the marker lets a test module
both import its classes for annotations and name it in ``pytest_plugins`` -- otherwise pytest
warns that it was imported before it could be rewritten, and warnings are errors here.)

Ports are picked free below Linux's ephemeral range: while a broker is down, a client's own
outgoing socket can be handed the broker's port (a connection to itself), and the restart then
fails with "Address already in use". Starts are kept short: a 512 MiB heap, the JIT at C1 and
a shared class archive (``KAFKA_LOCAL_FAST``), and broker sessions of 2.5 s so a killed node's
old registration expires quickly (a SIGKILLed single node otherwise restarts ~9 s later).
Timings on a shared 2-core machine: a first start 4-6 s, stop + start ~3 s, kill + start ~5 s,
the three-node cluster 6-8 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient

from tests.conftest import KAFKA_SCRIPT
from turnlog.kafka.security import KafkaSecurity, Secret

HOST = "127.0.0.1"
PORT_FLOOR = 20000  # above the shared broker (9092) and start3's defaults (19092-19097)
START_TIMEOUT = 90.0
FAST_PROPERTIES = "broker.heartbeat.interval.ms=500 broker.session.timeout.ms=2500"


class BrokerControlError(AssertionError):
    """A test broker did not start or stop; the message carries kafka.sh's output and log."""


def _ephemeral_floor() -> int:
    try:
        low = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]
        return int(low)
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Java's server sockets set SO_REUSEADDR: a port held only by TIME_WAIT is usable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free now, all below the ephemeral range."""
    top = min(_ephemeral_floor(), 32768) - count
    if top <= PORT_FLOOR:
        raise BrokerControlError(f"no room for {count} ports between {PORT_FLOOR} and {top}")
    rng = random.SystemRandom()
    for _ in range(500):
        base = rng.randrange(PORT_FLOOR, top)
        if all(_bindable(base + i) for i in range(count)):
            return base
    raise BrokerControlError(f"no {count} consecutive free ports found below {top}")


def _tail(path: Path, lines: int) -> str:
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class _Instance:
    """kafka.sh for one data directory: its environment, and running it without blocking."""

    def __init__(self, data: Path, env: dict[str, str]) -> None:
        self.data = data
        self.env = {
            **os.environ,
            "KAFKA_LOCAL_DATA": str(data),
            "KAFKA_LOCAL_HOST": HOST,
            "KAFKA_HEAP_OPTS": "-Xmx512m -Xms128m",
            "KAFKA_LOCAL_FAST": "1",
            "KAFKA_LOCAL_PROPERTIES": FAST_PROPERTIES,
            "KAFKA_START_TIMEOUT": str(int(START_TIMEOUT)),
            **env,
        }

    async def script(self, *args: str, logs: Iterable[Path] = ()) -> str:
        proc = await asyncio.create_subprocess_exec(
            str(KAFKA_SCRIPT),
            *args,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        text = out.decode(errors="replace")
        if proc.returncode != 0:
            tails = "\n".join(f"--- {log}:\n{_tail(log, 60)}" for log in logs)
            raise BrokerControlError(
                f"kafka.sh {' '.join(args)} failed (rc {proc.returncode}):\n{text}\n{tails}"
            )
        return text


async def _metadata(bootstrap: str) -> tuple[set[int], AIOKafkaClient]:
    """The ids of the brokers a fresh client is told about, and that client (to close)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await client.bootstrap()
        await client.force_metadata_update()
    except BaseException:
        await client.close()
        raise
    return {b.nodeId for b in client.cluster.brokers()}, client


async def _until(
    what: str, check: Callable[[], Awaitable[bool]], timeout: float = START_TIMEOUT
) -> None:
    """Poll ``check`` until it returns true; fail naming ``what`` and the last error."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while loop.time() < deadline:
        try:
            if await check():
                return
        except Exception as exc:  # the broker is still coming up
            last = exc
        await asyncio.sleep(0.2)
    raise BrokerControlError(f"{what} not reached within {timeout:.0f}s (last error: {last!r})")


class OwnBroker:
    """One single-node broker of one test: its own data directory and ports."""

    def __init__(self, data: Path, port: int) -> None:
        self.port = port
        self.bootstrap = f"{HOST}:{port}"
        self._kafka = _Instance(data, {"KAFKA_LOCAL_PORT": str(port)})
        self.log_path = data / "single" / "server.log"
        self.running = False

    @property
    def name(self) -> str:
        return f"own broker {self.bootstrap}"

    def log_tail(self, lines: int = 60) -> str:
        return _tail(self.log_path, lines)

    async def start(self) -> None:
        """Start (or restart) on the same port and data; return once it answers metadata."""
        await self._kafka.script("start", logs=[self.log_path])
        self.running = True

        async def answers() -> bool:
            brokers, client = await _metadata(self.bootstrap)
            await client.close()
            return bool(brokers)

        await _until(f"{self.name} answering metadata", answers)

    async def stop(self) -> None:
        """SIGTERM: a controlled shutdown, as in a rolling restart."""
        self.running = False
        await self._kafka.script("stop", logs=[self.log_path])

    async def kill(self) -> None:
        """SIGKILL: no shutdown at all; the next start recovers the logs."""
        self.running = False
        await self._kafka.script("kill", logs=[self.log_path])

    async def outage(self, seconds: float, *, kill: bool = False) -> None:
        """Take the broker away, keep it away for ``seconds``, and bring it back."""
        await (self.kill() if kill else self.stop())
        await asyncio.sleep(seconds)  # holds the outage; no condition is awaited here
        await self.start()


class Cluster3:
    """A three-node cluster of one test (``kafka.sh start3`` in its own data directory)."""

    def __init__(self, data: Path, first_port: int) -> None:
        self.first_port = first_port
        self._kafka = _Instance(data, {"KAFKA_LOCAL_PORT3": str(first_port)})
        self._data = data
        self.running_nodes: set[int] = set()

    @property
    def name(self) -> str:
        return f"cluster3 {self.bootstrap}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.node_bootstrap(i) for i in (1, 2, 3))

    def node_bootstrap(self, node_id: int) -> str:
        return f"{HOST}:{self.first_port + 2 * (node_id - 1)}"

    def log_path(self, node_id: int) -> Path:
        return self._data / "cluster3" / f"node-{node_id}" / "server.log"

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(
            f"--- node {i} ({self.log_path(i)}):\n{_tail(self.log_path(i), lines)}"
            for i in (1, 2, 3)
        )

    def _logs(self) -> list[Path]:
        return [self.log_path(i) for i in (1, 2, 3)]

    def _live_bootstrap(self) -> str:
        return ",".join(self.node_bootstrap(i) for i in sorted(self.running_nodes)) or (
            self.bootstrap
        )

    async def _until_registered(self, nodes: set[int]) -> None:
        async def registered() -> bool:
            brokers, client = await _metadata(self._live_bootstrap())
            await client.close()
            return nodes <= brokers

        await _until(f"{self.name}: nodes {sorted(nodes)} in the metadata", registered)

    async def start(self) -> None:
        await self._kafka.script("start3", logs=self._logs())
        self.running_nodes = {1, 2, 3}
        await self._until_registered({1, 2, 3})

    async def stop(self) -> None:
        """SIGTERM all three at once (one by one, the last would wait for a lost quorum)."""
        self.running_nodes = set()
        await self._kafka.script("stop3", logs=self._logs())

    async def destroy(self) -> None:
        """SIGKILL all three: the data is thrown away, so no shutdown is worth waiting for."""
        self.running_nodes = set()
        await asyncio.gather(
            *(self._kafka.script("node3", "kill", str(i), logs=self._logs()) for i in (1, 2, 3))
        )

    def _check(self, node_id: int) -> str:
        if node_id not in (1, 2, 3):
            raise ValueError(f"cluster3 has nodes 1, 2 and 3, not {node_id!r}")
        return str(node_id)

    async def stop_node(self, node_id: int) -> None:
        """SIGTERM one node: a controlled shutdown moves its leaderships away first."""
        self.running_nodes.discard(node_id)
        await self._kafka.script("node3", "stop", self._check(node_id), logs=self._logs())

    async def kill_node(self, node_id: int) -> None:
        """SIGKILL one node: its partitions are leaderless until the session times out."""
        self.running_nodes.discard(node_id)
        await self._kafka.script("node3", "kill", self._check(node_id), logs=self._logs())

    async def start_node(self, node_id: int) -> None:
        """Start one node again; return once the cluster lists it (registered, unfenced)."""
        await self._kafka.script("node3", "start", self._check(node_id), logs=self._logs())
        self.running_nodes.add(node_id)
        await self._until_registered({node_id})

    async def leader_of(self, topic: str, partition: int, timeout: float = 60.0) -> int:
        """The node id leading ``topic[partition]`` now, waiting while none is elected."""
        tp = TopicPartition(topic, partition)
        found: list[int] = []

        async def elected() -> bool:
            _, client = await _metadata(self._live_bootstrap())
            try:
                await client.set_topics([topic])
                leader = client.cluster.leader_for_partition(tp)
            finally:
                await client.close()
            if isinstance(leader, int) and leader in self.running_nodes:
                found.append(leader)
                return True
            return False

        await _until(f"{self.name}: a leader of {topic}[{partition}]", elected, timeout)
        return found[-1]

    async def until_in_sync(self, timeout: float = START_TIMEOUT) -> None:
        """Return once no partition of any topic, internal ones included, is under-replicated:
        each has a leader and its whole replica set in its ISR (a restarted node has caught up)."""

        async def in_sync() -> bool:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self._live_bootstrap(), request_timeout_ms=5000
            )
            await admin.start()
            try:
                topics = await admin.describe_topics()
            finally:
                await admin.close()
            behind = [
                f"{t['topic']}[{p['partition']}] isr {sorted(p['isr'])} of {sorted(p['replicas'])}"
                for t in topics
                for p in t["partitions"]
                if p["error_code"] != 0 or p["leader"] < 0 or set(p["isr"]) != set(p["replicas"])
            ]
            if behind:  # reported as the last error if it never clears
                raise BrokerControlError(f"{len(behind)} under-replicated, e.g. {behind[:3]}")
            return bool(topics)

        await _until(f"{self.name}: every partition in sync", in_sync, timeout)

    async def until_fenced(self, node_id: int, timeout: float = START_TIMEOUT) -> None:
        """Return once the cluster no longer lists ``node_id``: the controller has fenced it
        (its broker session expired after a SIGKILL) and moved its leaderships away."""

        async def fenced() -> bool:
            brokers, client = await _metadata(self._live_bootstrap())
            await client.close()
            return node_id not in brokers

        await _until(f"{self.name}: node {self._check(node_id)} fenced", fenced, timeout)


class SecureBroker:
    """A single node of this test alone with a SASL_SSL listener (``kafka.sh start-secure``):
    a throw-away CA, SCRAM users made at format, the StandardAuthorizer on, admin a super user."""

    ADMIN_PASSWORD = "admin-" + os.urandom(6).hex()

    def __init__(
        self, data: Path, port: int, users: Iterable[str], env: Mapping[str, str] | None = None
    ) -> None:
        self.port = port
        self.passwords = {user: f"{user}-{os.urandom(6).hex()}" for user in users}
        listed = " ".join(f"{u}:{p}" for u, p in self.passwords.items())
        self._kafka = _Instance(
            data,
            {
                "KAFKA_LOCAL_PORT": str(port),
                "KAFKA_LOCAL_USERS": listed,
                "KAFKA_LOCAL_ADMIN_PASSWORD": self.ADMIN_PASSWORD,
                **(env or {}),
            },
        )
        self.passwords["admin"] = self.ADMIN_PASSWORD
        self.dir = data / "secure"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.dir / "tls" / "ca.pem"

    def log_tail(self, lines: int = 60) -> str:
        return _tail(self.dir / "server.log", lines)

    @property
    def oauth_bootstrap(self) -> str:
        """The OAUTHBEARER listener (with ``KAFKA_LOCAL_OAUTH_JWKS`` in ``env``)."""
        return f"{HOST}:{self.port + 3}"

    @property
    def mtls_bootstrap(self) -> str:
        """The mutual-TLS listener: a client certificate of the test CA, its CN the principal."""
        return f"{HOST}:{self.port + 2}"

    def mtls_security(self, user: str) -> KafkaSecurity:
        tls = self.dir / "tls"
        return KafkaSecurity(
            protocol="SSL",
            ca_file=self.ca_file,
            cert_file=tls / f"client-{user}.crt",
            key_file=tls / f"client-{user}.key",
            source=f"test certificate of {user}",
        )

    def properties(self, user: str, path: Path) -> Path:
        """A Java client.properties for ``user`` (what the cluster's Java tools would use)."""
        path.write_text(
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{self.passwords[user]}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={self.ca_file}\n"
        )
        return path

    def security(self, user: str) -> KafkaSecurity:
        return KafkaSecurity(
            protocol="SASL_SSL",
            mechanism="SCRAM-SHA-512",
            username=user,
            password=Secret(self.passwords[user]),
            ca_file=self.ca_file,
            source=f"test user {user}",
        )

    async def start(self) -> None:
        await self._kafka.script("start-secure", logs=[self.dir / "server.log"])

    async def stop(self) -> None:
        await self._kafka.script("stop-secure")

    async def grant(self, lines: Iterable[str]) -> None:
        """Create the ACLs of ``lines`` (``turnlog acls --plain``), as admin."""
        acl_file = self.dir / f"acls-{os.urandom(4).hex()}.txt"
        acl_file.write_text("\n".join(lines) + "\n")
        await self._kafka.script("acls", str(acl_file))


# -- fixtures ----------------------------------------------------------------------------------

_BROKERS = pytest.StashKey[list[OwnBroker | Cluster3]]()


def _register(request: pytest.FixtureRequest, broker: OwnBroker | Cluster3) -> None:
    request.node.stash.setdefault(_BROKERS, []).append(broker)


def _keep_logs(request: pytest.FixtureRequest, logs: dict[str, Path]) -> None:
    """Copy each log to ``TURNLOG_KEEP_BROKER_LOGS`` (if set) as ``<test>-<label>-server.log``."""
    keep = os.environ.get("TURNLOG_KEEP_BROKER_LOGS")
    if not keep:
        return
    into = Path(keep)
    into.mkdir(parents=True, exist_ok=True)
    test = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.name)
    for label, log in logs.items():
        if log.exists():
            shutil.copyfile(log, into / f"{test}-{label}-server.log")


@pytest.fixture
async def own_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[OwnBroker]:
    """A single-node broker of this test alone, started; stopped at the end whatever happens."""
    broker: OwnBroker | None = None
    for attempt in range(3):  # a port can be taken between the check and the bind
        broker = OwnBroker(tmp_path_factory.mktemp("own-kafka"), free_ports(2))
        _register(request, broker)
        try:
            await broker.start()
            break
        except BrokerControlError:
            with contextlib.suppress(BrokerControlError):
                await broker.kill()
            if attempt == 2:
                raise
    if broker is None:  # unreachable: range(3) ran at least once
        raise BrokerControlError("no broker was made")
    try:
        yield broker
    finally:
        try:
            await broker.stop()
        finally:
            _keep_logs(request, {str(broker.port): broker.log_path})


@pytest.fixture
async def cluster3(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster3]:
    """A three-node cluster of this test alone, started; stopped at the end whatever happens."""
    cluster = Cluster3(tmp_path_factory.mktemp("cluster3-kafka"), free_ports(6))
    _register(request, cluster)
    try:
        await cluster.start()
        yield cluster
    finally:
        try:
            await cluster.destroy()
        finally:
            _keep_logs(
                request, {f"{cluster.first_port}-node{i}": cluster.log_path(i) for i in (1, 2, 3)}
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for broker in item.stash.get(_BROKERS, []):
            report.sections.append((f"{broker.name} log tail", broker.log_tail()))
    return report


#: The principals of the secured broker's tests, one per role of ``turnlog acls``.
SECURE_USERS = ("publisher", "agent", "worker", "reader", "projector", "auditor")


@pytest.fixture
async def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SecureBroker]:
    """A SASL_SSL broker with ACLs of this test alone, started; stopped at the end."""
    broker = SecureBroker(tmp_path_factory.mktemp("secure-kafka"), free_ports(3), SECURE_USERS)
    try:
        await broker.start()
        yield broker
    finally:
        await broker.stop()
