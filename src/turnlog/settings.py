"""One settings value for a process, read from the environment and overridable by the CLI.

Nothing in the package reads the environment on import or from deep inside a call: the value is
built once at the edge (``Settings.from_env()``) and passed down, so a test or a CLI option can
replace any field without patching globals.

Every value is checked when the settings are built, whatever it came from, and a bad one is
refused by the name the person typed (``TURNLOG_PARTITIONS``, ``--partitions``): ``partitions=0``
accepted here would only fail later, deep inside a topic creation or a partition lookup, with an
error that names neither the setting nor the value. It is one module, a little over the usual
length, because each field's variable, bounds and check belong beside the field.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

from turnlog.errors import SettingError
from turnlog.kafka.addresses import bootstrap_servers as bootstrap_servers  # re-exported
from turnlog.kafka.security import KafkaConnection, KafkaSecurity

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_PREFIX = "turnlog."

#: The environment variable of each field.
ENV: Final[Mapping[str, str]] = {
    "bootstrap_servers": "TURNLOG_BOOTSTRAP_SERVERS",
    "topic_prefix": "TURNLOG_TOPIC_PREFIX",
    "state_dir": "TURNLOG_STATE_DIR",
    "application_id": "TURNLOG_APPLICATION_ID",
    "partitions": "TURNLOG_PARTITIONS",
    "replication_factor": "TURNLOG_REPLICATION_FACTOR",
    "min_insync_replicas": "TURNLOG_MIN_INSYNC_REPLICAS",
    "create_topics": "TURNLOG_CREATE_TOPICS",
    "commit_interval_ms": "TURNLOG_COMMIT_INTERVAL_MS",
    "session_timeout_ms": "TURNLOG_SESSION_TIMEOUT_MS",
    "heartbeat_interval_ms": "TURNLOG_HEARTBEAT_INTERVAL_MS",
    "keys_dir": "TURNLOG_KEYS_DIR",
    "issuer": "TURNLOG_ISSUER",
    "audience": "TURNLOG_AUDIENCE",
    "token_ttl_seconds": "TURNLOG_TOKEN_TTL_SECONDS",
    "token_leeway_seconds": "TURNLOG_TOKEN_LEEWAY_SECONDS",
    "ledger_keep_seconds": "TURNLOG_LEDGER_KEEP_SECONDS",
    "finalize_timeout_seconds": "TURNLOG_FINALIZE_TIMEOUT",
    "broker_timeout_seconds": "TURNLOG_BROKER_TIMEOUT",
    "connect_timeout_seconds": "TURNLOG_CONNECT_TIMEOUT",
    "max_record_bytes": "TURNLOG_MAX_RECORD_BYTES",
    "max_answer_bytes": "TURNLOG_MAX_ANSWER_BYTES",
    "wire": "TURNLOG_WIRE",
    "schema_registry_url": "TURNLOG_SCHEMA_REGISTRY_URL",
    "seal": "TURNLOG_SEAL",
}
#: The framings a process may write (``wire``); every process reads both.
WIRES: Final = ("single-object", "registry")

# The smallest value of each whole-number field.
_MIN_INT: Final[Mapping[str, int]] = {
    "partitions": 1,
    "replication_factor": 1,
    # 0: the broker's own default (min.insync.replicas is then not set on the topics).
    "min_insync_replicas": 0,
    "commit_interval_ms": 1,
    # Below a second a worker's heartbeats every few hundred ms are all that keeps it owning.
    "session_timeout_ms": 1000,
    # 0: a third of the session timeout, at most a second (``Settings.heartbeat_ms``).
    "heartbeat_interval_ms": 0,
    # A zero window would be a token that is expired when it is handed out.
    "token_ttl_seconds": 1,
    "token_leeway_seconds": 0,
    "ledger_keep_seconds": 0,
    "finalize_timeout_seconds": 1,
    "max_record_bytes": 1,
    "max_answer_bytes": 1,
}
_TEXT: Final = ("bootstrap_servers", "topic_prefix", "application_id", "issuer", "audience")
_PATHS: Final = ("state_dir", "keys_dir")
_BOOLS: Final = ("create_topics", "seal")
_SECONDS: Final = ("broker_timeout_seconds", "connect_timeout_seconds")
# Kafka's legal topic-name characters; the prefix leaves room for the longest suffix.
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]{1,200}")
#: What a topic prefix ends in: the prefix is joined to ``pauses``, ``answers``, ... as it is.
PREFIX_ENDINGS: Final = (".", "-", "_")

#: ``TURNLOG_*`` variables read elsewhere than these settings (keys, logs, metrics, notifier,
#: the compiled modules): never taken for a misspelling of a setting.
OTHER_VARIABLES: Final = frozenset(
    {
        "TURNLOG_SIGNING_KID",
        "TURNLOG_SIGNING_KEY_PEM",
        "TURNLOG_INSTANCE_ID",
        "TURNLOG_STANDBY",
        "TURNLOG_LOG_LEVEL",
        "TURNLOG_LOG_FORMAT",
        "TURNLOG_METRICS_PORT",
        "TURNLOG_INBOX_URL",
        "TURNLOG_PURE_PYTHON",
        "TURNLOG_NATIVE_SOURCE",
    }
)
#: Families of variables with their own readers (``kafka/security.py``, the notifier).
_OTHER_FAMILIES: Final = ("TURNLOG_KAFKA_", "TURNLOG_NOTIFY_", "TURNLOG_INBOX_", "TURNLOG_HS")


class SettingWarning(UserWarning):
    """A ``TURNLOG_*`` variable that no setting reads but is one letter or two from one that
    does: a typo would otherwise be ignored in silence and the default used instead."""


def misspelled(env: Mapping[str, str]) -> list[str]:
    """One line for each ``TURNLOG_*`` variable in ``env`` that nothing reads and that is close
    to a setting's variable (``TURNLOG_PARTITONS``: did you mean ``TURNLOG_PARTITIONS``?)."""
    known = set(ENV.values())
    lines = []
    for name in sorted(env):
        if not name.startswith("TURNLOG_") or name in known or name in OTHER_VARIABLES:
            continue
        if name.startswith(_OTHER_FAMILIES):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
        if close:
            lines.append(
                f"{name} is not a turnlog setting and is ignored; did you mean {close[0]}?"
            )
    return lines


def _no_field(unknown: set[str] | list[str]) -> str:
    """What ``Settings`` says of keywords that are not its fields, with the closest field."""
    known = sorted(f.name for f in fields(Settings))
    said = []
    for name in sorted(unknown):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        said.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return f"Settings has no field(s) {', '.join(said)}"


def problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be the setting ``name`` (a field name), or ``None`` when it can."""
    if name in _MIN_INT:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be a whole number"
        if value < _MIN_INT[name]:
            return f"must be at least {_MIN_INT[name]}"
    elif name in _SECONDS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number of seconds"
        if not math.isfinite(value) or value <= 0:
            return "must be a finite number of seconds above 0"
    elif name in _TEXT:
        if not isinstance(value, str) or not value.strip():
            return "must not be empty"
        if name == "bootstrap_servers":
            try:
                bootstrap_servers(value)
            except ValueError as exc:
                return str(exc)
        if name == "topic_prefix" and not _TOPIC_CHARS.fullmatch(value):
            return "a topic prefix is 1-200 of the letters, digits, '.', '_' and '-' Kafka allows"
        if name == "topic_prefix" and not value.endswith(PREFIX_ENDINGS):
            return (
                f"a topic prefix ends in '.', '-' or '_': it is put before each topic's name as "
                f"it is, so this one would name the topics {value}pauses, {value}answers, ... "
                f"(did you mean {value + '.'!r}?)"
            )
    elif name == "wire":
        if value not in WIRES:
            return f"must be one of {', '.join(WIRES)}"
    elif name == "schema_registry_url":
        if not isinstance(value, str):
            return "must be a URL"
        if value and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            return "must be an http:// or https:// URL (credentials as https://key:secret@host)"
    elif name in _PATHS and not isinstance(value, Path):
        return "must be a path"
    elif name in _BOOLS and not isinstance(value, bool):
        return "must be true or false"
    return None


def local_bootstrap(env: Mapping[str, str], from_file: str | None = None) -> str | None:
    """The broker when neither ``--bootstrap-servers`` nor ``TURNLOG_BOOTSTRAP_SERVERS`` names
    one: a client.properties file's ``bootstrap.servers``, else the local broker's own
    ``KAFKA_LOCAL_HOST``/``KAFKA_LOCAL_PORT`` (what ``turnlog broker up`` started), else
    ``None`` (the default). One order for every verb, so a moved local broker is never missed."""
    if from_file:
        return from_file
    host, port = env.get("KAFKA_LOCAL_HOST"), env.get("KAFKA_LOCAL_PORT")
    if not host and not port:
        return None
    return f"{host or '127.0.0.1'}:{port or '9092'}"


def _parse_int(raw: str) -> int:
    return int(raw.strip())


def _parse_float(raw: str) -> float:
    return float(raw.strip())


def _parser(name: str) -> Callable[[str], Any]:
    if name in _MIN_INT:
        return _parse_int
    if name in _SECONDS:
        return _parse_float
    if name in _PATHS:
        return Path
    if name in _BOOLS:
        return _parse_bool
    return str


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the broker is and how a deployment is shaped: one frozen value per process.

    Build it once at the edge -- ``Settings.from_env()`` reads each field from its ``TURNLOG_*``
    variable (the ``ENV`` mapping: ``partitions`` from ``TURNLOG_PARTITIONS``, ...), keyword
    overrides win -- and pass it down; ``with_(...)`` gives a changed copy. Every value is
    checked when the value is built, and a bad one raises :class:`SettingError` naming the
    variable or option it came from, never later and deep inside a Kafka call.

    Every process of one deployment needs the same ``topic_prefix``, ``partitions`` and
    ``application_id`` (the topics' names and the worker group), and verifying processes the
    same ``issuer``, ``audience`` and keys.
    """

    #: The Kafka bootstrap servers, ``host:port[,host:port...]``.
    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    #: The prefix of the five topics' names (``<prefix>pauses``, ``<prefix>answers``, ...).
    topic_prefix: str = DEFAULT_PREFIX
    #: Where this process keeps its local stores (one process per directory).
    state_dir: Path = field(default_factory=lambda: Path(".turnlog/state"))
    #: The worker group's id and the prefix of the workers' transactional ids.
    application_id: str = "turnlog"
    #: Partitions of every topic of the set; fixed once the topics exist.
    partitions: int = 6
    #: Replication of the topics turnlog creates (managed services refuse 1; use 3 there).
    replication_factor: int = 1
    #: ``min.insync.replicas`` set on the topics turnlog creates; 0 leaves the broker's default.
    min_insync_replicas: int = 0
    #: False: no process creates topics (an operator applies ``turnlog topics plan``);
    #: readiness then only verifies them and refuses a missing or mismatched one by name.
    create_topics: bool = True
    #: How long answers may share one worker transaction before it commits.
    commit_interval_ms: int = 100
    #: How long the worker group waits for a silent worker (killed, paused by a GC, cut off)
    #: before its partitions move: the detection part of every takeover after a crash. The
    #: broker refuses a value outside its ``group.min.session.timeout.ms`` (6 s by default) ..
    #: ``group.max.session.timeout.ms``; lower is a faster failover and more false ones.
    session_timeout_ms: int = 10000
    #: How often a worker tells the group it is alive, and learns of a rebalance; 0 is a third
    #: of the session timeout, at most a second. At most a third of the session timeout.
    heartbeat_interval_ms: int = 0
    #: The token keys: ``<kid>.private.pem`` signs, every key verifies.
    keys_dir: Path = field(default_factory=lambda: Path(".turnlog/keys"))
    #: The tokens' ``iss`` and ``aud`` claims, checked at verification.
    issuer: str = "turnlog"
    audience: str = "turnlog-answers"
    #: A pause's window: unanswered this long, it expires.
    token_ttl_seconds: int = 7 * 24 * 3600
    #: Clock skew allowed when checking a token's window.
    token_leeway_seconds: int = 5
    #: How long a spent token's ledger row is kept past its window and the leeway before its
    #: owner retires it (``contracts/ledger.py``): a margin for clocks further apart than the
    #: leeway, and a week by default, the retention of the topics the audit pairs rows with.
    ledger_keep_seconds: int = 7 * 24 * 3600
    #: How long a pause written unfinalized (``pause(..., finalized=False)``) may wait for its
    #: finalization before its owner expires it (reason ``unfinalized``: its writer died).
    finalize_timeout_seconds: int = 300
    #: How long a client keeps retrying an unreachable broker before giving up (a rolling
    #: restart of a three-node cluster takes a few minutes; the CLI then exits 4).
    broker_timeout_seconds: float = 300.0
    #: How long a process waits for its *first* answer from an address (then
    #: ``BrokerUnavailable``, exit 4). A broker never reached is a wrong address, a closed port
    #: or a broker not started, not an outage: waiting the outage budget for it only hides the
    #: mistake. Never longer than ``broker_timeout_seconds``.
    connect_timeout_seconds: float = 15.0
    #: The largest key + value the worker writes to one record. Kafka's producer refuses
    #: records over ``max.request.size`` (1 MiB by default) *inside* a transaction, so an
    #: output that could not fit is refused up front (``answer_too_large``) instead.
    max_record_bytes: int = 1_000_000
    #: The largest answer value a publisher sends. Its resumed turn repeats the response next to
    #: the checkpoint's history, so an answer must stay well under ``max_record_bytes``.
    max_answer_bytes: int = 256 * 1024
    #: The framing records are written in: ``single-object`` (Avro single-object encoding,
    #: the default) or ``registry`` (a schema registry's: ``00``, the schema id, the body;
    #: needs ``schema_registry_url``). Both are read whichever is written.
    wire: str = "single-object"
    #: A Confluent-compatible schema registry (``https://key:secret@host`` for basic
    #: credentials), or empty: needed to write the registry wire and to read its records.
    schema_registry_url: str = ""
    #: The worker seals every resumed turn it writes under a key of the turn's own, kept on
    #: the compacted ``<prefix>keys`` topic, so that ``forget`` (which tombstones the thread's
    #: keys) makes every copy of the thread's resumed turns unreadable at once: on the topic
    #: for its retention, in a mirror, in a backup (``wire/sealing.py``). Readers open sealed
    #: turns whatever this says.
    seal: bool = False
    #: How every Kafka client connects: security protocol, SASL, TLS, client id
    #: (``TURNLOG_KAFKA_*`` or a client.properties file, ``kafka/security.py``).
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)

    @property
    def heartbeat_ms(self) -> int:
        """The worker's heartbeat interval: the one set, else a third of the session timeout
        (at most a second), so a lost heartbeat or two never ends a live worker's membership."""
        return self.heartbeat_interval_ms or min(1000, self.session_timeout_ms // 3)

    @property
    def connection(self) -> KafkaConnection:
        """The broker and how to reach it, for ``kafka/clients.py``."""
        return KafkaConnection(self.bootstrap_servers, self.kafka)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            why = problem(f.name, value)
            if why is not None:
                raise SettingError(f.name, value, why)
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            raise SettingError(
                "heartbeat_interval_ms (TURNLOG_HEARTBEAT_INTERVAL_MS)",
                self.heartbeat_interval_ms,
                f"must be at most a third of the session timeout ({self.session_timeout_ms} ms, "
                "TURNLOG_SESSION_TIMEOUT_MS): one heartbeat lost or late must not end a live "
                "worker's membership",
            )
        if self.wire == "registry" and not self.schema_registry_url:
            raise SettingError(
                "wire (TURNLOG_WIRE)",
                self.wire,
                "the registry wire needs a schema registry: set schema_registry_url "
                "(TURNLOG_SCHEMA_REGISTRY_URL)",
            )

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        names: Mapping[str, str] | None = None,
        kafka_config: Path | None = None,
        **overrides: Any,
    ) -> Settings:
        """Settings from ``TURNLOG_*`` variables; keyword overrides (CLI options) win.

        A bad value raises :class:`SettingError` naming its variable, or for an override the
        name ``names`` gives it (the CLI passes its option names), else the field's name. A
        variable whose field is overridden is not read at all.
        """
        e = os.environ if env is None else env
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(_no_field(unknown))
        for line in misspelled(e):
            warnings.warn(SettingWarning(line), stacklevel=2)
        values: dict[str, Any] = {}
        security = overrides.get("kafka") or KafkaSecurity.from_env(e, config_file=kafka_config)
        values["kafka"] = security
        for name in sorted(known):
            given = overrides.get(name)
            if name == "kafka":
                continue
            if given is not None:
                if name in _PATHS and isinstance(given, str):
                    given = Path(given)
                why = problem(name, given)
                if why is not None:
                    raise SettingError((names or {}).get(name, name), given, why)
                values[name] = given
                continue
            variable = ENV[name]
            raw = e.get(variable)
            if raw is None and name == "schema_registry_url" and security.schema_registry_url:
                raw = security.schema_registry_url.reveal()
                variable = f"schema.registry.url ({security.source})"
            if raw is None and name == "bootstrap_servers":
                raw = local_bootstrap(e, security.bootstrap_servers)
                # A bad value is named by where it came from: the file, or the local broker's.
                if raw is not None and raw == security.bootstrap_servers:
                    variable = f"bootstrap.servers ({security.source})"
                elif raw is not None:
                    variable = "KAFKA_LOCAL_HOST/KAFKA_LOCAL_PORT"
            if raw is None:
                continue
            try:
                parsed = _parser(name)(raw)
            except ValueError:
                kind = (
                    "a whole number"
                    if name in _MIN_INT
                    else "true or false"
                    if name in _BOOLS
                    else "a number"
                )
                raise SettingError(variable, raw, f"is not {kind}") from None
            why = problem(name, parsed)
            if why is not None:
                shown = re.sub(r"//[^@/]*@", "//…@", raw)  # a URL's credentials are not shown
                raise SettingError(variable, shown, why)
            values[name] = parsed
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied, checked like any other value."""
        return replace(self, **changes)


_dataclass_init = Settings.__init__


@functools.wraps(_dataclass_init)
def _init(self: Settings, *args: Any, **kwargs: Any) -> None:
    # A keyword that is no field says which field was meant, not only "unexpected keyword".
    unknown = set(kwargs) - {f.name for f in fields(Settings)}
    if unknown:
        raise TypeError(_no_field(unknown))
    _dataclass_init(self, *args, **kwargs)


setattr(Settings, "__init__", _init)  # noqa: B010 -- a method cannot be assigned otherwise
