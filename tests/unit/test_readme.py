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


def test_the_metrics_table_lists_every_metric_exactly() -> None:
    from prometheus_client import CollectorRegistry

    from turnlog.observability.metrics import (
        projector_metrics,
        resumed_turns_metrics,
        worker_metrics,
    )

    registry = CollectorRegistry()
    worker_metrics(registry)
    projector_metrics(registry)
    resumed_turns_metrics(registry)
    exposed = set()
    for family in registry.collect():
        suffix = "_total" if family.type == "counter" else ""
        exposed.add(family.name + suffix)
    table = _section("Operating it")
    listed = set(re.findall(r"^\| `(turnlog_\w+)` \|", table, re.M))
    assert listed == exposed


def test_the_log_fields_the_readme_names_are_the_ones_written() -> None:
    from turnlog.observability.logs import FIELDS

    text = _section("Operating it")
    logs = text[text.index("**Logs.**") : text.index("**`turnlog status`**")]
    named = re.search(r"they carry (.*?)\. aiokafka", logs, re.S)
    assert named is not None
    assert set(re.findall(r"`(\w+)`", named.group(1))) - {"answer", "ownership"} == set(FIELDS)


def test_the_acl_table_is_what_turnlog_acls_prints() -> None:
    from turnlog.kafka.acls import role_acls
    from turnlog.kafka.topics import TopicSet

    table = _section("Run it against your Kafka")
    rows = re.findall(
        r"^\| (\w+) \| (User:\w) \| (\w+) \| (\w+) \| `([^`]+)` \| (\w+) \|$", table, re.M
    )
    roles = role_acls(
        TopicSet("turnlog.", 6), "turnlog", publisher="P", worker="W", agent="A", reader="R",
        projector="J",
    )  # fmt: skip
    printed = [(role, a.principal, a.operation, a.resource_type, a.name, a.pattern)
               for role, entries in roles.items() for a in entries]  # fmt: skip
    assert sorted(rows) == sorted(printed)
