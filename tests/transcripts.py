"""Shell transcripts in the README and the docs, run as they stand and compared line by line.

A ``console`` block is a transcript: a line starting with ``$ `` is a command (a line ending in
``\\`` continues on the next), and the lines after it, up to the next command, are what it prints
(stdout and stderr, as a terminal shows them). The commands run in order in one bash, so
``TOKEN=...``, ``&``, ``%1`` and ``$?`` work as they do for a reader.

What may differ from the page, and nothing else:

- a placeholder matches what really varies from run to run: ``<id>`` a 32-hex token or answer
  id, ``<n>`` a number (partition, offset, pid, age, rate), ``<secs>`` seconds with an optional
  fraction, ``<clock>`` an elapsed ``H:MM:SS``, ``<digest>`` a 64-hex digest, ``<time>`` an ISO 8601
  moment (a page may add its own);
- runs of spaces count as one (a placeholder is shorter than what it stands for, so table columns
  keep their alignment on the page), and trailing spaces are ignored;
- the test's own topic prefix, application id and bootstrap servers print as the defaults the
  pages show (``turnlog.``, ``turnlog``, ``127.0.0.1:9092``);
- the setup commands in ``SETUP`` are not run: the test's virtualenv and the session's broker
  stand in for them (``turnlog broker up`` must not touch a shared broker).

A command put in the background (``&``) must be stopped by the transcript itself: the check fails
if a job is still running when it ends, and stops it then (and on any failure or timeout).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import Names

SETUP = frozenset({"make install", ". .venv/bin/activate", "turnlog broker up"})
PLACEHOLDERS = {
    "<id>": r"[0-9a-f]{32}",
    "<n>": r"[0-9]+",
    "<secs>": r"[0-9]+(?:\.[0-9]+)?",
    "<clock>": r"[0-9]+:[0-9]{2}:[0-9]{2}",
    "<digest>": r"[0-9a-f]{64}",
    "<time>": (
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
        r"(?:Z|[+-][0-9]{2}:[0-9]{2})?"
    ),
}
MARK = "@@transcript-step@@"


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)

    @property
    def bare(self) -> str:
        """The command without a trailing comment."""
        return re.sub(r"\s+#.*$", "", self.command).strip()


def steps_of(block: str) -> list[Step]:
    """One ``console`` block's text as its steps."""
    steps: list[Step] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append(Step(line[2:]))
        elif steps and steps[-1].command.endswith("\\") and not steps[-1].expected:
            steps[-1].command += "\n" + line
        else:
            assert steps, f"output before the first command: {line!r}"
            steps[-1].expected.append(line)
    return steps


def console_blocks(text: str) -> list[list[Step]]:
    """Each ``console`` block of a page, as its steps."""
    return [steps_of(block) for block in re.findall(r"^```console\n(.*?)^```", text, re.S | re.M)]


def _squeeze(line: str) -> str:
    return " ".join(line.split())


def matches(expected: str, actual: str, placeholders: Mapping[str, str] = PLACEHOLDERS) -> bool:
    """Whether a printed line is the page's line, placeholders standing for what varies."""
    split = re.compile("(" + "|".join(map(re.escape, placeholders)) + ")")
    parts = split.split(_squeeze(expected))
    pattern = "".join(placeholders.get(part, re.escape(part)) for part in parts)
    return re.fullmatch(pattern, _squeeze(actual)) is not None


def script(steps: list[Step]) -> str:
    lines = [
        "exec 2>&1",
        # Whatever the transcript left running is stopped when the shell leaves, failure or not.
        "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT",
        # The marker keeps $? as the step before it left it, so `echo $?` on a page works.
        f'mark() {{ local rc=$?; echo "{MARK} $1"; return $rc; }}',
    ]
    for number, step in enumerate(steps):
        if step.bare not in SETUP:
            lines += [f"mark {number}", step.command]
    # Running jobs only: a job that ended during the page's own `wait` can still be listed by
    # `jobs -p` (as Done, not yet cleared from bash's table) -- seen once in CI, after a
    # `kill %1 %2 %3; wait` whose three jobs had all printed their last lines.
    lines.append('mark "end $(jobs -pr | wc -l)"')
    return "\n".join(lines) + "\n"


def outputs(transcript: str) -> tuple[dict[int, list[str]], int]:
    """Each step's printed lines by its number, and how many jobs were left running."""
    by_step: dict[int, list[str]] = {}
    current: list[str] = []
    left_running = -1
    for line in transcript.splitlines():
        if line.startswith(MARK):
            fields = line.split()
            if fields[1] == "end":
                left_running = int(fields[2])
                break
            current = by_step.setdefault(int(fields[1]), [])
        else:
            current.append(line)
    return by_step, left_running


def environment(bootstrap: str, names: Names) -> dict[str, str]:
    """A reader's shell: this virtualenv first on PATH, the test's own names as TURNLOG_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLOG_")}
    env.pop("FORCE_COLOR", None)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
        COLUMNS="80",
        TURNLOG_BOOTSTRAP_SERVERS=bootstrap,
        TURNLOG_TOPIC_PREFIX=names.prefix,
        TURNLOG_APPLICATION_ID=names.app,
        TURNLOG_STATE_DIR=".turnlog/state",
        TURNLOG_KEYS_DIR=".turnlog/keys",
    )
    return env


def run(
    steps: list[Step],
    cwd: Path,
    env: Mapping[str, str],
    names: Names,
    bootstrap: str,
    timeout: float = 240,
) -> str:
    """What the steps print, run in one bash in ``cwd``, the test's own names shown as the
    pages' defaults."""
    (cwd / "transcript.sh").write_text(script(steps))
    proc = subprocess.Popen(
        ["bash", "transcript.sh"],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout stops a background job too
    )
    try:
        transcript, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for real, shown in (
        (names.prefix, "turnlog."),
        (names.app, "turnlog"),
        (bootstrap, "127.0.0.1:9092"),
    ):
        transcript = transcript.replace(real, shown)
    return transcript


def check(
    steps: list[Step],
    transcript: str,
    where: str,
    placeholders: Mapping[str, str] = PLACEHOLDERS,
) -> int:
    """Assert every step printed what ``where`` shows; return how many steps were compared."""
    by_step, left_running = outputs(transcript)
    assert left_running == 0, f"{where} leaves a background job running:\n{transcript}"
    compared = 0
    for number, step in enumerate(steps):
        if step.bare in SETUP:
            continue
        compared += 1
        actual = [line.rstrip() for line in by_step.get(number, [])]
        shown = f"{where}: $ {step.command}\n  shown:\n" + "\n".join(step.expected)
        shown += "\n  printed:\n" + "\n".join(actual)
        assert len(actual) == len(step.expected), shown
        for want, got in zip(step.expected, actual, strict=True):
            assert matches(want, got, placeholders), f"{want!r} != {got!r}\n{shown}"
    return compared
