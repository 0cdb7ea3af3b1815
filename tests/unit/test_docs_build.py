"""The documentation site builds with warnings as errors -- in the suite, so a broken link, a
missing anchor, a snippet file that moved or a reference to a name that no longer exists fails
``make test`` locally, not only ``make docs`` in CI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    assert MKDOCS.is_file(), "install the docs extra: pip install -e '.[docs]' (make docs does)"
    run = build(ROOT / "mkdocs.yml", tmp_path / "site")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert not re.search(r"^(WARNING|ERROR)\b", output, re.M), output
    assert (tmp_path / "site" / "reference" / "entry-point" / "index.html").is_file()
    # The code samples are the files the suite runs, included at build time.
    tutorial = (tmp_path / "site" / "tutorials" / "first-resumed-turn" / "index.html").read_text()
    assert "captured_messages" in tutorial and "--8&lt;--" not in tutorial
    # Home includes the README's quick start by its section markers: a lost marker is no block.
    home = (tmp_path / "site" / "index.html").read_text()
    assert "run_worker" in home and "--8&lt;--" not in home


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "concepts.md"
    broken = "[gone](no-such-page.md) [lost](guarantees.md#no-such-anchor)"
    page.write_text(page.read_text() + f"\n{broken}\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    )
    run = build(config, tmp_path / "site")
    assert run.returncode != 0
    output = run.stdout + run.stderr
    assert "no-such-page.md" in output
    assert "no-such-anchor" in output
