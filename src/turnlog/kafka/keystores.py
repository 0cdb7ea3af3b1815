"""Java key and trust stores read for Python's ``ssl``: PKCS12 and inline PEM, JKS refused.

A team's ``client.properties`` names its TLS material the Java way: a PKCS12 store with a
password (Java's default type since Java 9; Strimzi's ``ca.p12``, Aiven's
``client.keystore.p12``), or PEM given inline (``ssl.keystore.certificate.chain``,
``ssl.keystore.key``, ``ssl.truststore.certificates``). Python's ``ssl`` takes PEM files only,
so this module reads each store into memory once, when the settings are made -- a wrong
password or an unreadable store is then refused at start, in one line naming the setting,
instead of surfacing as a broker that "cannot be reached" -- and ``kafka/clients.py`` loads
the result into every client's ``SSLContext``:

* a truststore becomes PEM text, for ``load_verify_locations(cadata=...)``;
* a client keystore becomes a :class:`ClientCertificate` (key and chain in memory), which
  :meth:`ClientCertificate.load_into` hands to ``load_cert_chain`` through an in-memory file
  (``memfd``), or where there is none a private temporary file deleted right after loading;
  either holds the key encrypted under a one-time password, never in clear.

JKS (and JCEKS) has no well-kept Python reader: such a store is refused with the ``keytool``
command that converts it to PKCS12. Java reads a PKCS12 file under ``type=JKS`` and the
reverse (``keystore.type.compat``), so a store is judged by its bytes, not by its declared type.

Passwords reach this module as plain ``str`` and never leave it: no message, ``repr`` or
log line carries one (messages name the setting and show ``…``).

It is one module, a little over the usual length, because trust and key stores are judged by
the same sniffing of their bytes, opened by the same PKCS12 and PEM readers and refused in the
same words; apart, the two kinds would drift in what they accept.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import secrets
import shlex
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from turnlog.errors import SettingError

JKS_MAGIC: Final = b"\xfe\xed\xfe\xed"
JCEKS_MAGIC: Final = b"\xce\xce\xce\xce"
#: The store types that can be read (``JKS`` is accepted as a name: Java reads PKCS12 under it).
READABLE: Final = ("PKCS12", "PEM")
_HIDDEN: Final = "…"
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_KEY_LABELS: Final = frozenset(
    {"PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"}
)


@dataclass(frozen=True, slots=True)
class StoreNames:
    """The settings of one store as a message names them (``ssl.truststore.location
    (--kafka-config f)``, or ``TURNLOG_KAFKA_SSL_TRUSTSTORE_LOCATION``), and the bare keys
    advice tells a person to set."""

    location: str
    password: str
    type: str
    #: ``ssl.key.password``'s name (keystores only).
    key_password: str = "ssl.key.password"
    location_key: str = "ssl.truststore.location"
    type_key: str = "ssl.truststore.type"


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """What the stores of one :class:`~turnlog.kafka.security.KafkaSecurity` hold, read."""

    #: PEM text of every CA certificate of the truststore and the inline certificates.
    cadata: str | None = None
    #: The client's key and certificate chain (mutual TLS), from a keystore or inline PEM.
    client: ClientCertificate | None = None


class ClientCertificate:
    """A private key and its certificate chain, held in memory.

    Its ``repr`` names the certificate's subject and where it came from, never the key.
    """

    __slots__ = ("_key", "chain", "origin")

    def __init__(self, key: PrivateKeyTypes, chain: list[x509.Certificate], origin: str) -> None:
        self._key = key
        self.chain = chain
        self.origin = origin

    @property
    def subject(self) -> str:
        return self.chain[0].subject.rfc4514_string()

    def __repr__(self) -> str:
        return f"ClientCertificate({self.subject!r}, from {self.origin})"

    def load_into(self, context: ssl.SSLContext) -> None:
        """``context.load_cert_chain`` of this key and chain.

        ``ssl`` loads a chain only from a file. The file is an anonymous in-memory one where
        the system has them (Linux ``memfd``), else a temporary file only this user can read,
        deleted as soon as it is loaded; in both the key is encrypted under a password made
        for this one load, so even a copy of the temporary file does not give the key away.
        """
        one_time = secrets.token_urlsafe(32).encode()
        text = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(one_time),
        ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.chain)
        with private_file(text) as path:
            context.load_cert_chain(path, password=one_time)


@contextlib.contextmanager
def private_file(data: bytes) -> Iterator[str]:
    """A path that reads as ``data`` while the block runs, and is gone afterwards."""
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd("turnlog-client-certificate", getattr(os, "MFD_CLOEXEC", 0))
        try:
            _write_all(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, name = tempfile.mkstemp(prefix="turnlog-client-", suffix=".pem")  # mode 0600
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        yield name
    finally:
        os.unlink(name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- judging a file by its bytes -----------------------------------------------------------------


def sniff(data: bytes) -> str | None:
    """``JKS``, ``JCEKS``, ``PKCS12`` or ``PEM`` by the bytes alone, else ``None``."""
    if data.startswith(JKS_MAGIC):
        return "JKS"
    if data.startswith(JCEKS_MAGIC):
        return "JCEKS"
    if len(data) > 6 and data[0] == 0x30:
        # A PKCS12 PFX is a DER SEQUENCE whose first element is INTEGER 3 (its version);
        # a DER certificate starts with a SEQUENCE there instead.
        length = data[1]
        header = 2 + (length - 0x80 if 0x80 < length <= 0x84 else 0)
        if data[header : header + 3] == b"\x02\x01\x03":
            return "PKCS12"
    if b"-----BEGIN " in data:
        return "PEM"
    return None


def conversion(path: Path, kind: str) -> tuple[str, Path]:
    """The ``keytool`` command that writes a PKCS12 copy of the JKS/JCEKS store ``path``,
    and the copy's path (``x.jks`` -> ``x.p12``, else ``x`` -> ``x.p12``)."""
    if path.suffix.lower() in (".jks", ".jceks"):
        target = path.with_suffix(".p12")
    else:
        target = path.with_name(path.name + ".p12")
    source_type = " -srcstoretype JCEKS" if kind == "JCEKS" else ""
    command = (
        f"keytool -importkeystore -srckeystore {shlex.quote(str(path))}{source_type} "
        f"-destkeystore {shlex.quote(str(target))} -deststoretype PKCS12"
    )
    return command, target


def _refuse_java_store(path: Path, kind: str, names: StoreNames) -> SettingError:
    command, target = conversion(path, kind)
    return SettingError(
        names.location,
        str(path),
        f"a {kind} store cannot be read here (Python has no {kind} reader): convert it with "
        f"`{command}`, then set {names.location_key}={target} and {names.type_key}=PKCS12",
    )


def check_pem_file(path: Path, names: StoreNames) -> None:
    """Refuse a file given as PEM whose bytes are a Java store (the PEM itself is loaded
    later, by ``ssl``); a file that cannot be read yet is left to that load to report."""
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
    except OSError:
        return
    kind = sniff(head)
    if kind in ("JKS", "JCEKS"):
        raise _refuse_java_store(path, kind, names)
    if kind == "PKCS12":
        raise SettingError(
            names.location,
            str(path),
            f"is a PKCS12 store, not PEM: set {names.type_key}=PKCS12 (with its password)",
        )


def _load(path: Path, declared: str | None, names: StoreNames) -> tuple[str, bytes]:
    """The store's bytes and the type they are read as (PKCS12 or PEM), or a one-line
    refusal: a type that cannot be read, a Java store, a file that is not what it says."""
    kind = (declared or "").strip().upper() or None
    if kind is not None and kind not in (*READABLE, "JKS", "JCEKS"):
        raise SettingError(
            names.type, kind, "must be PKCS12 or PEM (a JKS store: convert it to PKCS12)"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        if kind in ("JKS", "JCEKS"):  # the advice does not need the bytes
            raise _refuse_java_store(path, kind, names) from None
        raise SettingError(names.location, str(path), f"cannot be read ({exc.strerror})") from None
    found = sniff(data)
    if found in ("JKS", "JCEKS"):
        raise _refuse_java_store(path, found, names)
    if kind == "PEM":
        if found != "PEM":
            hint = f" (it is a {found} store: set {names.type_key}={found})" if found else ""
            raise SettingError(
                names.location, str(path), f"is not PEM text although {names.type_key}=PEM{hint}"
            )
        return "PEM", data
    if found == "PEM":
        if kind is not None:  # Java would not read PEM under PKCS12 or JKS either
            raise SettingError(
                names.location,
                str(path),
                f"is PEM text, not a {kind} store: set {names.type_key}=PEM",
            )
        return "PEM", data
    if found != "PKCS12":
        raise SettingError(names.location, str(path), "is neither a PKCS12 store nor PEM text")
    return "PKCS12", data


def _open_pkcs12(
    path: Path, data: bytes, password: str | None, password_name: str, location_name: str
) -> pkcs12.PKCS12KeyAndCertificates:
    """The store opened with ``password``; a refusal names the password's setting, never the
    password. (cryptography says "Invalid password" for a wrong password and "Could not
    deserialize" for bytes that are no PKCS12 at all.)"""
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
    except ValueError as exc:
        if "password" not in str(exc).lower():
            raise SettingError(
                location_name, str(path), "is not a readable PKCS12 store (damaged?)"
            ) from None
    if password is None:
        raise SettingError(
            password_name, "", f"is not set, and the PKCS12 store {path} needs its password"
        )
    raise SettingError(password_name, _HIDDEN, f"does not open the PKCS12 store {path}")


# --- truststores ---------------------------------------------------------------------------------


def read_truststore(
    path: Path, declared: str | None, password: str | None, names: StoreNames
) -> str:
    """The PEM text of every certificate of the truststore ``path``."""
    kind, data = _load(path, declared, names)
    if kind == "PEM":
        if password is not None:
            raise SettingError(
                names.password,
                _HIDDEN,
                "a PEM truststore has no password (Java refuses it too): leave it unset",
            )
        return pem_certificates(data.decode("ascii", "replace"), names.location, what=str(path))
    opened = _open_pkcs12(path, data, password, names.password, names.location)
    certs = [c.certificate for c in opened.additional_certs]
    if opened.cert is not None:
        certs.insert(0, opened.cert.certificate)
    if not certs:
        raise SettingError(names.location, str(path), "holds no certificate to trust")
    return _pem_text(certs)


def pem_certificates(text: str, name: str, *, what: str = "the inline PEM") -> str:
    """Canonical PEM text of the certificates in ``text``.

    As Kafka's Java client does, whitespace inside a block is ignored: a value continued
    over several ``client.properties`` lines (``\\`` at each end) arrives on one line.
    """
    certs: list[x509.Certificate] = []
    for label, body in _PEM_BLOCK.findall(text):
        if label not in ("CERTIFICATE", "X509 CERTIFICATE"):
            continue
        try:
            certs.append(x509.load_der_x509_certificate(_der(body)))
        except ValueError:
            raise SettingError(name, what, "holds a PEM certificate that cannot be read") from None
    if not certs:
        raise SettingError(name, what, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return _pem_text(certs)


def _pem_text(certs: list[x509.Certificate]) -> str:
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in certs)


def _der(body: str) -> bytes:
    return base64.b64decode("".join(body.split()), validate=True)


# --- keystores -----------------------------------------------------------------------------------


def read_keystore(
    path: Path,
    declared: str | None,
    password: str | None,
    key_password: str | None,
    names: StoreNames,
) -> ClientCertificate:
    """The key and certificate chain of the client keystore ``path`` (PKCS12, or PEM)."""
    kind, data = _load(path, declared, names)
    origin = str(path)
    if kind == "PEM":
        if password is not None:
            raise SettingError(
                names.password,
                _HIDDEN,
                "a PEM keystore has no store password (Java refuses it too): "
                f"its key's password is {names.key_password.split(' (')[0]}",
            )
        text = data.decode("ascii", "replace")
        return pem_keystore(text, text, key_password, names.location, names.key_password, origin)
    # One password opens a PKCS12 store and its key (keytool keeps them equal for PKCS12);
    # ssl.key.password alone is tried as the store's when ssl.keystore.password is not set.
    store_password, used = password, names.password
    if store_password is None and key_password is not None:
        store_password, used = key_password, names.key_password
    opened = _open_pkcs12(path, data, store_password, used, names.location)
    if key_password is not None and password is not None and key_password != password:
        raise SettingError(
            names.key_password,
            _HIDDEN,
            f"differs from {names.password.split(' (')[0]}, but the key in the PKCS12 store "
            f"{path} is under the store's password: leave it unset or give it the same value",
        )
    if opened.key is None:
        raise SettingError(
            names.location, str(path), "holds no private key (a truststore, not a keystore?)"
        )
    if opened.cert is None:
        raise SettingError(names.location, str(path), "holds no certificate for its key")
    chain = [opened.cert.certificate, *(c.certificate for c in opened.additional_certs)]
    _check_pair(opened.key, chain, names.location, str(path))
    return ClientCertificate(opened.key, chain, origin)


def pem_keystore(
    chain_text: str,
    key_text: str,
    key_password: str | None,
    name: str,
    key_password_name: str,
    origin: str,
    *,
    key_name: str | None = None,
) -> ClientCertificate:
    """A client certificate from PEM text: the chain's certificates and one private key
    (PKCS#8, encrypted or not, or an unencrypted traditional RSA/EC key), whitespace inside
    a block ignored as in :func:`pem_certificates`."""
    key_setting = key_name or name
    chain_pem = pem_certificates(chain_text, name, what="the certificate chain")
    chain = x509.load_pem_x509_certificates(chain_pem.encode("ascii"))
    keys = [(label, body) for label, body in _PEM_BLOCK.findall(key_text) if label in _KEY_LABELS]
    if len(keys) != 1:
        raise SettingError(
            key_setting,
            _HIDDEN,
            f"must hold exactly one PEM private key (-----BEGIN PRIVATE KEY-----), not {len(keys)}",
        )
    label, body = keys[0]
    if ":" in body:  # Proc-Type/DEK-Info headers: an encrypted key of the traditional format
        raise SettingError(
            key_setting,
            _HIDDEN,
            "is an encrypted key in the traditional format (Java reads PKCS#8 only): convert "
            "it with `openssl pkcs8 -topk8 -in KEY -out KEY.p8`",
        )
    try:
        der = _der(body)
    except (binascii.Error, ValueError):
        raise SettingError(key_setting, _HIDDEN, "holds a PEM key that is not base64") from None
    encrypted = label == "ENCRYPTED PRIVATE KEY"
    if encrypted and key_password is None:
        raise SettingError(
            key_password_name, "", "is not set, and the client's private key is encrypted"
        )
    try:
        key = serialization.load_der_private_key(
            der, key_password.encode() if encrypted and key_password is not None else None
        )
    except ValueError:
        if encrypted:
            raise SettingError(
                key_password_name, _HIDDEN, "does not decrypt the client's private key"
            ) from None
        raise SettingError(
            key_setting, _HIDDEN, "holds a private key that cannot be read"
        ) from None
    except TypeError:  # an unsupported key type
        raise SettingError(
            key_setting, _HIDDEN, "holds a private key that cannot be read"
        ) from None
    _check_pair(key, chain, name, origin)
    return ClientCertificate(key, chain, origin)


def _check_pair(key: PrivateKeyTypes, chain: list[x509.Certificate], name: str, what: str) -> None:
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != chain[0].public_key().public_bytes(*spki):
        raise SettingError(name, what, "its private key does not belong to its first certificate")
