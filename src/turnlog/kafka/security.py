"""How a process authenticates to Kafka: one value, from ``TURNLOG_KAFKA_*`` or a client.properties.

Pure (no aiokafka): ``settings.py`` holds it, ``kafka/clients.py`` turns it into client arguments.
A team already has a Java ``client.properties`` for its cluster (``kafka-console-consumer
--consumer.config``); ``from_properties`` reads that file unchanged, maps every key aiokafka can
honour and refuses by name the ones it cannot (a JKS truststore, Kerberos), because a silently
ignored ``ssl.`` or ``sasl.`` key is a connection that fails later as "not reachable".

Passwords are :class:`Secret`: their ``repr`` and ``str`` are ``***``, so no log line, error or
``--json`` output built from the value can carry one.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from turnlog.errors import SettingError

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class Secret:
    """A password that never prints itself; ``reveal()`` is the one way to read it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


#: The environment variable of each field (TURNLOG_KAFKA_CONFIG names a client.properties file).
ENV: Final[Mapping[str, str]] = {
    "protocol": "TURNLOG_KAFKA_SECURITY_PROTOCOL",
    "mechanism": "TURNLOG_KAFKA_SASL_MECHANISM",
    "username": "TURNLOG_KAFKA_SASL_USERNAME",
    "password": "TURNLOG_KAFKA_SASL_PASSWORD",
    "ca_file": "TURNLOG_KAFKA_SSL_CA_FILE",
    "cert_file": "TURNLOG_KAFKA_SSL_CERT_FILE",
    "key_file": "TURNLOG_KAFKA_SSL_KEY_FILE",
    "key_password": "TURNLOG_KAFKA_SSL_KEY_PASSWORD",
    "check_hostname": "TURNLOG_KAFKA_SSL_CHECK_HOSTNAME",
    "client_id": "TURNLOG_KAFKA_CLIENT_ID",
    "token_provider": "TURNLOG_KAFKA_OAUTH_TOKEN_PROVIDER",
}
CONFIG_ENV: Final = "TURNLOG_KAFKA_CONFIG"
_SECRETS: Final = frozenset({"password", "key_password"})
_PATHS: Final = frozenset({"ca_file", "cert_file", "key_file"})


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """Security protocol, SASL and TLS material, and client id of every Kafka client."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None
    ca_file: Path | None = None
    #: Inline PEM CA certificates (``ssl.truststore.certificates``), used beside ``ca_file``.
    ca_data: str | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    key_password: Secret | None = None
    check_hostname: bool = True
    client_id: str | None = None
    #: An aiokafka ``AbstractTokenProvider`` for OAUTHBEARER (the hook: your code fetches tokens).
    token_provider: Any = field(default=None, compare=False)
    #: ``bootstrap.servers`` of a client.properties file: used when no option or variable names one.
    bootstrap_servers: str | None = None
    #: Where the values came from (``--kafka-config FILE``, variables), for messages.
    source: str = "defaults"

    def __post_init__(self) -> None:
        where = self.source
        if self.protocol not in PROTOCOLS:
            raise SettingError(f"security.protocol ({where})", self.protocol, _one_of(PROTOCOLS))
        sasl = self.protocol.startswith("SASL_")
        if sasl:
            if self.mechanism not in MECHANISMS:
                raise SettingError(
                    f"sasl.mechanism ({where})", self.mechanism or "", _one_of(MECHANISMS)
                )
            if self.mechanism == "OAUTHBEARER":
                if self.token_provider is None:
                    raise SettingError(
                        f"sasl.mechanism ({where})",
                        "OAUTHBEARER",
                        f"needs a token provider ({ENV['token_provider']}=module:factory)",
                    )
            elif not self.username or self.password is None:
                raise SettingError(
                    f"sasl.jaas.config ({where})",
                    self.mechanism or "",
                    "needs a username and a password",
                )
        if (self.cert_file is None) != (self.key_file is None) and self.key_file is not None:
            raise SettingError(
                f"ssl.key.location ({where})", str(self.key_file), "needs a certificate file too"
            )

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """One line for a start message: protocol, mechanism and user, never a secret."""
        parts = [self.protocol]
        if self.protocol.startswith("SASL_"):
            parts.append(f"{self.mechanism}" + (f" as {self.username}" if self.username else ""))
        if self.cert_file is not None:
            parts.append(f"client certificate {self.cert_file}")
        return " ".join(parts)

    def with_(self, **changes: Any) -> KafkaSecurity:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, config_file: Path | None = None) -> KafkaSecurity:
        """The client.properties file (``config_file``, else ``TURNLOG_KAFKA_CONFIG``), with
        each ``TURNLOG_KAFKA_*`` variable overriding the file's value."""
        path = config_file
        if path is None and env.get(CONFIG_ENV):
            path = Path(env[CONFIG_ENV])
        values: dict[str, Any] = {}
        source = "environment"
        if path is not None:
            values = _file_values(path)
            source = f"--kafka-config {path}"
        for name, variable in ENV.items():
            raw = env.get(variable)
            if raw is None or raw == "":
                continue
            source = f"{source}, {variable}" if path is not None else "TURNLOG_KAFKA_*"
            if name in _SECRETS:
                values[name] = Secret(raw)
            elif name in _PATHS:
                values[name] = Path(raw)
            elif name == "check_hostname":
                values[name] = _boolean(variable, raw)
            elif name == "token_provider":
                values[name] = load_token_provider(raw, variable)
            elif name in ("protocol", "mechanism"):
                values[name] = raw.strip().upper()
            else:
                values[name] = raw.strip()
        if not values:
            return cls()
        return cls(source=source, **values)


def _one_of(choices: tuple[str, ...]) -> str:
    return "must be one of " + ", ".join(choices)


def _boolean(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingError(name, raw, "must be true or false")


def load_token_provider(spec: str, name: str) -> Any:
    """``module:attribute``: an ``AbstractTokenProvider`` instance, or a callable making one."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SettingError(name, spec, "must be module:attribute")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise SettingError(name, spec, f"cannot be loaded ({type(exc).__name__})") from None
    provider = target() if isinstance(target, type) or not hasattr(target, "token") else target
    if not callable(getattr(provider, "token", None)):
        raise SettingError(name, spec, "is not a token provider (it has no token() method)")
    return provider


# --- the Java client.properties format --------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` / ``key: value`` lines, ``#``/``!`` comments and backslash continuations --
    the subset of java.util.Properties that client.properties files use."""
    result: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        match = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            result[_unescape(line)] = ""
            continue
        result[_unescape(match.group(1))] = _unescape(match.group(2).rstrip())
    return result


def _unescape(text: str) -> str:
    table = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(1)), text)


_JAAS = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'([\w.]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;]+))')
_LOGIN_MODULES: Final[Mapping[str, str]] = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": "OAUTHBEARER",
}

#: Keys that are the tool's own business (serializers, tuning) and do not change who connects.
_IGNORED: Final = re.compile(
    r"^(key|value)\.(de)?serializer$|^(acks|linger\.ms|batch\.size|compression\.type|retries|"
    r"request\.timeout\.ms|session\.timeout\.ms|default\.api\.timeout\.ms|"
    r"retry\.backoff\.ms|reconnect\.backoff\.(max\.)?ms|metadata\.max\.age\.ms|"
    r"client\.dns\.lookup|group\.id|auto\.offset\.reset|enable\.auto\.commit|"
    r"max\.poll\.records|fetch\..*|max\.partition\.fetch\.bytes|delivery\.timeout\.ms|"
    r"enable\.idempotence|isolation\.level|ssl\.enabled\.protocols|ssl\.protocol|"
    r"ssl\.truststore\.type|ssl\.keystore\.type|sasl\.login\..*timeout.*)$"
)

#: Keys refused by name, with what to do instead.
_REFUSED: Final[Mapping[str, str]] = {
    "sasl.kerberos.service.name": "Kerberos (GSSAPI) is not supported by turnlog",
    "sasl.login.callback.handler.class": (
        f"a Java callback cannot run here: give a Python token provider in {ENV['token_provider']}"
    ),
    "sasl.client.callback.handler.class": "a Java callback cannot run here",
    "ssl.keystore.certificate.chain": (
        "inline keystore PEM is not supported: put the certificate and key in a file "
        "(ssl.keystore.location with ssl.keystore.type=PEM)"
    ),
    "ssl.keystore.key": (
        "inline keystore PEM is not supported: put the certificate and key in a file "
        "(ssl.keystore.location with ssl.keystore.type=PEM)"
    ),
    "ssl.truststore.password": "a password-protected (JKS/PKCS12) truststore cannot be read",
    "ssl.keystore.password": (
        "a JKS/PKCS12 keystore cannot be read: use ssl.keystore.type=PEM "
        "(ssl.key.password protects its key)"
    ),
    "ssl.providers": "custom JSSE providers are Java-only",
    "ssl.engine.factory.class": "custom SSL engines are Java-only",
}


def _file_values(path: Path) -> dict[str, Any]:
    where = f"--kafka-config {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingError(
            "--kafka-config", str(path), f"cannot be read ({exc.strerror})"
        ) from None
    return properties_values(parse_properties(text), where, base=path.parent)


def properties_values(props: Mapping[str, str], where: str, *, base: Path) -> dict[str, Any]:
    """The :class:`KafkaSecurity` fields a client.properties mapping sets (Java and librdkafka
    key names both); a key turnlog cannot honour raises :class:`SettingError` naming it."""
    values: dict[str, Any] = {}

    def path_of(key: str) -> Path:
        p = Path(props[key]).expanduser()
        return p if p.is_absolute() else base / p

    def refuse(key: str, why: str) -> SettingError:
        # The value may be a secret (a JAAS line): name the key, never echo the value.
        return SettingError(f"{key} ({where})", "…", why)

    for key in props:
        if key in _REFUSED:
            raise refuse(key, _REFUSED[key])
    for key, value in props.items():
        if key == "security.protocol":
            values["protocol"] = value.strip().upper()
        elif key == "sasl.mechanism":
            if value.strip().upper() == "GSSAPI":
                raise refuse(key, "Kerberos (GSSAPI) is not supported by turnlog")
            values["mechanism"] = value.strip().upper()
        elif key == "sasl.jaas.config":
            values.update(_jaas(value, refuse))
        elif key == "sasl.username":
            values["username"] = value
        elif key == "sasl.password":
            values["password"] = Secret(value)
        elif key == "ssl.truststore.location":
            kind = props.get("ssl.truststore.type", "JKS").strip().upper()
            if kind != "PEM":
                raise refuse(
                    key,
                    f"a {kind} truststore cannot be read: convert it to PEM "
                    "(keytool -exportcert -rfc) and set ssl.truststore.type=PEM",
                )
            values["ca_file"] = path_of(key)
        elif key == "ssl.truststore.certificates":
            values["ca_data"] = value
        elif key in ("ssl.ca.location", "ssl.ca.pem"):
            if key == "ssl.ca.pem":
                values["ca_data"] = value
            else:
                values["ca_file"] = path_of(key)
        elif key == "ssl.keystore.location":
            kind = props.get("ssl.keystore.type", "JKS").strip().upper()
            if kind != "PEM":
                raise refuse(
                    key,
                    f"a {kind} keystore cannot be read: export the certificate and key to one "
                    "PEM file and set ssl.keystore.type=PEM",
                )
            values["cert_file"] = values["key_file"] = path_of(key)
        elif key == "ssl.certificate.location":
            values["cert_file"] = path_of(key)
        elif key == "ssl.key.location":
            values["key_file"] = path_of(key)
        elif key == "ssl.key.password":
            values["key_password"] = Secret(value)
        elif key == "ssl.endpoint.identification.algorithm":
            values["check_hostname"] = value.strip().lower() == "https"
        elif key == "enable.ssl.certificate.verification":
            if value.strip().lower() == "false":
                raise refuse(key, "turning certificate verification off is not supported")
        elif key == "client.id":
            values["client_id"] = value.strip()
        elif key == "bootstrap.servers":
            values["bootstrap_servers"] = value.strip()
        elif key.startswith(("ssl.", "sasl.", "security.")) and not _IGNORED.match(key):
            raise refuse(key, "is not supported by turnlog's Kafka client (aiokafka)")
    return values


def _jaas(value: str, refuse: Any) -> dict[str, Any]:
    key = "sasl.jaas.config"
    match = _JAAS.match(value)
    if match is None:
        raise refuse(key, 'is not a JAAS line (LoginModule required option="value" ...;)')
    module = match.group(1)
    kind = _LOGIN_MODULES.get(module)
    if kind is None:
        raise refuse(key, f"{module} is not supported (PlainLoginModule, ScramLoginModule)")
    if kind == "OAUTHBEARER":
        return {}
    options = {
        m.group(1): _unescape(m.group(2)) if m.group(2) is not None else m.group(3)
        for m in _JAAS_OPTION.finditer(match.group(3))
    }
    if "username" not in options or "password" not in options:
        raise refuse(key, f"{module.rsplit('.', 1)[-1]} needs username and password options")
    return {"username": options["username"], "password": Secret(options["password"])}


@dataclass(frozen=True, slots=True)
class KafkaConnection:
    """Which cluster and how: what every client constructor in ``kafka/clients.py`` takes."""

    bootstrap_servers: str
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    def describe(self) -> str:
        return f"Kafka at {self.bootstrap_servers} ({self.security.describe()})"
