"""Run the outage chaos test N times, one after another, and tell what each broker log says.

    .venv/bin/python -m bench.soak_outage --runs 20 [--minutes 70] [--features "k=v ..."]

Each run is ``pytest tests/integration/test_worker_chaos.py::<the 20 s outage test>`` in its own
process (never two at once: the test is timing-bound and the machine may be shared), with
``TURNLOG_KEEP_BROKER_LOGS`` pointing at the run's directory, so ``tests/brokers.py`` copies the
test's own broker's whole ``server.log`` there. The script then greps that log for the markers
the transaction coordinator drops -- "Couldn't find leader endpoint for partitions ... can be
skipped" (KAFKA-20734, see docs/guarantees.md) -- and for the marker channel's retries, WARNs
and ERRORs, and prints one row per run: passed, the violations the test reported, the skip lines
seen and when (against the broker's stop). ``--features`` is passed as ``KAFKA_LOCAL_FEATURES``
(the own broker is formatted with it); ``--txn-debug`` sets ``KAFKA_LOCAL_TXN_DEBUG=1``.

``--direct`` leaves turnlog and the test out: ``--producers`` aiokafka transactional producers
run one transaction after another (a record on each of two topics), committing one and aborting
the next, on a broker of their own, which is stopped (SIGTERM) and started ``--cycles`` times;
after each restart each producer's first transaction is aborted (``--then-commit``: committed).
Read read_committed at the end, every committed value must be on both topics and no aborted
one on either: it prints the skip lines and every transaction that broke that.

``--dump SEGMENT...`` prints a kept broker's log segments batch by batch (producer id and epoch,
COMMIT/ABORT control batches), and ``__transaction_state`` segments record by record (each
transactional id's states), to see which partition of a transaction never got its marker.

Everything lands in ``--out`` (default ``bench/results/soak-outage/<time>/``): per run the
pytest output, the kept broker log, and for a failed run or one with skip lines pytest's
temporary directory (the broker's data, for ``kafka.tools.DumpLogSegments``); ``summary.json``. The
shared broker of ``TURNLOG_BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``) must be running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.record.memory_records import MemoryRecords

from turnlog.kafka import clients

REPO = Path(__file__).resolve().parent.parent
TEST = (
    "tests/integration/test_worker_chaos.py::"
    "test_the_chaos_lives_through_a_broker_stopped_for_20_seconds"
)
SKIP = "Couldn't find leader endpoint"
#: what a skip line names: the partitions left without their marker, and whose transaction
SKIPPED = re.compile(
    r"for partitions Set\(([^)]*)\) while trying to send transaction markers for (\S+?),"
)
#: the marker channel's DEBUG line after it (KAFKA_LOCAL_TXN_DEBUG=1): commit or abort
SENDING = re.compile(r"transactionalId=([^,]+), .*?state=(PREPARE_COMMIT|PREPARE_ABORT)")
#: marker-channel lines that are not the skip itself but say a marker did not go through
RETRY = re.compile(r"transaction marker (?:for|from) partition .* has (?:permanently )?failed")
WARN_OR_ERROR = re.compile(r"^\[[^\]]+\] (?:WARN|ERROR|FATAL) ")
MARKERISH = re.compile(r"(?i)marker|txn|transaction")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
#: where a stop (SIGTERM) of the broker shows in its log, and where each start begins
STOPPING = re.compile(r"Transition from STARTED to SHUTTING_DOWN|shutting down|Shutting down")
STARTING = re.compile(r"^=== kafka-local: starting .* at (\S+)")
#: the broker's controlled shutdown made it into the log (before kafka.sh turned log4j's own
#: shutdown hook off, the log went quiet a moment after SIGTERM and this line never showed)
CONTROLLED = "Beginning controlled shutdown"
#: the audit's figures, one JSON line from tests/integration/chaos_support.py's audit_and_heal
AUDIT = re.compile(r"^turnlog-audit-outcome (\{.*\})\s*$")
VIOLATION = re.compile(
    r"^E\s+(?:AssertionError: )?((?:TokenConsumed|TurnResumed|PauseExpired|AnswerRejected): .*"
    r"|[a-z_]+ partition \d+: .*)"  # the chaos count's differences, then turnlog audit's
)


@dataclass
class Run:
    run: int
    passed: bool
    seconds: float
    violations: list[str] = field(default_factory=list)
    other_failure: str = ""
    #: ``turnlog audit`` once the chaos drained: violations by kind before the heal, the
    #: repairs asked, how many of those found were gone after it, and by kind what was left
    audited: bool = False
    found: dict[str, int] = field(default_factory=dict)
    repairs: int = 0
    healed: int = 0
    left: dict[str, int] = field(default_factory=dict)
    found_detail: list[dict[str, object]] = field(default_factory=list)
    skip_lines: list[str] = field(default_factory=list)
    #: per skip line: which start of the broker it came in (1: before the outage, 2: after
    #: it) and its seconds after that life's first stop line (negative: before any stop)
    skip_timing: list[tuple[int, float | None]] = field(default_factory=list)
    #: per skip line (with --txn-debug): "PREPARE_COMMIT <transactional id>: <partitions>"
    skip_what: list[str] = field(default_factory=list)
    retry_lines: int = 0
    marker_warnings: list[str] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    first_stop: str = ""
    shutdown_logged: bool = False
    logs: list[str] = field(default_factory=list)


def _stamp(line: str) -> str:
    m = STAMP.match(line)
    return m.group(1) if m else ""


def _seconds(stamp: str) -> float | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def read_broker_log(path: Path, run: Run) -> None:
    """Fill ``run`` with what the kept broker log ``path`` says about markers and the outage."""
    run.logs.append(str(path))
    started = 0
    stopped_at: float | None = None  # this life's first stop line
    waiting: dict[str, int] = {}  # transactional id -> its skip's index in skip_what
    for line in path.read_text(errors="replace").splitlines():
        sent = SENDING.search(line) if waiting and "Sending" in line else None
        if sent and sent.group(1) in waiting:
            i = waiting.pop(sent.group(1))
            run.skip_what[i] = f"{sent.group(2)} {run.skip_what[i]}"
        m = STARTING.match(line)
        if m:
            started += 1
            stopped_at = None
            run.starts.append(m.group(1))
            continue
        if stopped_at is None and STOPPING.search(line) and _stamp(line):
            stopped_at = _seconds(_stamp(line))
        if started == 1 and not run.first_stop and STOPPING.search(line) and _stamp(line):
            run.first_stop = _stamp(line)
        if started == 1 and CONTROLLED in line:  # the outage's stop, not the fixture's last
            run.shutdown_logged = True
        if SKIP in line:
            run.skip_lines.append(line)
            at = _seconds(_stamp(line))
            after = None if at is None or stopped_at is None else round(at - stopped_at, 3)
            run.skip_timing.append((started, after))
            named = SKIPPED.search(line)
            if named:
                waiting[named.group(2)] = len(run.skip_what)
                run.skip_what.append(f"{named.group(2)}: {named.group(1)}")
            else:
                run.skip_what.append("?")
        elif RETRY.search(line):
            run.retry_lines += 1
        elif WARN_OR_ERROR.match(line) and MARKERISH.search(line):
            run.marker_warnings.append(line)


def read_pytest_output(text: str, run: Run) -> None:
    for line in text.splitlines():
        m = VIOLATION.match(line)
        if m:
            run.violations.append(m.group(1))
        a = AUDIT.match(line)
        if a and not run.audited:
            outcome = json.loads(a.group(1))
            run.audited = True
            run.found = outcome["found"]
            run.repairs = outcome["repairs"]
            run.healed = outcome["healed"]
            run.left = outcome["left"]
            run.found_detail = outcome["violations"]
    if not run.passed and not run.violations:
        errors = [line for line in text.splitlines() if line.startswith("E ")]
        tail = [line for line in text.splitlines() if line.strip()][-1:]
        run.other_failure = (errors or tail or ["(no output)"])[0][:300]


def one_run(number: int, out: Path, env: dict[str, str], timeout: float) -> Run:
    here = out / f"run-{number:02d}"
    here.mkdir(parents=True, exist_ok=True)
    basetemp = here / "tmp"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        TEST,
        "-x",
        "-q",
        "-rP",  # a passing run's captured output too: the test prints its chaos summary
        "-p",
        "no:cacheprovider",
        f"--basetemp={basetemp}",
    ]
    run_env = {**env, "TURNLOG_KEEP_BROKER_LOGS": str(here / "logs")}
    began = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        text = proc.stdout.decode(errors="replace")
        passed = proc.returncode == 0
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or b""
        text = (raw if isinstance(raw, bytes) else raw.encode()).decode(errors="replace")
        text += f"\n(soak: pytest killed after {timeout:.0f}s)\n"
        passed = False
    run = Run(number, passed, time.monotonic() - began)
    (here / "pytest.txt").write_text(text)
    read_pytest_output(text, run)
    for log in sorted((here / "logs").glob("*server.log")):
        read_broker_log(log, run)
    if passed and not run.skip_lines:
        # the broker's data is kept for a failure, and for a run whose markers were dropped
        shutil.rmtree(basetemp, ignore_errors=True)
    return run


def _cell(items: list[str], limit: int = 70) -> str:
    if not items:
        return "-"
    first = items[0] if len(items[0]) <= limit else items[0][: limit - 3] + "..."
    return first + (f" (+{len(items) - 1})" if len(items) > 1 else "")


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "-"


def _timing(r: Run) -> str:
    """Each skip line's broker life and seconds after that life's stop, and with --txn-debug
    whether the transaction was a commit or an abort, e.g. ``1:+0.41s commit``."""
    what = [w.split()[0] if w.startswith("PREPARE_") else "" for w in r.skip_what]
    what += [""] * (len(r.skip_timing) - len(what))
    return " ".join(
        f"{life}:{'?' if after is None else f'{after:+.2f}s'}"
        + (f" {w.removeprefix('PREPARE_').lower()}" if w else "")
        for (life, after), w in zip(r.skip_timing, what, strict=True)
    )


def totals(runs: list[Run]) -> dict[str, Any]:
    found: dict[str, int] = {}
    left: dict[str, int] = {}
    for r in runs:
        for k, n in r.found.items():
            found[k] = found.get(k, 0) + n
        for k, n in r.left.items():
            left[k] = left.get(k, 0) + n
    return {
        "runs": len(runs),
        "failed": sum(not r.passed for r in runs),
        "not_audited": sum(not r.audited for r in runs),
        "runs_with_violations": sum(bool(r.found) for r in runs),
        "violations_found": sum(found.values()),
        "found_by_kind": found,
        "repairs_asked": sum(r.repairs for r in runs),
        "healed": sum(r.healed for r in runs),
        "left": sum(left.values()),
        "left_by_kind": left,
        "runs_with_skip_line": sum(bool(r.skip_lines) for r in runs),
        "skip_lines": sum(len(r.skip_lines) for r in runs),
        "skipped_commits": sum(w.startswith("PREPARE_COMMIT") for r in runs for w in r.skip_what),
        "skipped_aborts": sum(w.startswith("PREPARE_ABORT") for r in runs for w in r.skip_what),
        "failed_with_skip_line": sum(bool(r.skip_lines) and not r.passed for r in runs),
        "violations_with_skip_line": sum(bool(r.skip_lines) and bool(r.found) for r in runs),
        "controlled_shutdown_logged": sum(r.shutdown_logged for r in runs),
    }


def print_table(runs: list[Run], label: str) -> None:
    print(f"\n{label}")
    print(
        "| run | passed | s | found | repairs | healed | left | failure "
        "| skip lines (life:after stop) | retries | stop at |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        skip = f"{len(r.skip_lines)} ({_timing(r)})" if r.skip_lines else "0"
        bad = _cell(r.violations) if r.violations else (r.other_failure[:70] or "-")
        audit = (
            f"{_kinds(r.found)} | {r.repairs} | {r.healed} | {_kinds(r.left)}"
            if r.audited
            else "(no audit) | - | - | -"
        )
        print(
            f"| {r.run} | {'yes' if r.passed else 'NO'} | {r.seconds:.0f} | {audit} "
            f"| {bad if not r.passed else '-'} | {skip} | {r.retry_lines} "
            f"| {r.first_stop or '?'} |"
        )
    t = totals(runs)
    print(
        "\n| runs | failed | with violations | found | repairs | healed | left | with skip line |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {t['runs']} | {t['failed']} | {t['runs_with_violations']} "
        f"| {t['violations_found']} | {t['repairs_asked']} | {t['healed']} | {t['left']} "
        f"| {t['runs_with_skip_line']} |"
    )
    print(
        f"found by kind: {_kinds(t['found_by_kind'])}; left by kind: {_kinds(t['left_by_kind'])}; "
        f"{t['skip_lines']} skip lines ({t['skipped_commits']} of a commit, "
        f"{t['skipped_aborts']} of an abort); "
        f"{t['not_audited']} runs without an audit; {t['failed_with_skip_line']} failed with a "
        f"skip line, {t['violations_with_skip_line']} with violations and a skip line; "
        f"{t['controlled_shutdown_logged']} with the controlled shutdown logged"
    )


# -- the same drop without turnlog -------------------------------------------------------------

KAFKA_SH = REPO / "compose" / "kafka-local" / "kafka.sh"
DIRECT_TOPICS = ("soak-a", "soak-b")


def _free_ports() -> int:
    """Two consecutive ports free now, below the ephemeral range (as tests/brokers.py picks)."""
    rng = random.SystemRandom()
    for _ in range(500):
        base = rng.randrange(20000, 32000)
        free = True
        for port in (base, base + 1):
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    free = False
        if free:
            return base
    raise RuntimeError("no two free ports")


async def _kafka_sh(env: dict[str, str], *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(KAFKA_SH), *args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if await proc.wait() != 0:
        raise RuntimeError(f"kafka.sh {' '.join(args)} failed")


async def _one_transaction(producer: AIOKafkaProducer, i: int, value: str, commit: bool) -> None:
    await producer.begin_transaction()
    await producer.send_and_wait(DIRECT_TOPICS[0], value.encode(), partition=i % 6)
    await producer.send_and_wait(DIRECT_TOPICS[1], value.encode(), partition=(i + 1) % 6)
    await (producer.commit_transaction() if commit else producer.abort_transaction())


async def _transactions(
    bootstrap: str, i: int, ended: dict[str, set[str]], stop: asyncio.Event
) -> None:
    """Producer ``i``: one transaction after another (a record on each topic), until ``stop``,
    committing one and aborting the next; a value goes into ``ended["committed"]`` or
    ``ended["aborted"]`` once ``commit_transaction`` or ``abort_transaction`` returned."""
    n = 0
    while not stop.is_set():
        producer = clients.producer(
            bootstrap,
            transactional_id=f"soak-{i}",
            request_timeout_ms=5000,
            retry_backoff_ms=100,
        )
        try:
            await asyncio.wait_for(producer.start(), 15)
            while not stop.is_set():
                n += 1
                value, commit = f"{i}:{n}", n % 2 == 0
                await asyncio.wait_for(_one_transaction(producer, i, value, commit), 15)
                ended["committed" if commit else "aborted"].add(value)
        except Exception:  # the broker going or gone: a new producer once it is back
            await asyncio.sleep(0.3)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 10)


async def _then(bootstrap: str, i: int, commit: bool) -> None:
    """Producer ``i`` once more, after the outages: one transaction on the same partitions,
    committed or aborted -- its marker is the next one those partitions get from it."""
    for _ in range(20):
        producer = clients.producer(bootstrap, transactional_id=f"soak-{i}")
        try:
            await producer.start()
            await producer.begin_transaction()
            await producer.send_and_wait(DIRECT_TOPICS[0], b"then", partition=i % 6)
            await producer.send_and_wait(DIRECT_TOPICS[1], b"then", partition=(i + 1) % 6)
            await (producer.commit_transaction() if commit else producer.abort_transaction())
            return
        except Exception:
            await asyncio.sleep(0.5)
        finally:
            with contextlib.suppress(Exception):
                await producer.stop()
    raise RuntimeError(f"producer {i}: no last transaction")


async def _read_committed(bootstrap: str, topic: str) -> set[str]:
    consumer = clients.consumer(
        bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(6)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        end = await consumer.end_offsets(parts)  # the last stable offsets, read_committed
        seen: set[str] = set()

        async def behind() -> bool:
            return any([await consumer.position(tp) < end[tp] for tp in parts])

        while await behind():
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                seen.update(r.value.decode() for r in records if r.value != b"then")
        return seen
    finally:
        await consumer.stop()


async def direct(out: Path, cycles: int, producers: int, commit_after: bool) -> int:
    """Transactional aiokafka producers commit in a loop while a lone broker is stopped
    (SIGTERM, a controlled shutdown) and started ``cycles`` times; then each producer's next
    transaction is aborted (or committed); then every value whose commit returned is looked
    for on both topics, read_committed."""
    port = _free_ports()
    data = out / "direct-broker"
    env = {
        **os.environ,
        "KAFKA_LOCAL_DATA": str(data),
        "KAFKA_LOCAL_PORT": str(port),
        "KAFKA_LOCAL_FAST": "1",
        "KAFKA_HEAP_OPTS": "-Xmx512m -Xms128m",
        "KAFKA_LOCAL_PROPERTIES": "broker.heartbeat.interval.ms=500 broker.session.timeout.ms=2500",
    }
    bootstrap = f"127.0.0.1:{port}"
    await _kafka_sh(env, "start")
    try:
        admin = clients.admin(bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(t, 6, 1) for t in DIRECT_TOPICS])
        await admin.close()
        ended: dict[str, set[str]] = {"committed": set(), "aborted": set()}
        committed = ended["committed"]
        for cycle in range(cycles):
            stop = asyncio.Event()
            loops = [
                asyncio.create_task(_transactions(bootstrap, i, ended, stop))
                for i in range(producers)
            ]
            await asyncio.sleep(4)
            print(f"cycle {cycle + 1}: {len(committed)} commits returned; stopping", flush=True)
            await _kafka_sh(env, "stop")
            stop.set()
            await asyncio.gather(*loops)
            await _kafka_sh(env, "start")
            # The next transaction of each producer, before any other: its marker decides what
            # becomes of records a dropped marker left open.
            await asyncio.gather(*(_then(bootstrap, i, commit_after) for i in range(producers)))
        a = await _read_committed(bootstrap, DIRECT_TOPICS[0])
        b = await _read_committed(bootstrap, DIRECT_TOPICS[1])
    finally:
        await _kafka_sh(env, "stop")
    log = data / "single" / "server.log"
    skips = [line for line in log.read_text(errors="replace").splitlines() if SKIP in line]

    def order(v: str) -> tuple[int, ...]:
        return tuple(map(int, v.split(":")))

    lost = sorted(committed - (a & b), key=order)
    risen = sorted(ended["aborted"] & (a | b), key=order)
    print(
        f"{len(committed)} commits and {len(ended['aborted'])} aborts returned, {cycles} "
        f"controlled shutdowns, each followed by a transaction "
        f"{'committed' if commit_after else 'aborted'}; {len(skips)} skip lines"
    )
    for line in skips:
        print("  " + line[:300])
    print(f"{len(lost)} committed transactions not wholly visible, {len(risen)} aborted visible:")
    for v in lost + risen:
        print(
            f"  {v} ({'committed' if v in committed else 'aborted'}): "
            f"{DIRECT_TOPICS[0]} {'yes' if v in a else 'no'}, "
            f"{DIRECT_TOPICS[1]} {'yes' if v in b else 'no'}"
        )
    return 1 if lost or risen else 0


# -- reading a kept broker's logs (DumpLogSegments is in kafka-tools, which .kafka/ lacks) -----

TXN_STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]


def dump_segment(path: Path, match: str = "") -> None:
    """One line per batch of a segment: offsets, time, producer id and epoch, and COMMIT or
    ABORT for a control batch (the record keys otherwise); for ``__transaction_state`` one
    line per record: the transactional id, producer id and epoch, and the state written."""
    records = MemoryRecords(path.read_bytes())
    txn_log = path.parent.name.startswith("__transaction_state")
    print(f"== {path}")
    while records.has_next():
        batch = records.next_batch()
        items = list(batch)
        if not items:
            continue
        if txn_log:
            for r in items:
                (size,) = struct.unpack(">h", r.key[2:4])
                tid = r.key[4 : 4 + size].decode()
                if match not in tid or r.value is None:
                    continue
                _, pid, epoch, _, state = struct.unpack(">hqhib", r.value[:17])
                print(
                    f"{r.offset:>6} {_clock(r.timestamp)} {tid} pid={pid} epoch={epoch} "
                    f"{TXN_STATES.get(state, state)}"
                )
            continue
        if batch.is_control_batch:
            (kind,) = struct.unpack(">h", items[0].key[2:4])
            what = "CONTROL " + {0: "ABORT", 1: "COMMIT"}.get(kind, str(kind))
        else:
            keys = [(r.key or b"")[:40].decode("latin1").strip() for r in items]
            what = " | ".join(keys)
            if match and match not in what:
                continue
        print(
            f"{items[0].offset:>6}-{items[-1].offset:<6} {_clock(items[0].timestamp)} "
            f"pid={batch.producer_id} epoch={batch.producer_epoch} {what}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="at most this many runs")
    parser.add_argument("--minutes", type=float, default=0.0, help="start no run after this")
    parser.add_argument("--features", default="", help="KAFKA_LOCAL_FEATURES of the own broker")
    parser.add_argument("--txn-debug", action="store_true", help="KAFKA_LOCAL_TXN_DEBUG=1")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--direct", action="store_true", help="no turnlog, no test: the bare producers (below)"
    )
    parser.add_argument("--cycles", type=int, default=8, help="--direct: broker stops")
    parser.add_argument("--producers", type=int, default=12, help="--direct: producers")
    parser.add_argument(
        "--then-commit", action="store_true", help="--direct: commit the next transaction"
    )
    parser.add_argument(
        "--dump",
        type=Path,
        nargs="+",
        metavar="SEGMENT",
        help="print the batches of these .log segments (a kept broker's data) and stop",
    )
    parser.add_argument("--match", default="", help="--dump: only these keys / transactional ids")
    args = parser.parse_args(argv)
    if args.dump:
        for segment in args.dump:
            dump_segment(segment, args.match)
        return 0

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or REPO / "bench" / "results" / "soak-outage" / stamp
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("TURNLOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    if args.features:
        env["KAFKA_LOCAL_FEATURES"] = args.features
    else:
        env.pop("KAFKA_LOCAL_FEATURES", None)
    if args.txn_debug:
        env["KAFKA_LOCAL_TXN_DEBUG"] = "1"
    if args.direct:
        os.environ.update({k: v for k, v in env.items() if k.startswith("KAFKA_LOCAL_")})
        return asyncio.run(direct(out, args.cycles, args.producers, args.then_commit))
    label = f"features: {args.features or '(4.4 defaults)'}; out: {out}"
    print(label, flush=True)

    began = time.monotonic()
    runs: list[Run] = []
    for number in range(1, args.runs + 1):
        if args.minutes and time.monotonic() - began > args.minutes * 60:
            break
        run = one_run(number, out, env, args.timeout)
        runs.append(run)
        audit = (
            f"audit found {_kinds(run.found)}, {run.repairs} repairs, {run.healed} healed, "
            f"left {_kinds(run.left)}"
            if run.audited
            else "no audit"
        )
        print(
            f"run {number}: {'passed' if run.passed else 'FAILED'} in {run.seconds:.0f}s, "
            f"{audit}, {len(run.skip_lines)} skip lines"
            + (f" ({_timing(run)})" if run.skip_lines else "")
            + f", {run.retry_lines} marker retries"
            + (f"; {'; '.join(run.violations or [run.other_failure])}" if not run.passed else ""),
            flush=True,
        )
        (out / "summary.json").write_text(
            json.dumps(
                {
                    "features": args.features,
                    "txn_debug": args.txn_debug,
                    "totals": totals(runs),
                    "runs": [asdict(r) for r in runs],
                },
                indent=2,
            )
        )
    print_table(runs, label)
    return 0 if all(r.passed for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
