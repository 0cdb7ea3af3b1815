"""Measuring: medians and percentiles, memory from /proc, profiles, and the machine's facts."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of a non-empty sample."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def memory_kb(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak resident set) of a process, in kB, from /proc."""
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    found[name] = int(value.split()[0])
    except OSError:
        pass
    return found


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


class Profiling:
    """pyinstrument around the measured phase, when the harness asked for a profile."""

    def __init__(self, path: str | None, interval: float = 0.001) -> None:
        self.path = path
        self.interval = interval
        self._profiler: Any = None

    def start(self) -> None:
        if not self.path:
            return
        from pyinstrument import Profiler

        # The whole thread, not one task: the worker's time is spread over aiokafka's tasks.
        self._profiler = Profiler(interval=self.interval, async_mode="disabled")
        self._profiler.start()

    def stop(self) -> None:
        if self._profiler is None:
            return
        self._profiler.stop()
        text = self._profiler.output_text(unicode=True, color=False, show_all=False)
        Path(f"{self.path}.txt").write_text(text)
        Path(f"{self.path}.html").write_text(self._profiler.output_html())
        self._profiler = None


# --- the machine ----------------------------------------------------------------------------


def machine_facts(bootstrap: str) -> dict[str, Any]:
    cpu = ""
    mem_kb = 0
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), ""
            )
        with open("/proc/meminfo", encoding="ascii") as info:
            mem_kb = int(next(ln.split()[1] for ln in info if ln.startswith("MemTotal")))
    except (OSError, StopIteration, ValueError):
        pass
    versions = {}
    for package in (
        "turnlog",
        "aiokafka",
        "fastavro",
        "rocksdict",
        "PyJWT",
        "cryptography",
        "PyNaCl",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    from turnlog import _compiled
    from turnlog.wire import native

    return {
        "cpus": os.cpu_count(),
        # Which builds run: the C reader and the compiled resume path ("in use", or why not).
        "c_reader": native.UNAVAILABLE_BECAUSE or "in use",
        "compiled_resume_path": _compiled.UNUSED_BECAUSE or "in use",
        "cpu_model": cpu,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": versions,
        "bootstrap": bootstrap,
        "git": _git_revision(),
    }


def _git_revision() -> str | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


# --- CPU time from /proc ----------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int | str = "self") -> float | None:
    """User + system CPU seconds a process (all its threads) has used, from /proc; ``None``
    if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # The command name (field 2) may hold spaces; the fields after its ')' are fixed.
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already inside user
    return (total - idle) / _TICKS, total / _TICKS


def broker_pids() -> list[int]:
    """The processes whose command line runs a Kafka broker (``kafka.Kafka``) on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"kafka.Kafka\x00" in command:
            found.append(int(entry.name))
    return sorted(found)


class CpuWatch:
    """CPU used between :meth:`start` and :meth:`stop` by named processes and by the machine,
    as a percentage of one core (200% is both cores of a two-core machine)."""

    def __init__(self, pids: dict[str, list[int]]) -> None:
        self.pids = pids
        self._began: dict[str, float] = {}
        self._machine: tuple[float, float] = (0.0, 0.0)
        self._wall = 0.0

    def _used(self) -> dict[str, float]:
        return {
            name: sum(cpu_seconds(pid) or 0.0 for pid in pids) for name, pids in self.pids.items()
        }

    def start(self) -> None:
        self._began = self._used()
        self._machine = machine_busy_seconds()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self._wall
        used = self._used()
        busy, total = machine_busy_seconds()
        cores = os.cpu_count() or 1
        found = {f"{name}_pct": 100 * (used[name] - self._began[name]) / wall for name in self.pids}
        spent_total = total - self._machine[1]
        found["machine_pct"] = (
            100 * cores * (busy - self._machine[0]) / spent_total if spent_total else 0.0
        )
        found["seconds"] = wall
        return found
