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
import subprocess
from pathlib import Path

import pytest

from tests import transcripts
from tests.conftest import Names
from tests.transcripts import console_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Its transcripts serve a web page until Ctrl-C: tests/integration/test_inbox_tutorial.py runs
# them, and the page's Python, with the page's own placeholders.
RUN_ELSEWHERE = frozenset({"tutorials/inbox.md"})
LINKED = ("docs", "examples", "schemas")


def pages() -> list[Path]:
    return [p for p in sorted(DOCS.rglob("*.md")) if str(p.relative_to(DOCS)) not in RUN_ELSEWHERE]


def pages_with_transcripts() -> list[str]:
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
    shown = set(pages_with_transcripts())
    assert {"tutorials/first-resumed-turn.md", "tutorials/any-client.md"} <= shown


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", pages_with_transcripts())
def test_the_transcripts_print_what_the_page_shows(
    bootstrap: str, names: Names, tmp_path: Path, page: str
) -> None:
    """The page's blocks run in order in one directory, as a reader runs them in one clone."""
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    env = transcripts.environment(bootstrap, names)
    ran = 0
    for steps in console_blocks((DOCS / page).read_text()):
        if not any(step.expected for step in steps):
            continue  # commands only: a reader's own cluster or file, nothing to compare
        transcript = transcripts.run(steps, tmp_path, env, names, bootstrap)
        ran += transcripts.check(steps, transcript, page)
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
