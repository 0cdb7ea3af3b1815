"""``python -m bench``: run the scenarios, print the table, write bench/results/latest.json."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
import time
import traceback
import uuid
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from bench.measure import REPO, machine_facts
from bench.report import Row, markdown, print_table, write_json
from bench.scenarios import Context

SCENARIOS = (
    "codec",
    "throughput",
    "latency",
    "scaleout",
    "replay",
    "failover",
    "memory",
    "scale",
    "ledger",
    "continuation",
    "mcp",
)

#: (full, --quick) defaults of the size options.
SIZES = {
    "repeats": (3, 1),
    "answers": (20_000, 3_000),
    "latency_seconds": (8.0, 4.0),
    "replay_n": (100_000, 5_000),
    "failover_n": (100_000, 5_000),
    "memory_small": (10_000, 1_000),
    "memory_large": (100_000, 5_000),
    "codec_iterations": (2_000, 300),
    "ledger_n": (1_000_000, 5_000),
}

#: (full, --quick) defaults of the options that list numbers.
LISTS = {
    "scale_sizes": ("10000,100000,1000000", "1000,5000"),
    "scaleout_workers": ("1,2,4", "1,2"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="turnlog benchmarks: each scenario beside a raw baseline from the same run.",
    )
    parser.add_argument(
        "-s",
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="run only this scenario (repeatable); default: all, in the order listed",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat: a smoke run")
    parser.add_argument("--repeats", type=int, help="runs per measurement (full 3, quick 1)")
    parser.add_argument("--answers", type=int, help="throughput: answers per run (20k / 3k)")
    parser.add_argument(
        "--latency-seconds", type=float, help="latency: seconds of offered load per run (8 / 4)"
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        help="latency: offered answers/s (default: half the measured throughput, else 500)",
    )
    parser.add_argument("--replay-n", type=int, help="replay: checkpoints to rebuild (100k / 5k)")
    parser.add_argument(
        "--failover-n", type=int, help="failover: checkpoints on the partition (100k / 5k)"
    )
    parser.add_argument("--memory-small", type=int, help="memory: first mark (10k / 1k)")
    parser.add_argument("--memory-large", type=int, help="memory: second mark (100k / 5k)")
    parser.add_argument("--codec-iterations", type=int, help="codec: round trips per run")
    parser.add_argument(
        "--ledger-n", type=int, help="ledger: spent tokens whose windows closed (1M / 5k)"
    )
    parser.add_argument(
        "--scale-sizes",
        help="scale: pending pauses per size, comma-separated (10000,100000,1000000 / 1000,5000)",
    )
    parser.add_argument(
        "--broker-log-dir",
        type=Path,
        help="scale: the broker's log directory, to read the topics' bytes on disk "
        "(default: the sum of the records' keys and values only)",
    )
    parser.add_argument(
        "--scaleout-workers",
        help="scale out: worker processes per measurement, comma-separated (1,2,4 / 1,2)",
    )
    parser.add_argument(
        "--scaleout-partitions", type=int, default=24, help="scale out: partitions (24)"
    )
    parser.add_argument(
        "--replication-factor",
        type=int,
        default=1,
        help="scale out: the topics' replication factor (1; 3 on the three-node cluster, "
        "kafka.sh start3, with min.insync.replicas 2)",
    )
    parser.add_argument("--messages", type=int, default=20, help="messages per checkpoint (20)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic (6)")
    parser.add_argument("--commit-interval-ms", type=int, default=100, help="worker poll (100)")
    parser.add_argument("--max-batch", type=int, default=2000, help="records per poll (2000)")
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("TURNLOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        help="Kafka bootstrap servers (default: $TURNLOG_BOOTSTRAP_SERVERS or 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO / "bench" / "results" / "latest.json",
        help="where the JSON results go (default: bench/results/latest.json)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="write pyinstrument profiles of the measured phases to DIR (needs pyinstrument)",
    )
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    args = parser.parse_args(argv)
    for name, (full, quick) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    for name, (full, quick) in LISTS.items():
        given = getattr(args, name) or (quick if args.quick else full)
        try:
            numbers = [int(part) for part in given.split(",") if part.strip()]
        except ValueError:
            parser.error(f"--{name.replace('_', '-')} takes comma-separated whole numbers")
        if not numbers or min(numbers) < 1 or numbers != sorted(set(numbers)):
            parser.error(f"--{name.replace('_', '-')} takes increasing positive numbers")
        setattr(args, name, numbers)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


async def run(args: argparse.Namespace, console: Console) -> tuple[list[Row], dict[str, str]]:
    ctx = Context(
        bootstrap=args.bootstrap,
        run_id=uuid.uuid4().hex[:8],
        quick=args.quick,
        repeats=args.repeats,
        options=args,
        profile_dir=args.profile,
    )
    rows: list[Row] = []
    failures: dict[str, str] = {}
    for name in args.scenario or SCENARIOS:
        console.rule(f"[bold]{name}")
        started = time.perf_counter()
        module = importlib.import_module(f"bench.scenarios.{name}")
        try:
            found = await module.run(ctx)
        except Exception as exc:
            traceback.print_exc()
            failures[name] = f"{type(exc).__name__}: {exc}"
            console.print(f"[red]{name} failed: {exc}")
            continue
        rows.extend(found)
        print_table(found, f"{name} ({time.perf_counter() - started:.0f}s)", console)
    return rows, failures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # A pipe or a log file gets the whole table rather than an 80-column squeeze.
    console = Console(width=None if sys.stdout.isatty() else 160)
    facts = machine_facts(args.bootstrap)
    console.print(
        f"turnlog bench{' --quick' if args.quick else ''}: {facts['cpus']} CPUs "
        f"({facts['cpu_model'] or 'unknown'}), Python {facts['python']}, "
        f"broker {args.bootstrap}, {args.repeats} repeat(s); C reader: {facts['c_reader']}, "
        f"compiled resume path: {facts['compiled_resume_path']}"
    )
    started = time.perf_counter()
    rows, failures = asyncio.run(run(args, console))
    elapsed = time.perf_counter() - started
    console.rule("[bold]summary")
    print_table(rows, f"turnlog bench: medians of {args.repeats} run(s), {elapsed:.0f}s", console)
    if args.markdown:
        # Unwrapped: a table row longer than the console must stay one line.
        console.print(markdown(rows), markup=False, highlight=False, soft_wrap=True)
    meta = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed, 1),
        "quick": args.quick,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": facts,
        "failures": failures,
    }
    write_json(args.output, rows, meta)
    console.print(f"results written to {args.output}")
    for name, error in failures.items():
        console.print(f"[red]{name} failed: {error}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
