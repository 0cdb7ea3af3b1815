"""One settings value for a process, read from the environment and overridable by the CLI.

Nothing in the package reads the environment on import or from deep inside a call: the value is
built once at the edge (``Settings.from_env()``) and passed down, so a test or a CLI option can
replace any field without patching globals.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_PREFIX = "turnlog."


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    topic_prefix: str = DEFAULT_PREFIX
    state_dir: Path = field(default_factory=lambda: Path(".turnlog/state"))
    application_id: str = "turnlog"
    partitions: int = 6
    replication_factor: int = 1
    commit_interval_ms: int = 100
    keys_dir: Path = field(default_factory=lambda: Path(".turnlog/keys"))
    issuer: str = "turnlog"
    audience: str = "turnlog-answers"
    token_ttl_seconds: int = 7 * 24 * 3600
    token_leeway_seconds: int = 5
    #: How long a client keeps retrying an unreachable broker before giving up (a rolling
    #: restart of a three-node cluster takes a few minutes; the CLI then exits 4).
    broker_timeout_seconds: float = 300.0
    #: The largest key + value the worker writes to one record. Kafka's producer refuses
    #: records over ``max.request.size`` (1 MiB by default) *inside* a transaction, so an
    #: output that could not fit is refused up front (``answer_too_large``) instead.
    max_record_bytes: int = 1_000_000
    #: The largest answer value a publisher sends. Its resumed turn repeats the response next to
    #: the checkpoint's history, so an answer must stay well under ``max_record_bytes``.
    max_answer_bytes: int = 256 * 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``TURNLOG_*`` variables; keyword overrides (CLI options) win."""
        e = os.environ if env is None else env
        base = cls()
        values: dict[str, Any] = {
            "bootstrap_servers": e.get("TURNLOG_BOOTSTRAP_SERVERS", base.bootstrap_servers),
            "topic_prefix": e.get("TURNLOG_TOPIC_PREFIX", base.topic_prefix),
            "state_dir": Path(e.get("TURNLOG_STATE_DIR", str(base.state_dir))),
            "application_id": e.get("TURNLOG_APPLICATION_ID", base.application_id),
            "partitions": int(e.get("TURNLOG_PARTITIONS", base.partitions)),
            "replication_factor": int(e.get("TURNLOG_REPLICATION_FACTOR", base.replication_factor)),
            "commit_interval_ms": int(e.get("TURNLOG_COMMIT_INTERVAL_MS", base.commit_interval_ms)),
            "keys_dir": Path(e.get("TURNLOG_KEYS_DIR", str(base.keys_dir))),
            "issuer": e.get("TURNLOG_ISSUER", base.issuer),
            "audience": e.get("TURNLOG_AUDIENCE", base.audience),
            "token_ttl_seconds": int(e.get("TURNLOG_TOKEN_TTL_SECONDS", base.token_ttl_seconds)),
            "token_leeway_seconds": int(
                e.get("TURNLOG_TOKEN_LEEWAY_SECONDS", base.token_leeway_seconds)
            ),
            "broker_timeout_seconds": float(
                e.get("TURNLOG_BROKER_TIMEOUT", base.broker_timeout_seconds)
            ),
            "max_record_bytes": int(e.get("TURNLOG_MAX_RECORD_BYTES", base.max_record_bytes)),
            "max_answer_bytes": int(e.get("TURNLOG_MAX_ANSWER_BYTES", base.max_answer_bytes)),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)
