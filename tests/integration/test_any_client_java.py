"""The any-client page's Java request_hash (``docs/snippets/RequestHash.java``, issue 41): a
non-Python agent that records a pause must hash its request exactly as the worker does, or
every answer to the pause is refused ``request_hash_mismatch``. The program is run as the page
shows it, on Kafka's own jars (Jackson parses), for requests that catch the usual slips: key
order (by code point, not by UTF-16 unit), escapes, non-ASCII, whitespace, big integers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from turnlog.contracts.resume import request_hash

ROOT = Path(__file__).resolve().parents[2]

REQUESTS = [
    {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]},
    {"b": 1, "a": 'é\u0001\n"x\\', "线": [True, None, 12345678901234567890]},
    {"\U0001f600": 1, "\ufffd": 2, "z": {"\u2028": "\u007f/\t\b\f\r"}},  # 😀 sorts last in Python
    {"empty": {}, "none": [], "n": -0, "deep": [[[[{"k": "v"}]]]]},
    {"approve": {"tool": "deploy", "arguments": {"service": "billing", "replicas": 3}}},
]


def _kafka_libs() -> Path:
    subprocess.run(
        ["bash", str(ROOT / "compose" / "kafka-local" / "kafka.sh"), "fetch"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    home = Path(os.environ.get("KAFKA_LOCAL_HOME", ROOT / ".kafka"))
    libs = sorted(p for p in home.glob("lib-*") if (p / ".complete").is_file())
    assert libs, f"no fetched Kafka jars under {home}"
    return libs[-1]


def test_the_java_request_hash_on_the_client_page_is_turnlogs() -> None:
    texts = [json.dumps(r, indent=2, ensure_ascii=True) for r in REQUESTS]  # spaced, escaped
    run = subprocess.run(
        ["java", "-cp", f"{_kafka_libs()}/*", str(ROOT / "docs" / "snippets" / "RequestHash.java"),
         *texts],
        capture_output=True, text=True, encoding="utf-8", timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.rstrip("\n").split("\n")  # not splitlines: U+2028 is in a line
    assert len(lines) == len(texts)
    for text, line in zip(texts, lines, strict=True):
        digest, canonical = line.split(" ", 1)
        expected = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False)  # fmt: skip
        assert canonical == expected
        assert digest == request_hash(text)
