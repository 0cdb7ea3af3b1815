"""Log lines: JSON with the structured fields, text for people, never a token or a key."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cli_support import local_token
from turnlog.observability.logs import configure, scrub
from turnlog.tokens import write_keypair


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    kafka = logging.getLogger("aiokafka").level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    logging.getLogger("aiokafka").setLevel(kafka)


def test_json_lines_carry_the_structured_fields(restore_logging: None) -> None:
    stream = io.StringIO()
    configure("info", "json", stream=stream)
    logging.getLogger("turnlog.consumers.worker").info(
        "answer %s resumed", "a-1",
        extra={"event": "answer", "outcome": "resumed", "thread_id": "t-1", "answer_id": "a-1",
               "partition": 2, "offset": 7},
    )  # fmt: skip
    logging.getLogger("turnlog.x").debug("not at info")
    logging.getLogger("aiokafka.conn").info("chatter")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["message"] == "answer a-1 resumed" and line["level"] == "info"
    fields = ("event", "outcome", "thread_id", "answer_id", "partition", "offset")
    assert {k: line[k] for k in fields} == {
        "event": "answer", "outcome": "resumed", "thread_id": "t-1", "answer_id": "a-1",
        "partition": 2, "offset": 7,
    }  # fmt: skip


def test_a_token_or_key_that_reaches_a_message_is_never_written(
    restore_logging: None, tmp_path: Path
) -> None:
    write_keypair(tmp_path, "k1")
    token, _ = local_token(tmp_path, "thread-1")
    assert token.count(".") == 2
    pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAbc\n-----END PRIVATE KEY-----"
    for fmt in ("json", "text"):
        stream = io.StringIO()
        configure("info", fmt, stream=stream)
        log = logging.getLogger("turnlog.test")
        log.warning("refused %s", token)
        log.info("key %s", pem)
        try:
            raise ValueError(f"bad token {token}")
        except ValueError:
            log.exception("failed")
        text = stream.getvalue()
        assert token not in text and token.rsplit(".", 1)[1] not in text
        assert "MC4CAQAwBQYDK2VwBCIEIAbc" not in text
        assert text.count("[token redacted]") == 2 and "[private key redacted]" in text
    assert scrub("no secret here") == "no secret here"


def test_bad_levels_and_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="log level"):
        configure("loud", "json", stream=io.StringIO())
    with pytest.raises(ValueError, match="log format"):
        configure("info", "xml", stream=io.StringIO())
