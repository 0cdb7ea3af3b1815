"""Resume workers and answer publishers as separate OS processes, for the chaos tests.

Run as ``python -m tests.integration.worker_proc worker|publish|publish-many ...`` from the
repository root.
Every process loads the same key pair from a keys directory (written once by the test with
:func:`turnlog.tokens.write_keypair`), so a token issued in the test process verifies in each of
them -- exactly as separate deployments of one application would share keys.

The parent side (:class:`Proc`, :func:`spawn`) lives here too, so the command lines are written in
one place. A worker process exits cleanly on SIGTERM (it commits, leaves the group and closes its
store); SIGKILL is the crash the tests are about.

Transaction marks (``--marks FILE``): a worker appends ``<unix time> open|committed|failed
<partition>`` lines around every ``commit_transaction`` of its partition producers. ``open`` is
written when the transaction's records and input offsets are on the broker and its commit has not
been asked for yet, so a parent that SIGKILLs a worker while one of its transactions is open kills
it inside that transaction -- that is how the chaos tests aim their kills -- and the marks of all
workers show when the group committed anything at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
#: Logged by a worker process once SIGTERM stops it cleanly (before that, SIGTERM kills it).
READY = "worker ready: SIGTERM now stops it cleanly"


# -- the child side ---------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> Any:
    from turnlog.settings import Settings

    return Settings(
        bootstrap_servers=args.bootstrap,
        topic_prefix=args.prefix,
        application_id=args.app,
        partitions=args.partitions,
        commit_interval_ms=args.commit_interval_ms,
        state_dir=Path(args.state) if getattr(args, "state", None) else Path("unused"),
    )


def _verifier(settings: Any, keys: str) -> Any:
    from turnlog.tokens import Keyring, TokenVerifier

    return TokenVerifier(
        Keyring.from_directory(keys),
        issuer=settings.issuer,
        audience=settings.audience,
        leeway=timedelta(seconds=settings.token_leeway_seconds),
    )


async def _run_worker(args: argparse.Namespace) -> None:
    from turnlog.consumers.worker import ResumeWorker
    from turnlog.contracts.interactions import default_interactions
    from turnlog.projections.store import Store

    if args.commit_delay or args.marks:
        _delay_commits(args.commit_delay, args.marks)
    settings = _settings(args)
    store = Store.open(args.state)
    worker = ResumeWorker(
        settings,
        store=store,
        verifier=_verifier(settings, args.keys),
        interactions=default_interactions(),
        session_timeout_ms=args.session_timeout_ms,
        expiry_interval=args.expiry_interval,
        instance_id=args.instance_id,
        standbys=args.standby,
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.request_stop)
    logging.getLogger("worker_proc").info(READY)
    try:
        await worker.run()
    finally:
        store.close()
    if args.stats:
        _write(args.stats, json.dumps(asdict(worker.stats)))


def _delay_commits(most: float, marks: str | None) -> None:
    """Hold every transaction open a random while after its records are written, so that a
    SIGKILL lands inside open transactions often rather than by rare luck (test-side chaos,
    not a change of the worker: the records and the commit are the worker's own), and write the
    transaction marks of the module docstring."""
    from aiokafka import AIOKafkaProducer

    commit = AIOKafkaProducer.commit_transaction
    fd = os.open(marks, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if marks else None

    def mark(kind: str, producer: AIOKafkaProducer) -> None:
        if fd is not None:
            # One write(2) per line: appended whole, and kept by the kernel if we are killed.
            partition = producer._txn_manager.transactional_id.rsplit(".", 1)[-1]
            os.write(fd, f"{time.time():.3f} {kind} {partition}\n".encode())

    async def delayed(self: AIOKafkaProducer) -> None:
        mark("open", self)
        try:
            if most:
                await asyncio.sleep(random.uniform(0, most))
            await commit(self)
        except BaseException:
            mark("failed", self)
            raise
        mark("committed", self)

    AIOKafkaProducer.commit_transaction = delayed  # type: ignore[method-assign]


def _write(path: str, text: str) -> None:
    Path(path).write_text(text)


def _read(path: str) -> str:
    return Path(path).read_text()


def _exists(path: str) -> bool:
    return Path(path).exists()


async def _run_publisher(args: argparse.Namespace) -> None:
    from turnlog.producers.answers import AnswerPublisher

    settings = _settings(args)
    async with AnswerPublisher(settings, _verifier(settings, args.keys)) as publisher:
        _write(args.ready, "ready")
        # Wait for the parent's go, so that every publisher sends at the same moment.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not _exists(args.go):
            if loop.time() > deadline:
                raise TimeoutError("no go signal within 60 s")
            await asyncio.sleep(0.005)
        sent = await publisher.publish(
            args.token,
            json.loads(args.response),
            answer_id=args.answer_id,
            **json.loads(args.axes),
        )
    print(json.dumps({"answer_id": sent.answer_id, "partition": sent.partition}))


async def _run_publish_many(args: argparse.Namespace) -> None:
    """Publish the answers listed in the JSON file ``--answers`` (objects with token, axes,
    response, answer_id), ``--chunk`` at a time with ``--pace`` seconds between chunks, after
    the parent's go: a second client answering alongside the test's own (competing answers).
    A publish that fails (the broker is away) is retried with the same answer id until it is
    acknowledged -- the publisher's documented way, and a duplicate is harmless."""
    from turnlog.producers.answers import AnswerPublisher

    items = json.loads(_read(args.answers))
    settings = _settings(args)
    loop = asyncio.get_running_loop()
    async with AnswerPublisher(settings, _verifier(settings, args.keys)) as publisher:
        _write(args.ready, "ready")
        deadline = loop.time() + 60
        while not _exists(args.go):
            if loop.time() > deadline:
                raise TimeoutError("no go signal within 60 s")
            await asyncio.sleep(0.005)

        async def publish(item: dict[str, Any]) -> int:
            retries, deadline = 0, loop.time() + 120
            while True:
                try:
                    await publisher.publish(
                        item["token"],
                        item["response"],
                        answer_id=item["answer_id"],
                        **item["axes"],
                    )
                    return retries
                except Exception as exc:  # the broker is away: publish again
                    if loop.time() > deadline:
                        raise
                    retries += 1
                    logging.getLogger("worker_proc").warning("publish failed (%r); again", exc)
                    await asyncio.sleep(0.5)

        retries = 0
        for i in range(0, len(items), args.chunk):
            chunk = items[i : i + args.chunk]
            retries += sum(await asyncio.gather(*(publish(item) for item in chunk)))
            await asyncio.sleep(args.pace)
    print(json.dumps({"published": len(items), "retries": retries}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="worker_proc")
    parser.add_argument("role", choices=["worker", "publish", "publish-many"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--commit-interval-ms", type=int, default=50)
    parser.add_argument("--keys", required=True)
    # worker
    parser.add_argument("--state")
    parser.add_argument("--stats")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--expiry-interval", type=float, default=1.0)
    parser.add_argument("--commit-delay", type=float, default=0.0)
    parser.add_argument("--marks", help="append transaction marks to this file")
    parser.add_argument("--instance-id", help="Kafka static membership (group.instance.id)")
    parser.add_argument("--standby", type=int, default=0, help="standby copies per partition")
    # publisher
    parser.add_argument("--token")
    parser.add_argument("--axes")
    parser.add_argument("--response")
    parser.add_argument("--answer-id")
    parser.add_argument("--ready")
    parser.add_argument("--go")
    # publish-many
    parser.add_argument("--answers", help="a JSON file listing the answers to publish")
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--pace", type=float, default=0.5)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.role}[{os.getpid()}] %(name)s %(levelname)s %(message)s",
    )
    # A publisher riding out a stopped broker would log each failed connection attempt.
    quiet = logging.CRITICAL if args.role == "publish-many" else logging.WARNING
    logging.getLogger("aiokafka").setLevel(quiet)
    roles = {"worker": _run_worker, "publish": _run_publisher, "publish-many": _run_publish_many}
    asyncio.run(roles[args.role](args))


# -- the parent side --------------------------------------------------------------------------


@dataclass
class Proc:
    """One child process and the file its output goes to."""

    popen: subprocess.Popen[bytes]
    log_path: Path
    state: Path | None = None
    _log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: no commit, no leaving the group, no closing of the store."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)
        self._close_log()

    async def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM once the worker can take it, and wait for a clean exit; SIGKILL if none."""
        from tests.kafka_helpers import eventually

        async def ready() -> bool:
            return not self.alive() or READY in self.text()

        await eventually(ready, timeout=timeout, interval=0.05)
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        return await self.wait(timeout)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait(self, timeout: float = 60.0) -> int:
        """Wait for the process to exit by itself; SIGKILL at the deadline."""
        try:
            code = await asyncio.to_thread(self.popen.wait, timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.popen.wait(timeout=30)
        self._close_log()
        return code

    def tail(self, lines: int = 30) -> str:
        tail = "\n".join(self.text().splitlines()[-lines:])
        return f"--- {self.log_path.name} ---\n{tail}"

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def spawn(role: str, log_path: Path, *options: str, state: Path | None = None) -> Proc:
    """Start ``python -m tests.integration.worker_proc <role> <options>`` from the repository."""
    log = log_path.open("ab")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    popen = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.worker_proc", role, *options],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=log,
    )
    return Proc(popen, log_path, state, log)


def common_options(bootstrap: str, prefix: str, app: str, keys: Path, partitions: int) -> list[str]:
    return [
        "--bootstrap",
        bootstrap,
        "--prefix",
        prefix,
        "--app",
        app,
        "--partitions",
        str(partitions),
        "--keys",
        str(keys),
    ]


if __name__ == "__main__":
    main()
