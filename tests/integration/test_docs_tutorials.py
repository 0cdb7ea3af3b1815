"""The documentation's shell transcripts, run as they stand against the real broker.

Every ``console`` block of a docs page that shows output is a transcript: its commands run in
order in one bash, in a fresh directory of the test's own (with the repository's ``docs/``,
``examples/`` and ``schemas/`` linked in, so ``python docs/snippets/...`` works as it does in a
clone), with the test's own topic prefix, application id, state and keys -- and what they print
must be what the page shows, line by line, with the README tour's placeholders (``<id>``,
``<n>``, ``<secs>``, ``<clock>``, ``<digest>``) for what differs from run to run. The setup
commands a reader runs once (``make install``, activating the virtualenv, ``turnlog broker
up``) are not run: the session's virtualenv and broker stand in for them.

A block that shows only commands (a reader's own cluster, a file they write) is not run;
``tests/unit/test_docs_pages.py`` holds that every other block has output to check. The Python
the tutorials include comes from ``docs/snippets/`` and ``examples/``, which these transcripts
and ``tests/integration/test_examples.py`` run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.integration.test_readme_tour import SETUP, Step, matches, outputs, script

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Its transcripts serve a web page until Ctrl-C: tests/integration/test_inbox_tutorial.py runs
# them, and the page's Python, with the page's own placeholders.
RUN_ELSEWHERE = frozenset({"tutorials/inbox.md"})
LINKED = ("docs", "examples", "schemas")


def pages() -> list[Path]:
    return [p for p in sorted(DOCS.rglob("*.md")) if str(p.relative_to(DOCS)) not in RUN_ELSEWHERE]


def console_blocks(text: str) -> list[list[Step]]:
    """Each ``console`` block of a page as its steps (the README tour's rules for a step)."""
    blocks: list[list[Step]] = []
    for block in re.findall(r"^```console\n(.*?)^```", text, re.S | re.M):
        steps: list[Step] = []
        for line in str(block).splitlines():
            if line.startswith("$ "):
                steps.append(Step(line[2:]))
            elif steps and steps[-1].command.endswith("\\") and not steps[-1].expected:
                steps[-1].command += "\n" + line
            else:
                assert steps, f"output before the first command: {line!r}"
                steps[-1].expected.append(line)
        blocks.append(steps)
    return blocks


def transcripts() -> list[str]:
    """Every page with a block that shows output."""
    return [
        str(page.relative_to(DOCS))
        for page in pages()
        if any(step.expected for block in console_blocks(page.read_text()) for step in block)
    ]


def test_the_parser_reads_blocks_commands_and_outputs() -> None:
    text = "x\n```console\n$ a \\\n  --b\none\n$ c\n```\n\n```console\n$ d\n```\n"
    blocks = console_blocks(text)
    assert [[(s.command, s.expected) for s in b] for b in blocks] == [
        [("a \\\n  --b", ["one"]), ("c", [])],
        [("d", [])],
    ]


def test_the_tutorials_have_transcripts_to_run() -> None:
    shown = set(transcripts())
    assert {"tutorials/first-resumed-turn.md", "tutorials/any-client.md"} <= shown


def run_block(
    steps: list[Step], cwd: Path, env: dict[str, str], names: Names, bootstrap: str
) -> str:
    """What the block's commands print, the test's own names shown as the page's defaults."""
    (cwd / "transcript.sh").write_text(script(steps))
    proc = subprocess.Popen(
        ["bash", "transcript.sh"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout stops a background job too
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
    return transcript


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", transcripts())
def test_the_transcripts_print_what_the_page_shows(
    bootstrap: str, names: Names, tmp_path: Path, page: str
) -> None:
    """The page's blocks run in order in one directory, as a reader runs them in one clone."""
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
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
    ran = 0
    for steps in console_blocks((DOCS / page).read_text()):
        if not any(step.expected for step in steps):
            continue  # commands only: a reader's own cluster or file, nothing to compare
        transcript = run_block(steps, tmp_path, env, names, bootstrap)
        by_step, left_running = outputs(transcript)
        assert left_running == 0, f"{page} leaves a background job running:\n{transcript}"
        for index, step in enumerate(steps):
            if step.bare in SETUP:
                continue
            ran += 1
            actual = [line.rstrip() for line in by_step.get(index, [])]
            shown = f"{page}: $ {step.command}\n  page:\n" + "\n".join(step.expected)
            shown += "\n  printed:\n" + "\n".join(actual)
            assert len(actual) == len(step.expected), shown
            for want, got in zip(step.expected, actual, strict=True):
                assert matches(want, got), f"{want!r} != {got!r}\n{shown}"
    assert ran > 0


def _kafka_libs() -> Path:
    """The Apache Kafka jars the local broker runs from (fetched once by kafka.sh, as CI does)."""
    subprocess.run(
        ["bash", str(ROOT / "compose" / "kafka-local" / "kafka.sh"), "fetch"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    home = Path(os.environ.get("KAFKA_LOCAL_HOME", ROOT / ".kafka"))
    libs = sorted(p for p in home.glob("lib-*") if (p / ".complete").is_file())
    assert libs, f"no fetched Kafka jars under {home}"
    return libs[-1]


def test_the_java_partitioner_on_the_client_page_agrees_with_turnlogs() -> None:
    """``docs/snippets/Partition.java`` computes the partition with Kafka's own ``Utils``, as the
    client page shows a Java publisher doing; it must agree with turnlog's routing, or a Java
    client following the page would have its answers refused as misrouted."""
    from turnlog.kafka.partitioning import partition_for

    threads = ["thread-1", "thread-2", "a", "thréad-ü", "线程-7", "x" * 200, "tenant-a/run 9"]
    expected = [f"{t} {partition_for(t, n)}" for n in (7, 64) for t in threads]
    libs = _kafka_libs()
    got: list[str] = []
    for partitions in (7, 64):  # each run compiles the source, as the page runs it
        run = subprocess.run(
            ["java", "-cp", f"{libs}/*", str(DOCS / "snippets" / "Partition.java"),
             str(partitions), *threads],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        got += run.stdout.splitlines()
        assert [line.rsplit(" ", 1)[1] for line in run.stdout.splitlines()] == [
            str(partition_for(t, partitions)) for t in threads
        ]
    assert got == expected
