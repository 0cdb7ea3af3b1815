"""Log lines an operator can read, or a collector can parse, and that never carry a secret.

``configure`` sets the root handler once for a long-running verb: ``text`` (one readable line)
or ``json`` (one object per line, with the structured fields a component passes as ``extra``:
``event``, ``outcome``, ``reason``, ``thread_id``, ``answer_id``, ``partition``, ``offset``,
``change``). The Kafka client's own loggers are set apart (``kafka_level``): at DEBUG they
write a line per fetch, and at ERROR a line per reconnect attempt while the broker is away.

Every line goes through :func:`scrub` last: a pause token (a compact JWT) or a PEM private key
that reached a message -- say inside an exception's text -- is replaced before it is written.
turnlog's own lines never put a token in; this is the net under them.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

#: The structured fields a turnlog log call may pass as ``extra``.
FIELDS = ("event", "outcome", "reason", "thread_id", "answer_id", "partition", "offset", "change")
LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")

_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)


def scrub(text: str) -> str:
    """``text`` with every JWT and PEM private key replaced by a marker."""
    if "eyJ" in text:
        text = _JWT.sub("[token redacted]", text)
    if "PRIVATE KEY" in text:
        text = _PEM.sub("[private key redacted]", text)
    return text


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the structured fields, and the
    exception (type and text) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return scrub(json.dumps(data, default=str, ensure_ascii=False))


def configure(
    level: str = "info",
    fmt: str = "text",
    *,
    kafka_level: str = "warning",
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Route every log line to one handler on ``stream`` (stderr) in ``fmt``; returns it."""
    if level.lower() not in LEVELS or kafka_level.lower() not in (*LEVELS, "critical"):
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("turnlog").setLevel(logging.NOTSET)
    logging.getLogger("aiokafka").setLevel(kafka_level.upper())
    return handler
