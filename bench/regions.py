"""Two regions under load: the mirror's lag (the RPO at a loss) and the time to ready in B.

    .venv/bin/python -m bench.regions [--pending 100000] [--rate 1000] [--seconds 20]

Two single-node clusters of its own and one MirrorMaker 2 (``compose/kafka-local/mirror.sh``),
as ``tests/integration/test_regions.py`` uses them, at a larger size:

1. ``--pending`` pauses preloaded on region A (12 partitions; one transaction per 5,000, as
   ``python -m bench`` preloads), mirrored to B; a ``turnlog worker`` on A, and a ``turnlog
   worker --passive`` on B keeping warm copies of every partition.
2. Answers to them produced on A at ``--rate`` a second for ``--seconds``; each answer's
   acknowledgement by A and its arrival in B (a ``read_committed`` reader of B) give the mirror's
   latency, p50 and p99; ``turnlog.region.lag.mirror_lag`` sampled every second gives the age of
   the oldest unmirrored record -- what a loss at that moment would have lost.
3. A's broker SIGKILLed under that load (its worker and MirrorMaker with it), ``turnlog region
   promote`` on B, and the time until B's worker answers ``/readyz`` 200 (every partition owned,
   from its warm copies) -- beside B's full restore of the same partitions (a fresh store
   catching up with B's pauses and consumptions) in the same run.
4. A's broker started again for ``turnlog region audit``: the window's bounds and what it held.

Results go to ``bench/results/regions-<time>.json`` and one table on stdout. Not part of the
test suite; about 3 minutes at the defaults on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.brokers import OwnBroker, free_ports
from tests.integration.region_support import Mirror
from tests.integration.test_observability import http_get

from bench.common import Deployment, create_topics, preload
from turnlog.cli.common import caught_up
from turnlog.kafka import clients
from turnlog.kafka.topics import TopicSet
from turnlog.projections.store import Store
from turnlog.region.lag import mirror_lag, worst
from turnlog.settings import Settings
from turnlog.tokens import Keyring, TokenIssuer, TokenVerifier, write_keypair

PARTITIONS = 12
KID = "bench-regions"
RESULTS = Path(__file__).resolve().parent / "results"


def _deployment(bootstrap: str, prefix: str, keys: Path) -> Deployment:
    settings = Settings(
        bootstrap_servers=bootstrap, topic_prefix=prefix, application_id=f"{prefix}app",
        partitions=PARTITIONS, commit_interval_ms=100,
    )  # fmt: skip
    keyring = Keyring.from_directory(keys)
    return Deployment(
        settings=settings,
        topics=TopicSet.from_settings(settings),
        private_pem="",
        issuer=TokenIssuer(keyring, issuer=settings.issuer, audience=settings.audience),
        verifier=TokenVerifier(
            keyring, issuer=settings.issuer, audience=settings.audience,
            leeway=timedelta(seconds=settings.token_leeway_seconds),
        ),
    )  # fmt: skip


def _env(dep: Deployment, keys: Path, state: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": dep.settings.bootstrap_servers,
        "TURNLOG_TOPIC_PREFIX": dep.settings.topic_prefix,
        "TURNLOG_APPLICATION_ID": dep.settings.application_id,
        "TURNLOG_PARTITIONS": str(PARTITIONS),
        "TURNLOG_KEYS_DIR": str(keys),
        "TURNLOG_STATE_DIR": str(state),
        "TURNLOG_BROKER_TIMEOUT": "60",
    }


def _worker(env: dict[str, str], log: Path, *options: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "turnlog", "worker", "--log-level", "info", *options],
            env=env, stdout=out, stderr=out,
        )  # fmt: skip


async def _metric(port: int, name: str) -> float:
    _, body = await http_get(port, "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(name))


async def _until(check: Any, timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, IndexError):
            if await check():
                return
        await asyncio.sleep(interval)  # polling a condition until its deadline
    raise RuntimeError(f"{what} not reached within {timeout:.0f}s")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="turnlog-bench-regions-"))
    keys = root / "keys"
    write_keypair(keys, KID)
    a, b = OwnBroker(root / "a", free_ports(2)), OwnBroker(root / "b", free_ports(2))
    await asyncio.gather(a.start(), b.start())
    prefix = f"bench.regions{int(time.time())}."
    dep_a, dep_b = _deployment(a.bootstrap, prefix, keys), _deployment(b.bootstrap, prefix, keys)
    mirror = Mirror(
        root / "mirror", a.bootstrap, b.bootstrap, prefix, dep_a.settings.application_id
    )
    procs: list[subprocess.Popen[bytes]] = []
    out: dict[str, Any] = {"pending": args.pending, "rate": args.rate, "seconds": args.seconds}
    try:
        await asyncio.gather(create_topics(dep_a), create_topics(dep_b))
        await mirror.start()
        began = time.monotonic()
        answers = await preload(dep_a, args.pending, messages=args.messages)
        out["preload_seconds"] = time.monotonic() - began
        print(f"preloaded {args.pending:,} pauses on A in {out['preload_seconds']:.1f}s")
        port_b = free_ports(1)
        procs.append(_worker(_env(dep_a, keys, root / "state-a"), root / "worker-a.log"))
        procs.append(
            _worker(
                _env(dep_b, keys, root / "state-b"),
                root / "worker-b.log",
                "--passive",
                "--metrics-port",
                str(port_b),
            )
        )

        async def warm() -> bool:
            return await _metric(port_b, "turnlog_worker_standby_records_total") >= args.pending

        began = time.monotonic()
        await _until(warm, 1800, "B's warm copies of every pause")
        out["copies_warm_seconds"] = time.monotonic() - began
        print(f"B's copies hold every pause after {out['copies_warm_seconds']:.1f}s")

        # The load: answers on A at the rate, their arrivals in B, the lag sampled.
        used = answers[: args.rate * args.seconds]
        acked: dict[bytes, float] = {}
        arrived: dict[bytes, float] = {}
        lags: list[float] = []
        follower = clients.consumer(
            dep_b.settings.connection, dep_b.topics.answers, client_id="bench-regions-follower",
            auto_offset_reset="latest", isolation_level="read_committed", fetch_max_wait_ms=20,
        )  # fmt: skip
        await follower.start()
        await follower.getmany(timeout_ms=500)  # positioned at the end before the load starts
        stop = asyncio.Event()

        async def follow() -> None:
            while not stop.is_set():
                batch = await follower.getmany(timeout_ms=100)
                now = time.monotonic()
                for records in batch.values():
                    for r in records:
                        arrived.setdefault(r.key, now)

        async def sample() -> None:
            while not stop.is_set():
                with contextlib.suppress(Exception):
                    found = await mirror_lag(
                        dep_a.settings.connection,
                        dep_b.settings.connection,
                        dep_a.topics,
                        timeout=5,
                    )
                    lags.append(worst(found)[1])
                await asyncio.sleep(1.0)  # one sample a second

        producer_tasks: list[asyncio.Task[None]] = []

        async def load() -> None:
            from turnlog.kafka import clients

            producer = clients.producer(
                a.bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                request_timeout_ms=5000,
            )  # fmt: skip
            await producer.start()
            try:
                tick = 0.05
                per_tick = max(1, int(args.rate * tick))
                t0 = time.monotonic()
                for i in range(0, len(used), per_tick):
                    futures = []
                    for p, key, value in used[i : i + per_tick]:
                        futures.append(
                            (
                                key,
                                await producer.send(
                                    dep_a.topics.answers, value, key=key, partition=p
                                ),
                            )
                        )

                    async def acks(pending: list[Any]) -> None:
                        for key, fut in pending:
                            with contextlib.suppress(Exception):
                                await fut
                                acked[key] = time.monotonic()

                    producer_tasks.append(asyncio.create_task(acks(futures)))
                    await asyncio.sleep(
                        max(0.0, t0 + (i // per_tick + 1) * tick - time.monotonic())
                    )
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), 5)

        following = asyncio.create_task(follow())
        sampling = asyncio.create_task(sample())
        loading = asyncio.create_task(load())
        await asyncio.sleep(args.seconds * 0.8)  # the load runs; the loss comes at 80% of it
        await a.kill()
        killed = time.monotonic()
        procs[0].kill()
        await mirror.kill()
        # What A never acknowledged stays unacknowledged: the sends still waiting are dropped.
        for task in (loading, *producer_tasks):
            task.cancel()
        for task in (loading, *producer_tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.sleep(2.0)  # the follower reads what B holds (a fixed grace, measured below)
        stop.set()
        for task in (following, sampling):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await follower.stop()
        latency = [arrived[k] - t for k, t in acked.items() if k in arrived and arrived[k] < killed]
        out["acked"] = len(acked)
        out["mirror_latency_ms"] = {
            "p50": statistics.median(latency) * 1000 if latency else None,
            "p99": _pct(latency, 0.99) * 1000,
            "answers": len(latency),
        }
        out["lag_seconds_samples"] = lags
        out["lag_seconds"] = {"p50": _pct(lags, 0.5), "p99": _pct(lags, 0.99), "samples": len(lags)}
        out["acked_not_in_b"] = sum(1 for k in acked if k not in arrived)

        # The failover.
        env_b = _env(dep_b, keys, root / "state-b")
        t0 = time.monotonic()
        await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "turnlog", "region", "promote", "--by", "bench"],
            env=env_b, check=True, capture_output=True,
        )  # fmt: skip
        promoted = time.monotonic()

        async def ready() -> bool:
            return (await http_get(port_b, "/readyz"))[0] == 200

        await _until(ready, 600, "B ready", interval=0.05)
        out["ready_in_b_seconds"] = time.monotonic() - promoted
        out["promote_command_seconds"] = promoted - t0
        cold = Store.open(root / "cold")
        try:
            t1 = time.monotonic()
            out["cold_restore_records"] = await caught_up(cold, dep_b.settings)
            out["cold_restore_seconds"] = time.monotonic() - t1
        finally:
            cold.close()

        # The window, named.
        await a.start()
        audit = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "turnlog", "region", "audit", "--source", a.bootstrap, "--json"],
            env=env_b, capture_output=True, text=True, check=False,
        )  # fmt: skip
        report = json.loads(audit.stdout) if audit.stdout else {"error": audit.stderr}
        out["audit"] = {
            k: report.get(k)
            for k in ("clean", "window", "unmirrored", "tokens_resumed_in_both",
                      "doubled_with_distinct_events", "resumes_unmirrored",
                      "refused_spent_in_target")
        }  # fmt: skip
        out["audit"]["answers_lost"] = len(report.get("answers_lost", []))
        out["audit"]["pauses_missing"] = len(report.get("pauses_missing", []))
        if isinstance(report.get("tokens_resumed_in_both"), list):
            out["audit"]["tokens_resumed_in_both"] = len(report["tokens_resumed_in_both"])
            out["audit"]["resumes_unmirrored"] = len(report["resumes_unmirrored"])
        return out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
                if proc.poll() is None:
                    proc.kill()
        with contextlib.suppress(Exception):
            await mirror.kill()
        for broker in (a, b):
            with contextlib.suppress(Exception):
                await broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1000, help="answers a second on A")
    parser.add_argument("--seconds", type=int, default=20, help="how long the load runs")
    parser.add_argument("--messages", type=int, default=20, help="messages per paused turn")
    args = parser.parse_args()
    if args.rate * args.seconds > args.pending:
        parser.error("--pending must hold --rate x --seconds answers")
    out = asyncio.run(run(args))
    out["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"regions-{out['when'].replace(':', '')}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    shown = {k: v for k, v in out.items() if k != "lag_seconds_samples"}
    print(json.dumps(shown, indent=2, default=str))
    print(f"(written to {path})")


if __name__ == "__main__":
    main()
