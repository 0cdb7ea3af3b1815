"""The README's library quick start, run verbatim against the real broker: the code block is
taken from README.md as it stands, so the README cannot drift from the library."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import Names
from turnlog import write_keypair

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_start() -> str:
    text = README.read_text()
    section = text[text.index("## The library in fifteen lines") :]
    section = section[: section.index("\n## ")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the quick start is one python block"
    return str(blocks[0])


def test_the_quick_start_is_about_fifteen_lines() -> None:
    assert len([line for line in quick_start().splitlines() if line.strip()]) <= 20


def test_the_readme_quick_start_runs_verbatim(bootstrap: str, names: Names, tmp_path: Path) -> None:
    script = tmp_path / "quickstart.py"
    script.write_text(quick_start())
    write_keypair(tmp_path / "keys", "readme")  # what `turnlog keys new` does
    env = {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": bootstrap,
        "TURNLOG_TOPIC_PREFIX": names.prefix,
        "TURNLOG_APPLICATION_ID": names.app,
        "TURNLOG_STATE_DIR": str(tmp_path / "state"),
        "TURNLOG_KEYS_DIR": str(tmp_path / "keys"),
        "TURNLOG_PARTITIONS": "2",
    }
    run = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["True", "The person answered.", 'answer 1: selected "eu"']
