"""The any-client page's "pause from any client" (issue 41): what it tells a client to write is
what turnlog itself writes and checks. The snippet imports nothing of turnlog; its record is a
pause turnlog reads and would have written (the same fingerprint, key, request_hash and token
claims); the canonical JSON the page spells out hashes as turnlog's ``request_hash`` does, for
any JSON value. ``tests/integration/test_docs_tutorials.py`` runs the page's transcript: the
snippet's pause, answered, resumed by a worker."""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.contracts.claims import PauseClaims
from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.resume import request_hash
from turnlog.kafka.partitioning import pause_key
from turnlog.producers.pauses import check_checkpoint
from turnlog.tokens import Keyring, TokenVerifier
from turnlog.tokens.keyfiles import write_keypair
from turnlog.wire.codec import decode, fingerprint_of

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = ROOT / "docs" / "snippets" / "any_client_pause.py"
PAGE = ROOT / "docs" / "tutorials" / "any-client.md"


def _section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


@functools.cache
def _loaded() -> ModuleType:
    spec = importlib.util.spec_from_file_location("any_client_pause", SNIPPET)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # it reads schemas/ as a reader's clone has it
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def client() -> ModuleType:
    return _loaded()


def test_the_pause_client_imports_nothing_of_turnlog() -> None:
    tree = ast.parse(SNIPPET.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {"fastavro", "jwt", "aiokafka"} <= imported
    assert not any(name.split(".")[0] in ("turnlog", "tests") for name in imported)


def test_the_page_and_the_client_name_the_pause_schemas_fingerprint(client: ModuleType) -> None:
    assert b"\xc3\x01" + fingerprint_of("PauseRecorded") == client.HEADER
    named = re.search(r"8-byte CRC-64-AVRO fingerprint `([0-9a-f]{16})`", _section(
        "A pause from any client"))  # fmt: skip
    assert named is not None and named.group(1) == fingerprint_of("PauseRecorded").hex()


def test_the_clients_record_is_a_pause_turnlog_reads_and_would_have_written(
    client: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    now = datetime(2026, 12, 5, 18, 0, 0, tzinfo=UTC)
    recorded = client.pause_record("thread-7", now)
    pause = decode(client.encoded(recorded))
    assert isinstance(pause, PauseRecorded)
    cp = pause.checkpoint
    check_checkpoint(cp)  # what turnlog's own pause checks before it writes
    assert pause.request_hash == request_hash(pause.request_json)
    assert pause.expires_at == now + timedelta(hours=1)
    assert pause_key(cp.thread_id, cp.checkpoint_id) == b"thread-7\x00cp-1"
    # The token it signs is the one turnlog issues for that pause, where it was written.
    write_keypair(tmp_path, "k1")  # as `turnlog keys new` writes it
    monkeypatch.setenv("TURNLOG_KEYS_DIR", str(tmp_path))
    monkeypatch.delenv("TURNLOG_SIGNING_KID", raising=False)
    monkeypatch.delenv("TURNLOG_SIGNING_KEY_PEM", raising=False)
    token = client.token_for(recorded, 4, 17)
    verifier = TokenVerifier(Keyring.from_directory(tmp_path), issuer="turnlog",
                             audience="turnlog-answers")  # fmt: skip
    claims = verifier.verify(token, now + timedelta(seconds=1))
    assert claims == PauseClaims.for_pause(pause, pause_partition=4, pause_offset=17)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(deadline=None)  # a loaded machine is no failure of the hash
@given(_JSON)
def test_the_canonical_form_the_page_spells_out_hashes_as_turnlog_does(value: object) -> None:
    spaced = json.dumps(value, indent=1, ensure_ascii=True)  # however the text was written
    assert _loaded().request_hash(spaced) == request_hash(spaced)


def test_the_pages_worked_example_is_the_canonical_text_and_its_hash() -> None:
    text = _section("A pause from any client")
    canonical = '{"questions":[{"options":["eu","us"],"question":"Which region?"}]}'
    assert f"`{canonical}`" in text
    shown = re.search(r"`request_hash` is\s+`([0-9a-f]{64})`", text)
    assert shown is not None and shown.group(1) == request_hash(canonical)
    question = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
    assert request_hash(json.dumps(question, indent=4)) == shown.group(1)
