"""A resume worker -- turnlog's, or the raw aiokafka loop it is measured against -- in its own
process.

Each measured worker runs in a fresh interpreter, so the harness's own heap, publisher or reader
never share its event loop or its garbage collector, and its peak RSS is its own. The child
reports JSON lines on stdout with ``time.monotonic()`` stamps (one clock across processes):
``start`` (just before the worker starts), ``owned`` (every partition fenced and restored),
``owns`` (turnlog's worker: how many partitions it owns now, at every change), ``progress``
(a count threshold crossed, with VmHWM), ``done`` (the expected count processed and
committed) and ``exit``.

The raw loop has the worker's structure and settings and none of its work: one consumer group
over the answers topic (read_committed, same batch size and poll timeout), one transactional
producer per owned partition, and per fetched partition batch one transaction holding two
precomputed output records per answer plus the input offset. Its ``raw+verify`` variant also
checks the Ed25519 signature of a pause token (the sample answer's, signed with the
deployment's key) once per record, with the check the worker makes (libsodium), its key loaded
once: the one piece of work no correct resume can skip, and so the fair floor to hold turnlog
against.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from bench.common import (
    group_options,
    raw_read_to_end,
    reader_consumer,
    seal_options,
    wire_options,
)
from bench.measure import REPO, Profiling, memory_kb
from turnlog.kafka import clients

POLL = 0.002  # how often the child checks its worker's counters, in seconds


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


class Progress:
    """Counts against the thresholds the harness asked to hear about."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.expect: int = config.get("expect", 0)
        self.marks: list[int] = sorted(config.get("report_at", []))
        self.done = False

    def update(self, processed: int) -> bool:
        """Report crossed thresholds; True once ``expect`` (if any) is reached."""
        while self.marks and processed >= self.marks[0]:
            emit("progress", mark=self.marks.pop(0), processed=processed, **memory_kb())
        if self.expect and not self.done and processed >= self.expect:
            self.done = True
            emit("done", processed=processed, **memory_kb())
            return True
        return False


# --- turnlog's worker ------------------------------------------------------------------------


class Timings:
    """Wall time of each call of a few worker steps (``timings`` in the config): what an
    answer's latency is made of -- a round (fetch wait, handling, transactions), the handling,
    one transaction, the expiry sweep (and the part of it holding the worker lock)."""

    STEPS = {
        "round": ("turnlog.consumers.worker", "ResumeWorker", "_round"),
        # One partition batch's handling (the worker's step: the handler's classes may be
        # compiled, and a compiled class's methods cannot be wrapped).
        "handle": ("turnlog.consumers.worker", "ResumeWorker", "_prepare"),
        "transaction": ("turnlog.consumers.worker", "ResumeWorker", "_commit"),
        "sweep": ("turnlog.consumers.worker", "ResumeWorker", "_expire"),
        "sweep_locked": ("turnlog.consumers.worker", "ResumeWorker", "_expire_due"),
    }

    #: The raw loop's one step: a partition batch's transaction, from begin to commit.
    RAW_STEPS = {"transaction": (__name__, "RawLoop", "_process")}

    def __init__(self, steps: dict[str, tuple[str, str, str]] | None = None) -> None:
        steps = self.STEPS if steps is None else steps
        self.samples: dict[str, list[float]] = {name: [] for name in steps}
        import importlib

        for name, (module, cls, method) in steps.items():
            owner = getattr(importlib.import_module(module), cls)
            if hasattr(owner, method):  # an older worker (a before/after run) may lack one
                setattr(owner, method, self._timed(getattr(owner, method), self.samples[name]))

    @staticmethod
    def _timed(function: Any, into: list[float]) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await function(*args, **kwargs)
            finally:
                into.append(time.perf_counter() - began)

        return timed

    def time_calls(self, name: str, owner: Any, method: str) -> None:
        """Also time ``owner.method`` (an instance's, such as the worker's consumer)."""
        into = self.samples.setdefault(name, [])
        setattr(owner, method, self._timed(getattr(owner, method), into))

    def summary(self) -> dict[str, dict[str, float]]:
        found = {}
        for name, values in self.samples.items():
            if values:
                ordered = sorted(values)
                found[name] = {
                    "calls": len(ordered),
                    "p50_ms": ordered[len(ordered) // 2] * 1000,
                    "p99_ms": ordered[max(0, -(-len(ordered) * 99 // 100) - 1)] * 1000,
                    "max_ms": ordered[-1] * 1000,
                    "total_s": sum(ordered),
                }
        return found


async def run_turnlog(config: dict[str, Any]) -> None:
    from turnlog.consumers.worker import ResumeWorker
    from turnlog.contracts.interactions import default_interactions
    from turnlog.projections.store import Store
    from turnlog.settings import Settings
    from turnlog.tokens import Keyring, TokenVerifier

    settings = Settings(
        bootstrap_servers=config["bootstrap"],
        topic_prefix=config["prefix"],
        application_id=config["app_id"],
        state_dir=Path(config["state_dir"]),
        partitions=config["partitions"],
        commit_interval_ms=config["commit_interval_ms"],
        **wire_options(),  # type: ignore[arg-type]
        **group_options(),  # TURNLOG_SESSION_TIMEOUT_MS, as `turnlog worker` reads it
        **seal_options(),  # TURNLOG_SEAL, as `turnlog worker` reads it
    )
    if "ledger_keep_seconds" in config:
        settings = settings.with_(ledger_keep_seconds=config["ledger_keep_seconds"])
    keyring = Keyring.ed25519(config["kid"], config["private_pem"])
    verifier = TokenVerifier(
        keyring,
        issuer=settings.issuer,
        audience=settings.audience,
        leeway=timedelta(seconds=settings.token_leeway_seconds),
    )
    timings = Timings() if config.get("timings") else None
    store = Store.open(settings.state_dir)
    worker = ResumeWorker(
        settings,
        store=store,
        verifier=verifier,
        interactions=default_interactions(),
        max_batch=config["max_batch"],
        expiry_interval=config.get("expiry_interval", 1.0),
        standbys=config.get("standbys", 0),
    )
    if timings is not None:  # the fetch wait, on its own
        timings.time_calls("fetch", worker._consumer, "getmany")
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.request_stop)
    progress = Progress(config)
    profiling = Profiling(config.get("profile"))
    emit("start")
    task = asyncio.create_task(worker.run())
    owned = False
    owns = 0
    current = False
    retiring: int = config.get("expect_retired", 0)
    try:
        while not task.done():
            await asyncio.sleep(POLL)
            if len(worker.owned) != owns:
                owns = len(worker.owned)
                emit("owns", count=owns)  # for a group of workers sharing the partitions
            if worker.standby_current != current:
                current = worker.standby_current
                if current:  # its copies of the partitions it stands by reached the log's end
                    emit("standby_current", standby=worker.standby, owned=worker.owned)
            if not owned and owns == config["partitions"]:
                owned = True
                emit("owned", restored=worker.stats.restored_records, **memory_kb())
                profiling.start()
            stats = worker.stats
            if retiring and stats.retired >= retiring:
                retiring = 0  # said once: the ledger scenario's count of retired rows
                emit("retired", count=stats.retired, **memory_kb())
                worker.request_stop()
            if progress.update(stats.resumed + stats.rejected + stats.duplicates):
                profiling.stop()
                worker.request_stop()
        await task
    finally:
        profiling.stop()
        store.close()
    extra = {"timings": timings.summary()} if timings is not None else {}
    emit("exit", stats=asdict(worker.stats), **extra, **memory_kb())


# --- the raw loop ----------------------------------------------------------------------------


class RawLoop:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        prefix = config["prefix"]
        self.answers = f"{prefix}answers"
        self.group = config["app_id"]
        self.consumed_topic = config.get("consumptions_topic", f"{prefix}consumptions")
        self.resumed_topic = config.get("resumed_topic", f"{prefix}resumed")
        self.consumed_value = bytes.fromhex(config["consumed_hex"])
        self.resumed_value = bytes.fromhex(config["resumed_hex"])
        self.verify = _signature_check(config)
        self.producers: dict[int, AIOKafkaProducer] = {}
        self.restored = 0
        self.processed = 0
        # As in the worker: a batch fetched while partitions are being taken waits for them.
        self.lock = asyncio.Lock()
        self.consumer = clients.consumer(
            config["bootstrap"],
            group_id=self.group,
            client_id="bench-raw-loop",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=config["max_batch"],
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
            rebalance_timeout_ms=60000,
            max_poll_interval_ms=120000,
        )

    async def acquire(self, partitions: list[int]) -> None:
        async with self.lock:
            await self._acquire(partitions)

    async def _acquire(self, partitions: list[int]) -> None:
        for p in sorted(partitions):
            producer = clients.producer(
                self.config["bootstrap"],
                transactional_id=f"{self.group}.raw.{self.answers}.{p}",
                transaction_timeout_ms=30000,
                linger_ms=5,
                max_batch_size=256 * 1024,
                client_id=f"bench-raw-{p}",
            )
            await producer.start()  # fences, like PartitionOwner.fence
            if self.config.get("restore"):
                prefix = self.config["prefix"]
                reader = reader_consumer(self.config["bootstrap"], f"bench-raw-restore-{p}")
                await reader.start()
                try:
                    tps = [
                        TopicPartition(f"{prefix}pauses", p),
                        TopicPartition(f"{prefix}consumptions", p),
                    ]
                    self.restored += await raw_read_to_end(reader, tps)
                finally:
                    await reader.stop()
            self.producers[p] = producer

    async def release(self, partitions: list[int]) -> None:
        async with self.lock:
            await self._release(partitions)

    async def _release(self, partitions: list[int]) -> None:
        for p in partitions:
            producer = self.producers.pop(p, None)
            if producer is not None:
                await producer.stop()

    async def run(self, stop: asyncio.Event) -> None:
        loop = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
                await loop.release([tp.partition for tp in revoked])

            async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
                await loop.acquire([tp.partition for tp in assigned])

        await self.consumer.start()
        self.consumer.subscribe([self.answers], listener=Listener())
        timeout = self.config["commit_interval_ms"]
        try:
            while not stop.is_set():
                batch = await self.consumer.getmany(timeout_ms=timeout)
                async with self.lock:
                    for tp, records in batch.items():
                        if records and tp.partition in self.producers:
                            await self._process(tp, records)
        finally:
            await self.release(list(self.producers))
            await self.consumer.stop()

    async def _process(self, tp: TopicPartition, records: list[Any]) -> None:
        producer = self.producers[tp.partition]
        p = tp.partition
        await producer.begin_transaction()
        verify = self.verify
        for record in records:
            if verify is not None:
                verify()
            thread = record.key.partition(b"\x00")[0]
            await producer.send(
                self.consumed_topic, self.consumed_value, key=record.key, partition=p
            )
            await producer.send(self.resumed_topic, self.resumed_value, key=thread, partition=p)
        await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, self.group)
        await producer.commit_transaction()
        self.processed += len(records)


def _signature_check(config: dict[str, Any]) -> Any:
    """For ``raw+verify``: a call that verifies the sample token's signature (raising if it does
    not verify); ``None`` for the plain raw loop. The check is the one the worker makes
    (libsodium through PyNaCl, ``TokenKey.check``), so the baseline is never handicapped by a
    slower primitive than turnlog's own."""
    token = config.get("token")
    if not token:
        return None
    import nacl.signing
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_private_key,
    )

    private = load_pem_private_key(config["private_pem"].encode(), password=None)
    if not isinstance(private, Ed25519PrivateKey):
        raise TypeError("the bench key is an Ed25519 key")
    public = nacl.signing.VerifyKey(
        private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    )
    header, payload, signature = token.split(".")
    signing_input = f"{header}.{payload}".encode("ascii")
    raw_signature = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    public.verify(signing_input, raw_signature)  # once up front: a wrong sample fails loudly

    def verify() -> None:
        public.verify(signing_input, raw_signature)

    return verify


async def run_raw(config: dict[str, Any]) -> None:
    timings = Timings(Timings.RAW_STEPS) if config.get("timings") else None
    raw = RawLoop(config)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    progress = Progress(config)
    profiling = Profiling(config.get("profile"))
    emit("start")
    task = asyncio.create_task(raw.run(stop))
    owned = False
    while not task.done():
        await asyncio.sleep(POLL)
        if not owned and len(raw.producers) == config["partitions"]:
            owned = True
            emit("owned", restored=raw.restored, **memory_kb())
            profiling.start()
        if progress.update(raw.processed):
            profiling.stop()
            stop.set()
    await task
    profiling.stop()
    extra = {"timings": timings.summary()} if timings is not None else {}
    stats = {"resumed": raw.processed, "restored_records": raw.restored}
    emit("exit", stats=stats, **extra, **memory_kb())


# --- the harness side ------------------------------------------------------------------------


class WorkerProcess:
    """Start a child running :func:`main` with ``config`` and read its events."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.events: list[dict[str, Any]] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="turnlog-bench-proc-")
        self._log = Path(self._dir.name) / "stderr.log"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("not started")
        return self._proc.pid

    async def start(self) -> None:
        path = Path(self._dir.name) / "config.json"
        path.write_text(json.dumps(self.config))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with open(self._log, "wb") as log:  # noqa: ASYNC230 - once, before the child starts
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.workerproc",
                str(path),
                cwd=REPO,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )

    async def wait_event(self, name: str, timeout: float = 300.0, **match: Any) -> dict[str, Any]:
        """The first event called ``name`` whose fields equal ``match``, waiting for it."""

        def wanted(event: dict[str, Any]) -> bool:
            return event["event"] == name and all(event.get(k) == v for k, v in match.items())

        for event in self.events:
            if wanted(event):
                return event
        if self._proc is None or self._proc.stdout is None:
            raise RuntimeError("not started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"worker event {name!r} not seen in {timeout:.0f}s{self.tail()}")
            try:
                line = await asyncio.wait_for(self._proc.stdout.readline(), remaining)
            except TimeoutError:
                continue
            if not line:
                await self._proc.wait()
                raise RuntimeError(
                    f"worker exited ({self._proc.returncode}) before {name!r}{self.tail()}"
                )
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a library printing to stdout
            self.events.append(event)
            if wanted(event):
                return event

    def tail(self) -> str:
        try:
            lines = self._log.read_text(errors="replace").splitlines()[-25:]
        except OSError:
            return ""
        return "\n--- worker stderr ---\n" + "\n".join(lines) if lines else ""

    async def kill(self) -> None:
        """SIGKILL: the crash a standby takes over from (no commit, no leaving the group)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()

    async def stop(self, timeout: float = 60.0) -> dict[str, Any] | None:
        """Ask the child to stop (SIGTERM: finish the batch, leave the group) and reap it."""
        proc = self._proc
        if proc is None:
            return None
        exit_event = None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                exit_event = await self.wait_event("exit", timeout)
            except (TimeoutError, RuntimeError):
                exit_event = None
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        else:
            exit_event = next((e for e in self.events if e["event"] == "exit"), None)
        self._proc = None
        self._dir.cleanup()
        return exit_event


async def _child(config: dict[str, Any]) -> None:
    if config["mode"] == "turnlog":
        await run_turnlog(config)
    else:
        await run_raw(config)


def main() -> None:
    asyncio.run(_child(json.loads(Path(sys.argv[1]).read_text())))


if __name__ == "__main__":
    main()
