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

Everything lands in ``--out`` (default ``bench/results/soak-outage/<time>/``): per run the
pytest output, the kept broker log, and for a failed run or one with skip lines pytest's
temporary directory (the broker's data, for ``kafka.tools.DumpLogSegments``); ``summary.json``. The
shared broker of ``TURNLOG_BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``) must be running.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST = (
    "tests/integration/test_worker_chaos.py::"
    "test_the_chaos_lives_through_a_broker_stopped_for_20_seconds"
)
SKIP = "Couldn't find leader endpoint"
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
VIOLATION = re.compile(
    r"^E\s+(?:AssertionError: )?((?:TokenConsumed|TurnResumed|PauseExpired|AnswerRejected): .*)"
)


@dataclass
class Run:
    run: int
    passed: bool
    seconds: float
    violations: list[str] = field(default_factory=list)
    other_failure: str = ""
    skip_lines: list[str] = field(default_factory=list)
    retry_lines: int = 0
    marker_warnings: list[str] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    first_stop: str = ""
    shutdown_logged: bool = False
    logs: list[str] = field(default_factory=list)


def _stamp(line: str) -> str:
    m = STAMP.match(line)
    return m.group(1) if m else ""


def read_broker_log(path: Path, run: Run) -> None:
    """Fill ``run`` with what the kept broker log ``path`` says about markers and the outage."""
    run.logs.append(str(path))
    started = 0
    for line in path.read_text(errors="replace").splitlines():
        m = STARTING.match(line)
        if m:
            started += 1
            run.starts.append(m.group(1))
            continue
        if started == 1 and not run.first_stop and STOPPING.search(line) and _stamp(line):
            run.first_stop = _stamp(line)
        if started == 1 and CONTROLLED in line:  # the outage's stop, not the fixture's last
            run.shutdown_logged = True
        if SKIP in line:
            run.skip_lines.append(line)
        elif RETRY.search(line):
            run.retry_lines += 1
        elif WARN_OR_ERROR.match(line) and MARKERISH.search(line):
            run.marker_warnings.append(line)


def read_pytest_output(text: str, run: Run) -> None:
    for line in text.splitlines():
        m = VIOLATION.match(line)
        if m:
            run.violations.append(m.group(1))
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


def print_table(runs: list[Run], label: str) -> None:
    print(f"\n{label}")
    print("| run | passed | s | violations | skip lines (first at) | retries | stop at | logged |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        skip = f"{len(r.skip_lines)} ({_stamp(r.skip_lines[0])})" if r.skip_lines else "0"
        bad = _cell(r.violations) if r.violations else (r.other_failure[:70] or "-")
        print(
            f"| {r.run} | {'yes' if r.passed else 'NO'} | {r.seconds:.0f} | {bad} | {skip} "
            f"| {r.retry_lines} | {r.first_stop or '?'} | {'yes' if r.shutdown_logged else 'no'} |"
        )
    failed = [r for r in runs if not r.passed]
    skipped = [r for r in runs if r.skip_lines]
    print(
        f"\n{len(runs)} runs: {len(failed)} failed, {len(skipped)} with skip lines, "
        f"{sum(1 for r in failed if r.skip_lines)} failed with skip lines, "
        f"{sum(1 for r in skipped if r.passed)} passed with skip lines, "
        f"{sum(1 for r in runs if r.shutdown_logged)} with the controlled shutdown logged"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="at most this many runs")
    parser.add_argument("--minutes", type=float, default=0.0, help="start no run after this")
    parser.add_argument("--features", default="", help="KAFKA_LOCAL_FEATURES of the own broker")
    parser.add_argument("--txn-debug", action="store_true", help="KAFKA_LOCAL_TXN_DEBUG=1")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

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
    label = f"features: {args.features or '(4.4 defaults)'}; out: {out}"
    print(label, flush=True)

    began = time.monotonic()
    runs: list[Run] = []
    for number in range(1, args.runs + 1):
        if args.minutes and time.monotonic() - began > args.minutes * 60:
            break
        run = one_run(number, out, env, args.timeout)
        runs.append(run)
        print(
            f"run {number}: {'passed' if run.passed else 'FAILED'} in {run.seconds:.0f}s, "
            f"{len(run.skip_lines)} skip lines, {run.retry_lines} marker retries"
            + (f"; {'; '.join(run.violations or [run.other_failure])}" if not run.passed else ""),
            flush=True,
        )
        (out / "summary.json").write_text(
            json.dumps({"features": args.features, "runs": [asdict(r) for r in runs]}, indent=2)
        )
    print_table(runs, label)
    return 0 if all(r.passed for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
