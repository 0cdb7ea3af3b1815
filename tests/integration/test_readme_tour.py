"""The README's tour of the command, run as it stands against the real broker.

The tour is the one ``console`` block of the section "A tour of the command". Its commands run in
order in one bash, in a fresh directory of the test's own with the test's own topic prefix,
application id, state and keys directories -- all set as environment variables, so the README
shows plain commands. How a transcript is read, run and compared, and what may differ from the
README (placeholders, spaces, the test's own names, the setup commands), is in
``tests/transcripts.py``, shared with the docs' transcripts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import transcripts
from tests.conftest import Names
from tests.transcripts import Step, matches, steps_of

README = Path(__file__).resolve().parents[2] / "README.md"


def tour(text: str) -> list[Step]:
    section = text[text.index("## A tour of the command") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```console\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the tour is one console block"
    return steps_of(str(blocks[0]))


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
    assert {s.bare for s in steps} >= transcripts.SETUP, "the tour starts from a fresh clone"
    transcript = transcripts.run(
        steps, tmp_path, transcripts.environment(bootstrap, names), names, bootstrap
    )
    assert transcripts.check(steps, transcript, "README") >= 10
