"""What the documentation pages state as fact is checked here, so they cannot drift: the tests
the guarantees page cites exist, the refusal table is the code's, the token claims are the ones
a token carries, the wire constants are the schemas' own, the non-Python client's partition rule
is Kafka's, and the API reference documents the public API and nothing else."""

from __future__ import annotations

import ast
import base64
import importlib.util
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import turnlog
from turnlog import errors
from turnlog.contracts.refusals import RefusalReason
from turnlog.kafka.partitioning import partition_for
from turnlog.tokens import Keyring, PauseClaims, TokenIssuer, generate_ed25519
from turnlog.wire.codec import fingerprint_of

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows[1:]  # the header row


# -- guarantees ----------------------------------------------------------------------------------


def test_every_failure_mode_cites_a_test_that_exists() -> None:
    rows = table_rows(section(page("guarantees.md"), "Failure modes, and the test behind each"))
    assert len(rows) >= 15
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for what, _, proven_by in rows:
        cited = re.findall(r"`(test_\w+)`", proven_by)
        assert cited, f"no test proves: {what}"
        for name in cited:
            assert f"def {name}(" in sources, name


def test_the_failure_modes_the_adopters_ask_about_are_all_there() -> None:
    text = section(page("guarantees.md"), "Failure modes, and the test behind each").lower()
    asked = [
        "worker killed", "broker stopped", "zombie", "wrong partition", "forged",
        "published again", "race with the pause", "expiry", "erasure",
    ]  # fmt: skip
    assert [a for a in asked if a not in text] == []


def test_the_refusal_table_is_every_refusal_with_its_step() -> None:
    rows = table_rows(section(page("guarantees.md"), "Refusals"))
    listed = {row[0].strip("`"): int(row[1]) for row in rows}
    assert listed == {reason.value: reason.step for reason in RefusalReason}


# -- a non-Python client -------------------------------------------------------------------------


def _issued_claims() -> set[str]:
    private, _ = generate_ed25519("docs")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    claims = PauseClaims(
        token_id="t", scope_hash="s", session_id="se", run_id="r", tool_call_id="c",
        interrupt_id="", thread_id="th", checkpoint_id="cp", interaction="approve_tool_call",
        request_hash="h", issued_at=start, not_before=start, expires_at=start + timedelta(hours=1),
        pause_partition=0, pause_offset=1, tool_name="deploy", arguments_hash="a",
    )  # fmt: skip
    token = TokenIssuer(Keyring.ed25519("docs", private), issuer="i", audience="a").issue(claims)
    payload = token.split(".")[1]
    return set(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def test_the_token_claims_listed_are_the_ones_a_token_carries() -> None:
    rows = table_rows(section(page("tutorials/any-client.md"), "The token's claims"))
    listed = {name for row in rows for name in re.findall(r"`(\w+)`", row[0])}
    assert listed == _issued_claims()


def test_the_fingerprints_the_client_page_names_are_the_schemas_own() -> None:
    text = page("tutorials/any-client.md")
    named = dict(re.findall(r"`(\w+)` \(`([0-9a-f]{16})`\)", text))
    outputs = ("TurnResumed", "PauseExpired", "AnswerRejected")
    assert named == {name: fingerprint_of(name).hex() for name in outputs}
    submitted = re.search(r"AVRO fingerprint of the schema's.*?`([0-9a-f]{16})`", text, re.S)
    assert submitted is not None
    assert submitted.group(1) == fingerprint_of("AnswerSubmitted").hex()


@pytest.fixture(scope="module")
def any_client(request: pytest.FixtureRequest) -> ModuleType:
    path = DOCS / "snippets" / "any_client_answer.py"
    spec = importlib.util.spec_from_file_location("any_client_answer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # it reads schemas/ as a reader's clone has it
        spec.loader.exec_module(module)
    return module


def test_the_client_imports_nothing_of_turnlog() -> None:
    tree = ast.parse((DOCS / "snippets" / "any_client_answer.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and not any(name.split(".")[0] == "turnlog" for name in imported)


def test_the_clients_header_is_the_answer_schemas(any_client: ModuleType) -> None:
    assert b"\xc3\x01" + fingerprint_of("AnswerSubmitted") == any_client.HEADER


@given(st.text(min_size=1, max_size=60), st.integers(min_value=1, max_value=64))
def test_the_clients_partition_rule_is_turnlogs(
    any_client: ModuleType, thread_id: str, partitions: int
) -> None:
    try:
        data = thread_id.encode()
    except UnicodeEncodeError:  # a lone surrogate is no thread id
        return
    ours = (any_client.murmur2(data) & 0x7FFFFFFF) % partitions
    assert ours == partition_for(thread_id, partitions)


# -- the site ----------------------------------------------------------------------------------


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def _config() -> dict[str, object]:
    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may name Python objects (!!python/name:...); their names are enough here.
    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    loaded = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    assert isinstance(loaded, dict)
    return loaded


def test_every_page_is_in_the_navigation_in_the_reading_order() -> None:
    nav = _config()["nav"]
    assert isinstance(nav, list)
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert set(_nav_pages(nav)) == pages
    sections = {next(iter(item)): item[next(iter(item))] for item in nav}
    assert list(sections) == [
        "Home", "Concepts", "Guarantees and failure modes", "Tutorials", "Operations",
        "API reference",
    ]  # fmt: skip
    tutorials = _nav_pages(sections["Tutorials"])
    adapters = {f"adapters/{p.name}" for p in (DOCS / "adapters").glob("*.md")}
    # The issue's order: first turn, approvals, each adapter, any client, the inbox.
    assert tutorials[:2] == ["tutorials/first-resumed-turn.md", "tutorials/approvals.md"]
    assert set(tutorials[2:-2]) == adapters
    assert tutorials[-2:] == ["tutorials/any-client.md", "tutorials/inbox.md"]


def test_the_api_reference_documents_the_public_api_and_nothing_else() -> None:
    documented: list[str] = []
    for ref in sorted((DOCS / "reference").glob("*.md")):
        documented += re.findall(r"^::: ([\w.]+)", ref.read_text(), re.M)
    public = {f"turnlog.{name}" for name in turnlog.__all__ if name != "__version__"}
    # Besides the public names: the errors module, for the whole tree and its exit codes.
    assert set(documented) - public == {"turnlog.errors"}
    tree = {f"turnlog.{name}" for name, value in vars(errors).items()
            if isinstance(value, type) and issubclass(value, Exception)}  # fmt: skip
    assert public <= set(documented) | tree
    assert len(documented) == len(set(documented)), "a name documented twice"
    assert not public & tree & set(documented), "documented twice: directly and in the tree"


def _all_pages() -> str:
    return "\n".join(p.read_text() for p in sorted(DOCS.rglob("*.md")))


def test_every_turnlog_variable_the_pages_name_is_read_by_the_code() -> None:
    named = set(re.findall(r"\bTURNLOG_[A-Z0-9_]*[A-Z0-9]\b", _all_pages()))
    assert len(named) >= 20
    source = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    for variable in sorted(named):
        # A family named by its first member: TURNLOG_KAFKA_SASL_USERNAME / _PASSWORD.
        assert variable in source, variable


def test_the_settings_table_gives_each_default_as_the_code_has_it() -> None:
    from turnlog.settings import ENV, Settings

    rows = table_rows(
        section(page("operations/topics.md"), "Settings that shape the topics and the worker")
    )
    by_variable = {variable: field for field, variable in ENV.items()}
    defaults = Settings()
    assert len(rows) >= 10
    for variable, default, _ in rows:
        value = getattr(defaults, by_variable[variable.strip("`")])
        shown = default.strip("`")
        expected = str(value).lower() if isinstance(value, bool) else str(value)
        assert shown == expected.removesuffix(".0"), variable


def test_every_metric_the_pages_name_is_exposed() -> None:
    from prometheus_client import CollectorRegistry

    from turnlog.notify.metrics import notify_metrics
    from turnlog.observability.metrics import (
        audit_metrics,
        projector_metrics,
        resumed_turns_metrics,
        worker_metrics,
    )
    from turnlog.region.metrics import region_metrics

    registry = CollectorRegistry()
    notify_metrics(registry)
    worker_metrics(registry)
    projector_metrics(registry)
    resumed_turns_metrics(registry)
    audit_metrics(registry)
    region_metrics(registry)
    suffixes = {"counter": ("_total",), "histogram": ("", "_bucket", "_count", "_sum")}
    exposed = {family.name + suffix for family in registry.collect()
               for suffix in suffixes.get(family.type, ("",))}  # fmt: skip
    named = set(re.findall(r"\bturnlog_[a-z_]+[a-z]\b", _all_pages()))
    assert len(named) >= 15
    assert sorted(named - exposed) == []


def test_the_diagram_renders_without_fetching_anything() -> None:
    text = page("concepts.md")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert images == ["img/dataflow.svg"]
    svg = (DOCS / "img" / "dataflow.svg").read_text()
    assert "<script" not in svg and "http://" not in svg.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in svg


def _fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}[^\n]*\n(.*?)^```", text, re.S | re.M)


def test_no_page_of_ours_holds_python_the_suite_does_not_run() -> None:
    """Python on the pages is included from docs/snippets/ or examples/ (run by the suite),
    never written into the page where it could drift."""
    for path in sorted(DOCS.rglob("*.md")):
        if path.name == "inbox.md":
            continue  # tests/integration/test_inbox_tutorial.py runs the Python it shows
        for block in _fenced(path.read_text(), "python"):
            assert re.fullmatch(r'--8<-- "[^"]+"\n', block), f"{path.relative_to(ROOT)}: {block}"


def test_the_approval_decisions_shown_as_json_are_what_the_helpers_build() -> None:
    from turnlog import approve, edit, reject

    (block,) = _fenced(page("tutorials/approvals.md"), "json")
    shown = [json.loads(line) for line in block.splitlines()]
    arguments = {"service": "billing", "region": "eu"}
    built = [
        approve("deploy", arguments),
        edit("deploy", arguments, {"service": "billing", "region": "us"}),
        reject("deploy", arguments, "not on a Friday"),
    ]
    for one, made in zip(shown, built, strict=True):
        assert one.keys() == made.keys()
        assert {**one, "arguments_hash": made["arguments_hash"]} == made


def test_the_alert_rules_are_yaml_prometheus_can_load() -> None:
    (block,) = _fenced(page("operations/monitoring.md"), "yaml")
    rules = yaml.safe_load(block)["groups"][0]["rules"]
    assert len(rules) >= 5
    assert all({"alert", "expr"} <= set(rule) for rule in rules)
