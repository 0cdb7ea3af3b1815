"""What the README states as fact is checked here, so it cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from turnlog.wire.codec import _registry

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_every_fingerprint_the_readme_names_is_the_schemas_own() -> None:
    by_file = {e.path.name: fp.hex() for fp, e in _registry().by_fingerprint.items()}
    text = _section("Publish an answer from any Kafka client")
    named = {
        "AnswerSubmitted.avsc": re.search(r"AnswerSubmitted.*?`([0-9a-f]{16})`", text, re.S),
        "TurnResumed.avsc": re.search(r"`TurnResumed` \(`([0-9a-f]{16})`", text),
        "TurnResumed.v1.avsc": re.search(r"version 1 `([0-9a-f]{16})`", text),
        "PauseExpired.avsc": re.search(r"`PauseExpired` \(`([0-9a-f]{16})`", text),
        "AnswerRejected.avsc": re.search(r"`AnswerRejected` \(`([0-9a-f]{16})`", text),
    }
    found = {name: m.group(1) if m else None for name, m in named.items()}
    assert found == {name: by_file[name] for name in named}


def test_every_test_the_failure_table_cites_exists() -> None:
    table = _section("What can go wrong, and what turnlog does")
    cited = re.findall(r"`(test_\w+|tests/[\w/]+\.py)`", table)
    assert len(cited) >= 10
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for name in cited:
        if name.startswith("tests/"):
            assert (ROOT / name).is_file(), name
        else:
            assert f"def {name}(" in sources, name
