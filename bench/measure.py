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
