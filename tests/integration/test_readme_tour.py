"""The README's tour of the command, run as it stands against the real broker.

The tour is the one ``console`` block of the section "A tour of the command". A line starting with
``$ `` is a command (a line ending in ``\\`` continues on the next); the lines after it, up to the
next command, are what it prints (stdout and stderr, as a terminal shows them). The commands run in
order in one bash, so ``TOKEN=...``, ``&``, ``%1`` and ``$?`` work as they do for a reader, in a
fresh directory of the test's own with the test's own topic prefix, application id, state and keys
directories -- all set as environment variables, so the README shows plain commands.

What may differ from the README, and nothing else:

- a placeholder in an expected line matches what really varies from run to run: ``<id>`` a
  32-hex token or answer id, ``<n>`` a number (partition, offset, pid, age, rate), ``<secs>``
  seconds with an optional fraction, ``<clock>`` an elapsed ``H:MM:SS``, ``<digest>`` a 64-hex
  digest;
- runs of spaces count as one (a placeholder is shorter than what it stands for, so table columns
  keep their README alignment), and trailing spaces are ignored;
- the test's topic prefix, application id and bootstrap servers print as the defaults the README
  shows (``turnlog.``, ``turnlog``, ``127.0.0.1:9092``);
- the setup commands in ``SETUP`` are not run: this test's virtualenv and the session's broker
  stand in for them (``turnlog broker up`` must not touch a shared broker), so their output is
  not checked.

A command put in the background (``&``) must be stopped by the tour itself: the test fails if a
job is still running when the tour ends, and stops it then (and on any failure or timeout).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import Names

README = Path(__file__).resolve().parents[2] / "README.md"
SETUP = frozenset({"make install", ". .venv/bin/activate", "turnlog broker up"})
PLACEHOLDERS = {
    "<id>": r"[0-9a-f]{32}",
    "<n>": r"[0-9]+",
    "<secs>": r"[0-9]+(?:\.[0-9]+)?",
    "<clock>": r"[0-9]+:[0-9]{2}:[0-9]{2}",
    "<digest>": r"[0-9a-f]{64}",
}
_PLACEHOLDER = re.compile("(" + "|".join(map(re.escape, PLACEHOLDERS)) + ")")
MARK = "@@readme-tour-step@@"


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)

    @property
    def bare(self) -> str:
        """The command without a trailing comment."""
        return re.sub(r"\s+#.*$", "", self.command).strip()


def tour(text: str) -> list[Step]:
    section = text[text.index("## A tour of the command") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```console\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the tour is one console block"
    steps: list[Step] = []
    for line in str(blocks[0]).splitlines():
        if line.startswith("$ "):
            steps.append(Step(line[2:]))
        elif steps and steps[-1].command.endswith("\\") and not steps[-1].expected:
            steps[-1].command += "\n" + line
        else:
            assert steps, f"output before the first command: {line!r}"
            steps[-1].expected.append(line)
    return steps


def _squeeze(line: str) -> str:
    return " ".join(line.split())


def matches(expected: str, actual: str) -> bool:
    parts = _PLACEHOLDER.split(_squeeze(expected))
    pattern = "".join(PLACEHOLDERS.get(part, re.escape(part)) for part in parts)
    return re.fullmatch(pattern, _squeeze(actual)) is not None


def script(steps: list[Step]) -> str:
    lines = [
        "exec 2>&1",
        # Whatever the tour left running is stopped when the shell leaves, failure or not.
        "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT",
        # The marker keeps $? as the step before it left it, so `echo $?` in the tour works.
        f'mark() {{ local rc=$?; echo "{MARK} $1"; return $rc; }}',
    ]
    for number, step in enumerate(steps):
        if step.bare not in SETUP:
            lines += [f"mark {number}", step.command]
    lines.append('mark "end $(jobs -p | wc -l)"')
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


def test_the_parser_reads_commands_continuations_and_outputs() -> None:
    text = (
        "## A tour of the command\n```console\n"
        "$ a --x \\\n    --y\none\n$ b &   # note\n$ echo $?\n3\n```\n## Next\n"
    )
    steps = tour(text)
    assert [(s.command, s.expected) for s in steps] == [
        ("a --x \\\n    --y", ["one"]),
        ("b &   # note", []),
        ("echo $?", ["3"]),
    ]
    assert steps[1].bare == "b &"


def test_placeholders_match_only_what_they_stand_for() -> None:
    assert matches("│ t │ <id>        │ <n>s   │", "│ t │ " + "a" * 32 + " │ 604797s │")
    assert matches("digest <digest>  (<secs>s)", "digest " + "0f" * 32 + "  (0.4s)")
    assert not matches(
        "published answer <id> to partition <n>", "published answer x to partition 1"
    )
    assert not matches("resumed thread t — 4 messages", "resumed thread t — 6 messages")
    assert not matches("<n>", "1 2")


@pytest.mark.timeout(300)
def test_the_readme_tour_prints_what_it_shows(bootstrap: str, names: Names, tmp_path: Path) -> None:
    steps = tour(README.read_text())
    assert {s.bare for s in steps} >= SETUP, "the tour starts from a fresh clone"
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
    (tmp_path / "tour.sh").write_text(script(steps))
    proc = subprocess.Popen(
        ["bash", "tour.sh"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout stops the worker too
    )
    try:
        transcript, _ = proc.communicate(timeout=240)
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
    by_step, left_running = outputs(transcript)
    assert left_running == 0, f"the tour leaves a background job running:\n{transcript}"
    ran = 0
    for number, step in enumerate(steps):
        if step.bare in SETUP:
            continue
        ran += 1
        actual = [line.rstrip() for line in by_step.get(number, [])]
        shown = f"$ {step.command}\n  README:\n" + "\n".join(step.expected)
        shown += "\n  printed:\n" + "\n".join(actual)
        assert len(actual) == len(step.expected), shown
        for want, got in zip(step.expected, actual, strict=True):
            assert matches(want, got), f"{want!r} != {got!r}\n{shown}"
    assert ran >= 10
