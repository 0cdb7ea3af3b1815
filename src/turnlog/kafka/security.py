"""How a process authenticates to Kafka: one value, from ``TURNLOG_KAFKA_*`` or a client.properties.

Pure (no aiokafka): ``settings.py`` holds it, ``kafka/clients.py`` turns it into client arguments.
A team already has a Java ``client.properties`` for its cluster (``kafka-console-consumer
--consumer.config``); ``from_properties`` reads that file unchanged, maps every key aiokafka can
honour and refuses by name the ones it cannot (a JKS store, Kerberos), because a silently
ignored ``ssl.`` or ``sasl.`` key is a connection that fails later as "not reachable".

Key and trust stores (PKCS12 with its password, PEM inline) are read when the value is made
(``kafka/keystores.py``): a wrong password or a JKS store is refused at start, naming the
setting, and every client then takes the same material from memory.

Passwords are :class:`Secret`: their ``repr`` and ``str`` are ``***``, so no log line, error or
``--json`` output built from the value can carry one.

It is one module, over the usual length, because the value and its three sources -- the
client.properties keys, the ``TURNLOG_KAFKA_*`` variables, the library's fields -- must map
onto each other exactly, and every refusal names the setting it came from (``origins``); split,
a key added to one source would be missed by another.
"""

from __future__ import annotations

import importlib
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from turnlog.errors import SettingError
from turnlog.kafka import keystores
from turnlog.kafka.keystores import StoreNames, TlsMaterial
from turnlog.kafka.oauth import ClientCredentials, ClientCredentialsProvider
from turnlog.kafka.secret import Secret

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


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
    # The Java keys' own names, upper-cased: ssl.truststore.location -> ..._SSL_TRUSTSTORE_LOCATION.
    "truststore": "TURNLOG_KAFKA_SSL_TRUSTSTORE_LOCATION",
    "truststore_type": "TURNLOG_KAFKA_SSL_TRUSTSTORE_TYPE",
    "truststore_password": "TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD",
    "ca_data": "TURNLOG_KAFKA_SSL_TRUSTSTORE_CERTIFICATES",
    "keystore": "TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION",
    "keystore_type": "TURNLOG_KAFKA_SSL_KEYSTORE_TYPE",
    "keystore_password": "TURNLOG_KAFKA_SSL_KEYSTORE_PASSWORD",
    "cert_data": "TURNLOG_KAFKA_SSL_KEYSTORE_CERTIFICATE_CHAIN",
    "key_data": "TURNLOG_KAFKA_SSL_KEYSTORE_KEY",
    "check_hostname": "TURNLOG_KAFKA_SSL_CHECK_HOSTNAME",
    "client_id": "TURNLOG_KAFKA_CLIENT_ID",
    "token_provider": "TURNLOG_KAFKA_OAUTH_TOKEN_PROVIDER",
    # OAUTHBEARER's client-credentials grant, named after the Java keys (kafka/oauth.py).
    "oauth_token_endpoint": "TURNLOG_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL",
    "oauth_client_id": "TURNLOG_KAFKA_SASL_OAUTHBEARER_CLIENT_ID",
    "oauth_client_secret": "TURNLOG_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET",
    "oauth_scope": "TURNLOG_KAFKA_SASL_OAUTHBEARER_SCOPE",
}
CONFIG_ENV: Final = "TURNLOG_KAFKA_CONFIG"
_SECRETS: Final = frozenset(
    {
        "password",
        "key_password",
        "truststore_password",
        "keystore_password",
        "key_data",
        "oauth_client_secret",
    }
)
_PATHS: Final = frozenset({"ca_file", "cert_file", "key_file", "truststore", "keystore"})
_TYPES: Final = frozenset({"truststore_type", "keystore_type"})
#: The client.properties key of each TLS field, for messages about a field that is not set.
_JAVA_KEYS: Final[Mapping[str, str]] = {
    "truststore": "ssl.truststore.location",
    "truststore_type": "ssl.truststore.type",
    "truststore_password": "ssl.truststore.password",
    "ca_file": "ssl.truststore.location",
    "ca_data": "ssl.truststore.certificates",
    "keystore": "ssl.keystore.location",
    "keystore_type": "ssl.keystore.type",
    "keystore_password": "ssl.keystore.password",
    "cert_file": "ssl.keystore.location",
    "key_file": "ssl.key.location",
    "cert_data": "ssl.keystore.certificate.chain",
    "key_data": "ssl.keystore.key",
    "key_password": "ssl.key.password",
}


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
    #: The password of the client's private key (``ssl.key.password``): of a PEM key, or of a
    #: PKCS12 keystore's key (which is then its store's password too).
    key_password: Secret | None = None
    #: A truststore file not declared PEM (``ssl.truststore.location``): PKCS12, or PEM text,
    #: judged by its bytes; ``truststore_type`` is the declared type (``None``: not declared).
    truststore: Path | None = None
    truststore_type: str | None = None
    truststore_password: Secret | None = None
    #: A client keystore file (``ssl.keystore.location``) not declared PEM: PKCS12 (mutual TLS).
    keystore: Path | None = None
    keystore_type: str | None = None
    keystore_password: Secret | None = None
    #: Inline PEM client certificate chain and key (``ssl.keystore.certificate.chain`` and
    #: ``ssl.keystore.key``, with ``ssl.keystore.type=PEM``); ``key_password`` decrypts the key.
    cert_data: str | None = None
    key_data: Secret | None = None
    check_hostname: bool = True
    client_id: str | None = None
    #: An aiokafka ``AbstractTokenProvider`` for OAUTHBEARER (the hook: your code fetches tokens).
    token_provider: Any = field(default=None, compare=False)
    #: OAUTHBEARER's client-credentials grant (``sasl.oauthbearer.token.endpoint.url`` and the
    #: JAAS line's ``clientId``, ``clientSecret``, ``scope``): turnlog's own token provider.
    oauth_token_endpoint: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: Secret | None = None
    oauth_scope: str | None = None
    #: ``bootstrap.servers`` of a client.properties file: used when no option or variable names one.
    bootstrap_servers: str | None = None
    #: ``schema.registry.url`` of a client.properties file (``basic.auth.user.info`` folded in
    #: as the URL's credentials), likewise: ``TURNLOG_SCHEMA_REGISTRY_URL`` comes first.
    schema_registry_url: Secret | None = None
    #: Where the values came from (``--kafka-config FILE``, variables), for messages.
    source: str = "defaults"
    #: The setting each field came from, as a message names it (``ssl.truststore.password
    #: (--kafka-config FILE)``, ``TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD``); see :meth:`setting`.
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: The stores, read once by ``__post_init__``: what ``kafka/clients.py`` loads.
    _material: TlsMaterial = field(
        default_factory=TlsMaterial, init=False, compare=False, repr=False
    )

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
                if self.token_provider is None and self.oauth_token_endpoint:
                    object.__setattr__(self, "token_provider", self._client_credentials())
                if self.token_provider is None:
                    raise SettingError(
                        f"sasl.mechanism ({where})",
                        "OAUTHBEARER",
                        "needs a token endpoint (sasl.oauthbearer.token.endpoint.url, with "
                        "clientId and clientSecret in the JAAS line) or a token provider "
                        f"({ENV['token_provider']}=module:factory)",
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
        object.__setattr__(self, "_material", self._read_stores())

    def _client_credentials(self) -> ClientCredentialsProvider:
        endpoint = self.setting("oauth_token_endpoint")
        if not self.oauth_client_id or self.oauth_client_secret is None:
            raise SettingError(
                f"sasl.jaas.config ({self.source})",
                "…",
                "OAUTHBEARER with a token endpoint needs clientId and clientSecret options",
            )
        try:
            credentials = ClientCredentials(
                str(self.oauth_token_endpoint),
                self.oauth_client_id,
                self.oauth_client_secret,
                self.oauth_scope or None,
            )
        except ValueError as exc:
            raise SettingError(endpoint, str(self.oauth_token_endpoint), str(exc)) from None
        return ClientCredentialsProvider(credentials)

    def _read_stores(self) -> TlsMaterial:
        """Check how the TLS fields combine, as Java does, and read the stores they name."""
        named = self.setting
        hidden = "…"
        clients = [f for f in ("keystore", "cert_file", "cert_data") if getattr(self, f)]
        if len(clients) > 1:
            raise SettingError(
                named(clients[1]),
                hidden,
                f"and {named(clients[0])} both give the client certificate: give one",
            )
        if (self.cert_data is None) != (self.key_data is None):
            pair = ("cert_data", "key_data")
            have, missing = pair if self.key_data is None else pair[::-1]
            raise SettingError(named(missing), "", f"is needed with {named(have)}")
        if self.truststore_password is not None and self.truststore is None:
            why = (
                "a PEM truststore has no password (Java refuses it too): leave it unset"
                if self.ca_file is not None or self.ca_data is not None
                else f"is set, but {named('truststore')} names no truststore"
            )
            raise SettingError(named("truststore_password"), hidden, why)
        if self.keystore_password is not None and self.keystore is None:
            why = (
                "a PEM keystore has no store password (Java refuses it too): "
                f"its key's password is {_bare(named('key_password'))}"
                if self.cert_file is not None or self.cert_data is not None
                else f"is set, but {named('keystore')} names no keystore"
            )
            raise SettingError(named("keystore_password"), hidden, why)
        for kind, path in (("truststore", self.ca_file), ("keystore", self.cert_file)):
            if path is not None:
                keystores.check_pem_file(
                    path, self._names(kind, "ca_file" if kind == "truststore" else "cert_file")
                )
        cadata: list[str] = []
        if self.ca_data is not None:
            cadata.append(keystores.pem_certificates(self.ca_data, named("ca_data")))
        if self.truststore is not None:
            cadata.append(
                keystores.read_truststore(
                    self.truststore,
                    self.truststore_type,
                    _reveal(self.truststore_password),
                    self._names("truststore"),
                )
            )
        client = None
        if self.keystore is not None:
            client = keystores.read_keystore(
                self.keystore,
                self.keystore_type,
                _reveal(self.keystore_password),
                _reveal(self.key_password),
                self._names("keystore"),
            )
        elif self.cert_data is not None and self.key_data is not None:
            client = keystores.pem_keystore(
                self.cert_data,
                self.key_data.reveal(),
                _reveal(self.key_password),
                named("cert_data"),
                named("key_password"),
                "inline PEM",
                key_name=named("key_data"),
            )
        return TlsMaterial(cadata="".join(cadata) or None, client=client)

    def setting(self, name: str) -> str:
        """How a message names field ``name``: the key or variable it came from, or -- not
        set -- the one it would come from, beside the store it belongs to."""
        if name in self.origins:
            return self.origins[name]
        anchor = next(
            (self.origins[f] for f in _ANCHORS.get(name, ()) if f in self.origins),
            None,
        )
        if anchor is not None and anchor.startswith("TURNLOG_") and name in ENV:
            return ENV[name]
        if anchor is not None and " (" in anchor and name in _JAVA_KEYS:
            return f"{_JAVA_KEYS[name]} ({anchor.split(' (', 1)[1]}"
        return f"KafkaSecurity.{name}"

    def _names(self, store: str, location: str | None = None) -> StoreNames:
        where = self.setting(location or store)
        kind = self.setting(f"{store}_type")
        return StoreNames(
            location=where,
            password=self.setting(f"{store}_password"),
            type=kind,
            key_password=self.setting("key_password"),
            location_key=_bare(where),
            type_key=_bare(kind),
        )

    @property
    def material(self) -> TlsMaterial:
        """The CAs and the client certificate the stores hold, read when this value was made."""
        return self._material

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """One line for a start message: protocol, mechanism and user, never a secret."""
        parts = [self.protocol]
        if self.protocol.startswith("SASL_"):
            parts.append(f"{self.mechanism}" + (f" as {self.username}" if self.username else ""))
        if self.truststore is not None:
            parts.append(f"truststore {self.truststore}")
        client = self._material.client
        if client is not None:
            parts.append(f"client certificate {client.subject} ({self.keystore or 'inline PEM'})")
        elif self.cert_file is not None:
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
        origins: dict[str, str] = {}
        source = "environment"
        if path is not None:
            values = _file_values(path, origins)
            source = f"--kafka-config {path}"
        for store in ("truststore", "keystore"):
            if env.get(ENV[store]) or env.get(ENV[f"{store}_type"]):
                _replace_files_store(store, values, origins, env)
        for name, variable in ENV.items():
            raw = env.get(variable)
            if raw is None or raw == "":
                continue
            source = f"{source}, {variable}" if path is not None else "TURNLOG_KAFKA_*"
            origins[name] = variable
            if name in _SECRETS:
                values[name] = Secret(raw)
            elif name in _PATHS:
                values[name] = Path(raw)
            elif name in _TYPES:
                values[name] = raw.strip().upper()
            elif name in ("ca_data", "cert_data"):
                values[name] = raw
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
        return cls(source=source, origins=origins, **values)


#: The fields whose setting names an unset field's setting (its store's location, first).
_ANCHORS: Final[Mapping[str, tuple[str, ...]]] = {
    "truststore_password": ("truststore", "ca_file", "ca_data"),
    "truststore_type": ("truststore", "ca_file", "ca_data"),
    "keystore_password": ("keystore", "cert_file", "cert_data"),
    "keystore_type": ("keystore", "cert_file", "cert_data"),
    "key_password": ("keystore", "cert_data", "key_data", "cert_file"),
    "key_data": ("cert_data",),
    "cert_data": ("key_data",),
    "truststore": ("truststore_password", "truststore_type"),
    "keystore": ("keystore_password", "keystore_type", "key_password"),
}


def _bare(label: str) -> str:
    """``ssl.truststore.type (--kafka-config f)`` -> ``ssl.truststore.type``."""
    return label.split(" (", 1)[0]


def _reveal(secret: Secret | None) -> str | None:
    return secret.reveal() if secret is not None else None


def _replace_files_store(
    store: str, values: dict[str, Any], origins: dict[str, str], env: Mapping[str, str]
) -> None:
    """A ``TURNLOG_KAFKA_SSL_<STORE>_LOCATION`` or ``_TYPE`` variable overrides the file's
    ``ssl.<store>.location``/``.type``, whichever field the file's type had put it in (a PEM
    location is ``ca_file``/``cert_file``, any other ``truststore``/``keystore``)."""
    key = f"ssl.{store}.location "
    pem_fields = ("ca_file",) if store == "truststore" else ("cert_file", "key_file")
    from_file = [f for f in pem_fields if origins.get(f, "").startswith(key)]
    # Only the type changes: the file's location moves to the field that reads any type.
    if not env.get(ENV[store]) and from_file and store not in values:
        values[store] = values[from_file[0]]
        origins[store] = origins[from_file[0]]
    for name in from_file:
        values.pop(name, None)
        origins.pop(name, None)
    kind = f"{store}_type"
    if env.get(ENV[store]) and not env.get(ENV[kind]) and kind in values:
        values.pop(kind)  # the variable's file is judged by its own bytes
        origins.pop(kind, None)


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

#: Kafka's client-credentials login handler (3.x and 4.x names): what kafka/oauth.py does.
_JAVA_OAUTH_HANDLERS: Final = frozenset(
    {
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
    }
)

#: Keys refused by name, with what to do instead.
_REFUSED: Final[Mapping[str, str]] = {
    "sasl.kerberos.service.name": "Kerberos (GSSAPI) is not supported by turnlog",
    "sasl.login.callback.handler.class": (
        "a Java callback cannot run here: give the token endpoint "
        "(sasl.oauthbearer.token.endpoint.url) or a Python token provider in "
        f"{ENV['token_provider']}"
    ),
    "sasl.client.callback.handler.class": "a Java callback cannot run here",
    "ssl.providers": "custom JSSE providers are Java-only",
    "ssl.engine.factory.class": "custom SSL engines are Java-only",
}


def _file_values(path: Path, origins: dict[str, str]) -> dict[str, Any]:
    where = f"--kafka-config {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingError(
            "--kafka-config", str(path), f"cannot be read ({exc.strerror})"
        ) from None
    return properties_values(parse_properties(text), where, base=path.parent, origins=origins)


def properties_values(
    props: Mapping[str, str], where: str, *, base: Path, origins: dict[str, str] | None = None
) -> dict[str, Any]:
    """The :class:`KafkaSecurity` fields a client.properties mapping sets (Java and librdkafka
    key names both); a key turnlog cannot honour raises :class:`SettingError` naming it.
    ``origins`` receives the key each field came from, for :meth:`KafkaSecurity.setting`."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {} if origins is None else origins

    def path_of(key: str) -> Path:
        p = Path(props[key]).expanduser()
        return p if p.is_absolute() else base / p

    def refuse(key: str, why: str) -> SettingError:
        # The value may be a secret (a JAAS line): name the key, never echo the value.
        return SettingError(f"{key} ({where})", "…", why)

    for key, value in props.items():
        if key in _REFUSED and value.strip() not in _JAVA_OAUTH_HANDLERS:
            raise refuse(key, _REFUSED[key])
    for key, value in props.items():
        before = dict(values)
        _one_key(key, value, props, values, path_of, refuse)
        for name, now in values.items():
            if before.get(name) is not now:
                # A store's type is set with its location, but comes from its own key.
                origin[name] = f"{_JAVA_KEYS[name] if name in _TYPES else key} ({where})"
    return values


def _one_key(
    key: str,
    value: str,
    props: Mapping[str, str],
    values: dict[str, Any],
    path_of: Any,
    refuse: Any,
) -> None:
    """Set the fields of one client.properties key in ``values``, or refuse it."""
    if key == "security.protocol":
        values["protocol"] = value.strip().upper()
    elif key == "sasl.mechanism":
        if value.strip().upper() == "GSSAPI":
            raise refuse(key, "Kerberos (GSSAPI) is not supported by turnlog")
        values["mechanism"] = value.strip().upper()
    elif key == "sasl.jaas.config":
        values.update(_jaas(value, refuse))
    elif key == "sasl.oauthbearer.token.endpoint.url":
        values["oauth_token_endpoint"] = value.strip()
    elif key == "sasl.login.callback.handler.class" or key.startswith(
        ("sasl.oauthbearer.", "sasl.login.refresh.", "sasl.login.retry.")
    ):
        pass  # Kafka's own client-credentials handler, which kafka/oauth.py stands in for
    elif key == "sasl.username":
        values["username"] = value
    elif key == "sasl.password":
        values["password"] = Secret(value)
    elif key in ("ssl.truststore.location", "ssl.keystore.location"):
        store = key.split(".")[1]
        declared = props.get(f"ssl.{store}.type", "").strip().upper() or None
        if declared == "PEM" and store == "truststore":
            values["ca_file"] = path_of(key)
        elif declared == "PEM":
            values["cert_file"] = values["key_file"] = path_of(key)
        else:  # PKCS12, or JKS (Java's default), judged by the bytes when read
            values[store] = path_of(key)
            if declared is not None:
                values[f"{store}_type"] = declared
    elif key == "ssl.truststore.password":
        values["truststore_password"] = Secret(value)
    elif key == "ssl.keystore.password":
        values["keystore_password"] = Secret(value)
    elif key == "ssl.truststore.certificates":
        values["ca_data"] = value
    elif key == "ssl.keystore.certificate.chain":
        values["cert_data"] = value
    elif key == "ssl.keystore.key":
        values["key_data"] = Secret(value)
    elif key in ("ssl.ca.location", "ssl.ca.pem"):
        if key == "ssl.ca.pem":
            values["ca_data"] = value
        else:
            values["ca_file"] = path_of(key)
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
    elif key == "schema.registry.url":
        values["schema_registry_url"] = Secret(_registry_url(value, props, refuse))
    elif key.startswith(("ssl.", "sasl.", "security.")) and not _IGNORED.match(key):
        raise refuse(key, "is not supported by turnlog's Kafka client (aiokafka)")


def _registry_url(value: str, props: Mapping[str, str], refuse: Any) -> str:
    """``schema.registry.url`` with the credentials Java's registry clients take from
    ``basic.auth.user.info`` (``basic.auth.credentials.source=USER_INFO``) put into the URL, the
    form ``TURNLOG_SCHEMA_REGISTRY_URL`` takes. The first URL of a comma-separated list."""
    url = value.split(",")[0].strip()
    source = props.get("basic.auth.credentials.source", "").strip().upper()
    info = props.get("basic.auth.user.info") or props.get("schema.registry.basic.auth.user.info")
    if source not in ("", "USER_INFO", "URL"):
        raise refuse(
            "basic.auth.credentials.source",
            f"{source} is not supported: give the registry's key and secret in "
            "basic.auth.user.info with basic.auth.credentials.source=USER_INFO",
        )
    if info is None or source == "URL":
        return url
    user, sep, password = info.strip().partition(":")
    parts = urllib.parse.urlsplit(url)
    if not sep or not parts.hostname:
        raise refuse("basic.auth.user.info", "is not KEY:SECRET for an http(s) registry URL")
    credentials = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(
        (parts.scheme, f"{credentials}@{host}", parts.path, parts.query, parts.fragment)
    )


def _jaas(value: str, refuse: Any) -> dict[str, Any]:
    key = "sasl.jaas.config"
    match = _JAAS.match(value)
    if match is None:
        raise refuse(key, 'is not a JAAS line (LoginModule required option="value" ...;)')
    module = match.group(1)
    kind = _LOGIN_MODULES.get(module)
    if kind is None:
        raise refuse(key, f"{module} is not supported (PlainLoginModule, ScramLoginModule)")
    options = {
        m.group(1): _unescape(m.group(2)) if m.group(2) is not None else m.group(3)
        for m in _JAAS_OPTION.finditer(match.group(3))
    }
    if kind == "OAUTHBEARER":
        oauth: dict[str, Any] = {}
        if "clientId" in options:
            oauth["oauth_client_id"] = options["clientId"]
        if "clientSecret" in options:
            oauth["oauth_client_secret"] = Secret(options["clientSecret"])
        if "scope" in options:
            oauth["oauth_scope"] = options["scope"]
        return oauth
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
