"""Every Kafka client of the package is built here, from one :class:`KafkaConnection`.

A producer, consumer or admin client built anywhere else from ``bootstrap_servers`` alone is a
client that talks PLAINTEXT to a cluster that wants TLS and SASL, and fails as "not reachable";
so the three factories below are the only constructors (``tests/unit/test_kafka_clients.py``
greps the source for any other). They take the settings, a connection, or a bare bootstrap
string (PLAINTEXT: the tests' and the local broker's case).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
import struct
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import create_conn
from aiokafka.errors import AuthenticationFailedError, KafkaError, SaslAuthenticationFailed
from aiokafka.helpers import create_ssl_context

from turnlog.errors import SettingError
from turnlog.kafka.security import KafkaConnection, KafkaSecurity

_SASL_BYTES = re.compile(r"sasl_auth_bytes=b(['\"]).*?(?<!\\)\1")


class _NoSaslBytes(logging.Filter):
    """aiokafka logs every request at DEBUG, SASL handshakes included: for PLAIN their bytes are
    the username and the password in clear. Such a line keeps its shape, the bytes go."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "sasl_auth_bytes=" in message:
            record.msg, record.args = _SASL_BYTES.sub("sasl_auth_bytes=[redacted]", message), ()
        return True


#: On aiokafka's connection logger itself, so every handler (--debug, JSON logs) gets it.
logging.getLogger("aiokafka.conn").addFilter(_NoSaslBytes())


class _RetriedIsNotAnError(logging.Filter):
    """aiokafka logs a failed offset lookup at ERROR, and a produce answered "not leader" at
    WARNING, and then retries either by itself. Right after topics are created the broker may
    not lead a partition yet for a moment, so a script with no logging set up printed ``Failed
    fetch offsets ... NotLeaderForPartitionError`` or ``Got error produce response ...,
    retrying`` (the last-resort handler shows WARNING and up) for a condition that heals in one
    retry. Such a line is kept, as INFO: seen with ``--log-level info`` or ``--debug``."""

    def __init__(self, opening: str) -> None:
        super().__init__()
        self.opening = opening

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and str(record.msg).startswith(self.opening):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


logging.getLogger("aiokafka.consumer.fetcher").addFilter(
    _RetriedIsNotAnError("Failed fetch offsets")
)
logging.getLogger("aiokafka.producer.sender").addFilter(
    _RetriedIsNotAnError("Got error produce response on topic-partition")
)


class _HasConnection(Protocol):
    @property
    def connection(self) -> KafkaConnection: ...


Target = _HasConnection | KafkaConnection | str


def connection(target: Target) -> KafkaConnection:
    if isinstance(target, KafkaConnection):
        return target
    if isinstance(target, str):
        return KafkaConnection(target)
    return target.connection


def ssl_context(security: KafkaSecurity) -> ssl.SSLContext:
    """The TLS context of ``security``: its CAs (else the system's), its client certificate.

    PKCS12 stores and inline PEM were read when ``security`` was made (``kafka/keystores.py``,
    so a wrong store password is refused at start): their CAs arrive here as PEM text, and a
    keystore's key and chain are loaded from memory -- no client reads a store again.
    """
    material = security.material
    password = security.key_password.reveal() if security.key_password else None
    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=security.ca_file,
            cadata=material.cadata,
            certfile=security.cert_file,
            keyfile=security.key_file,
            password=password,
        )
        if material.client is not None:
            material.client.load_into(context)
    except (OSError, ssl.SSLError) as exc:
        # Name the file, never the password (an SSLError for a wrong one says only "bad decrypt").
        files = [str(p) for p in (security.ca_file, security.cert_file, security.key_file) if p]
        if material.client is not None:
            files.append(material.client.origin)
        raise SettingError(
            f"TLS material ({security.source})",
            ", ".join(files) or "inline CA",
            f"cannot be loaded: {type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}",
        ) from None
    if security.ca_file is None and material.cadata is None:
        context.load_default_certs()
    context.check_hostname = security.check_hostname
    return context


def client_options(target: Target, client_id: str) -> dict[str, Any]:
    """The keyword arguments every aiokafka client shares: servers, security, client id.

    A configured ``client.id`` replaces the component's own, as in the Java clients: broker
    quotas and audit logs key on it.
    """
    conn = connection(target)
    sec = conn.security
    options: dict[str, Any] = {
        "bootstrap_servers": conn.bootstrap_servers,
        "client_id": sec.client_id or client_id,
        "security_protocol": sec.protocol,
    }
    if sec.tls:
        options["ssl_context"] = ssl_context(sec)
    if sec.protocol.startswith("SASL_"):
        options["sasl_mechanism"] = sec.mechanism
        if sec.mechanism == "OAUTHBEARER":
            options["sasl_oauth_token_provider"] = sec.token_provider
        else:
            options["sasl_plain_username"] = sec.username
            options["sasl_plain_password"] = sec.password.reveal() if sec.password else None
    return options


def producer(target: Target, *, client_id: str = "turnlog-producer", **kw: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(**client_options(target, client_id), **kw)


async def started(producer: AIOKafkaProducer, topic: str) -> int:
    """Start ``producer`` and return ``topic``'s partition count; a start that fails half-way
    stops what it opened (the producers partition by hand, so they need the count first)."""
    try:
        await producer.start()
        return len(await producer.partitions_for(topic))
    except BaseException:
        await producer.stop()
        raise


def consumer(
    target: Target, *topics: str, client_id: str = "turnlog-consumer", **kw: Any
) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(*topics, **client_options(target, client_id), **kw)


def admin(target: Target, *, client_id: str = "turnlog-admin", **kw: Any) -> AIOKafkaAdminClient:
    kw.setdefault("request_timeout_ms", 15000)
    return AIOKafkaAdminClient(**client_options(target, client_id), **kw)


async def check_credentials(target: Target, timeout: float = 10.0) -> None:
    """Raise aiokafka's ``SaslAuthenticationFailed`` when the broker refuses the credentials.

    aiokafka's clients report a refused SASL handshake only as a bootstrap that failed
    ("Unable to bootstrap", the cause logged and dropped), which reads as an outage and is
    waited out for the whole budget. One direct connection to the first bootstrap server says
    which it is; anything but a refusal (the broker is down, slow) is left to the clients.
    """
    conn = connection(target)
    sec = conn.security
    if sec.protocol == "SSL":
        await _check_tls(conn, timeout)
        return
    if not sec.protocol.startswith("SASL_"):
        return
    host, _, port = conn.bootstrap_servers.split(",")[0].strip().rpartition(":")
    options = client_options(conn, "turnlog-credentials")
    for name in ("bootstrap_servers", "client_id"):
        options.pop(name)
    try:
        made = await asyncio.wait_for(
            create_conn(
                host.strip("[]") or "localhost",
                int(port or 9092),
                client_id="turnlog-credentials",
                request_timeout_ms=int(timeout * 1000),
                **options,
            ),
            timeout,
        )
    except (SaslAuthenticationFailed, AuthenticationFailedError):
        raise
    except (KafkaError, OSError, TimeoutError, ValueError):
        return
    made.close()


#: ApiVersions v0 with correlation id 1 and client id "turnlog-tls": the smallest request a
#: broker answers, sent only to see whether the TLS session it rides on is accepted.
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 11) + b"turnlog-tls"


async def _check_tls(conn: KafkaConnection, timeout: float) -> None:
    """Raise ``AuthenticationFailedError`` when the TLS handshake with the first bootstrap
    server fails on a certificate: the broker's not trusted here, or this client's refused
    there (with TLS 1.3 the broker's alert comes on the first read, so one request is sent).
    aiokafka reports both only as "Unable to bootstrap". Anything else is left to the clients."""
    host, _, port = conn.bootstrap_servers.split(",")[0].strip().rpartition(":")
    address = f"{host}:{port}"
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                host.strip("[]") or "localhost", int(port or 9092), ssl=ssl_context(conn.security)
            )
            try:
                writer.write(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
                await writer.drain()
                await reader.readexactly(4)
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    except ssl.SSLCertVerificationError as exc:
        raise AuthenticationFailedError(
            f"the broker's certificate at {address} is not trusted: {exc.verify_message}"
            " (check ssl.truststore / TURNLOG_KAFKA_SSL_CA_FILE)"
        ) from None
    except ssl.SSLError as exc:
        raise AuthenticationFailedError(
            f"the broker at {address} refused this client's TLS session: {exc.reason or exc}"
            " (a client certificate it does not trust, or none where it requires one)"
        ) from None
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
        return
