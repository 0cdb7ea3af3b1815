"""Java key and trust stores: PKCS12 with its password, PEM inline, JKS refused with its
conversion -- read from client.properties, variables and the library's value, and proven by
real TLS handshakes with a local server (its CA, and a client certificate it requires)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import shutil
import ssl
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from turnlog.errors import SettingError
from turnlog.kafka import clients, keystores
from turnlog.kafka.security import KafkaSecurity, Secret
from turnlog.settings import Settings

#: Test passwords, searched for in every message and repr.
STORE_PASSWORD = "St0re-pa55-3f9a"
KEY_PASSWORD = "K3y-pa55-77c1"
WRONG = "not-the-password-1"
KEYTOOL = shutil.which("keytool")


@dataclass
class Pki:
    dir: Path
    ca: x509.Certificate
    ca_key: CertificateIssuerPrivateKeyTypes
    other_ca: x509.Certificate
    server: x509.Certificate
    server_key: ec.EllipticCurvePrivateKey
    client: x509.Certificate
    client_key: ec.EllipticCurvePrivateKey

    def pem(self, path: Path, *certs: x509.Certificate) -> Path:
        path.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs))
        return path

    def server_context(self, *, require_client: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        chain = self.dir / "server-chain.pem"
        chain.write_bytes(
            self.server_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            + self.server.public_bytes(serialization.Encoding.PEM)
        )
        context.load_cert_chain(chain)
        if require_client:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=_pem(self.ca))
        return context


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _certificate(
    subject: str,
    key: CertificateIssuerPrivateKeyTypes | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    issuer: tuple[str, CertificateIssuerPrivateKeyTypes] | None = None,
    *,
    ca: bool = False,
    san: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate for localhost, a client certificate CN=alice; another CA."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    other_key = ec.generate_private_key(ec.SECP256R1())
    server_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    return Pki(
        dir=tmp_path_factory.mktemp("keystores"),
        ca=_certificate("test-ca", ca_key, ca=True),
        ca_key=ca_key,
        other_ca=_certificate("other-ca", other_key, ca=True),
        server=_certificate("localhost", server_key, ("test-ca", ca_key), san=True),
        server_key=server_key,
        client=_certificate("alice", client_key, ("test-ca", ca_key)),
        client_key=client_key,
    )


def truststore(path: Path, *certs: x509.Certificate, password: str | None) -> Path:
    """A Java-style PKCS12 truststore (trusted-certificate entries, as keytool writes them)."""
    encryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password is not None
        else serialization.NoEncryption()
    )
    entries = [pkcs12.PKCS12Certificate(c, f"ca{i}".encode()) for i, c in enumerate(certs)]
    path.write_bytes(pkcs12.serialize_java_truststore(entries, encryption))
    return path


def keystore(
    path: Path,
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | None,
    cert: x509.Certificate | None,
    cas: list[x509.Certificate],
    password: str,
    *,
    legacy: bool = False,
) -> Path:
    """A PKCS12 keystore; ``legacy``: 3DES/SHA1, what older openssl and keytool wrote."""
    encryption: serialization.KeySerializationEncryption
    if legacy:
        encryption = (
            serialization.PrivateFormat.PKCS12.encryption_builder()
            .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
            .hmac_hash(hashes.SHA1())
            .build(password.encode())
        )
    else:
        encryption = serialization.BestAvailableEncryption(password.encode())
    path.write_bytes(pkcs12.serialize_key_and_certificates(b"alice", key, cert, cas, encryption))
    return path


def properties(path: Path, text: str) -> Path:
    path.write_text("security.protocol=SSL\n" + text)
    return path


def from_file(path: Path) -> KafkaSecurity:
    return KafkaSecurity.from_env({}, config_file=path)


async def handshake(
    security: KafkaSecurity, pki: Pki, *, require_client: bool = False
) -> dict[str, object]:
    """One TLS connection from a client of ``security`` to a local server with ``pki``'s
    server certificate; returns the client certificate the server saw (``{}``: none)."""
    seen: dict[str, object] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.update(writer.get_extra_info("peercert") or {})
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(
        handle, "127.0.0.1", 0, ssl=pki.server_context(require_client=require_client)
    )
    port = server.sockets[0].getsockname()[1]
    context = clients.ssl_context(security)
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
        try:
            assert await asyncio.wait_for(reader.read(2), 10) == b"ok"
        finally:
            writer.close()
            await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    return seen


def refusal(path_or_env: Path | dict[str, str]) -> str:
    with pytest.raises(SettingError) as caught:
        if isinstance(path_or_env, Path):
            from_file(path_or_env)
        else:
            KafkaSecurity.from_env(path_or_env)
    message = str(caught.value)
    assert "\n" not in message
    for secret in (STORE_PASSWORD, KEY_PASSWORD, WRONG):
        assert secret not in message
    return message


def subject_cn(peercert: dict[str, object]) -> str:
    subject = peercert["subject"]
    assert isinstance(subject, tuple)
    return str(dict(pair for rdn in subject for pair in rdn)["commonName"])


# --- truststores ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "declared", ["ssl.truststore.type=PKCS12\n", "", "ssl.truststore.type=JKS\n"]
)
async def test_a_pkcs12_truststore_is_what_the_client_trusts(
    pki: Pki, tmp_path: Path, declared: str
) -> None:
    """Under PKCS12, undeclared (Java's default JKS) or JKS (Java reads PKCS12 under JKS)."""
    store = truststore(tmp_path / "truststore.p12", pki.ca, password=STORE_PASSWORD)
    config = properties(
        tmp_path / "c.properties",
        f"ssl.truststore.location=truststore.p12\nssl.truststore.password={STORE_PASSWORD}\n"
        + declared,
    )
    security = from_file(config)
    assert security.truststore == store
    assert security.material.cadata == _pem(pki.ca)
    assert await handshake(security, pki) == {}
    # Trusting another CA only: the same server is refused, so the store is what is trusted.
    truststore(store, pki.other_ca, password=STORE_PASSWORD)
    with pytest.raises(ssl.SSLCertVerificationError):
        await handshake(from_file(config), pki)


@pytest.mark.skipif(KEYTOOL is None, reason="keytool (a JDK) is not installed")
def test_a_truststore_made_by_keytool(pki: Pki, tmp_path: Path) -> None:
    assert KEYTOOL is not None
    subprocess.run(
        [KEYTOOL, "-importcert", "-noprompt", "-alias", "ca", "-file",
         str(pki.pem(tmp_path / "ca.pem", pki.ca)), "-keystore", str(tmp_path / "kt.p12"),
         "-storetype", "PKCS12", "-storepass", STORE_PASSWORD],
        check=True, capture_output=True,
    )  # fmt: skip
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "SSL",
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_LOCATION": str(tmp_path / "kt.p12"),
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD": STORE_PASSWORD,
    }
    assert KafkaSecurity.from_env(env).material.cadata == _pem(pki.ca)


def test_a_wrong_or_missing_truststore_password_names_the_setting(pki: Pki, tmp_path: Path) -> None:
    truststore(tmp_path / "t.p12", pki.ca, password=STORE_PASSWORD)
    config = properties(
        tmp_path / "c.properties",
        f"ssl.truststore.location=t.p12\nssl.truststore.type=PKCS12\n"
        f"ssl.truststore.password={WRONG}\n",
    )
    message = refusal(config)
    assert message.startswith(f"ssl.truststore.password (--kafka-config {config})='…'")
    assert f"does not open the PKCS12 store {tmp_path / 't.p12'}" in message
    config.write_text(config.read_text().replace(f"ssl.truststore.password={WRONG}\n", ""))
    message = refusal(config)
    assert message.startswith(f"ssl.truststore.password (--kafka-config {config})=''")
    assert "is not set" in message
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "SSL",
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_LOCATION": str(tmp_path / "t.p12"),
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD": WRONG,
    }
    assert refusal(env).startswith("TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD='…': does not open")


def test_a_truststore_without_a_password_is_read_without_one(pki: Pki, tmp_path: Path) -> None:
    truststore(tmp_path / "t.p12", pki.ca, password=None)
    config = properties(tmp_path / "c.properties", "ssl.truststore.location=t.p12\n")
    assert from_file(config).material.cadata == _pem(pki.ca)


def test_the_library_takes_the_stores_directly(pki: Pki, tmp_path: Path) -> None:
    store = truststore(tmp_path / "t.p12", pki.ca, password=STORE_PASSWORD)
    security = KafkaSecurity(
        protocol="SSL", truststore=store, truststore_password=Secret(STORE_PASSWORD)
    )
    assert security.material.cadata == _pem(pki.ca)
    assert f"truststore {store}" in security.describe()
    with pytest.raises(SettingError) as caught:
        KafkaSecurity(protocol="SSL", truststore=store, truststore_password=Secret(WRONG))
    assert str(caught.value).startswith("KafkaSecurity.truststore_password='…': does not open")
    assert WRONG not in str(caught.value)


# --- JKS ------------------------------------------------------------------------------------------


def test_a_declared_jks_store_is_refused_with_its_keytool_command(tmp_path: Path) -> None:
    # Not even there: the advice needs no bytes.
    config = properties(
        tmp_path / "c.properties",
        "ssl.truststore.location=/etc/kafka/truststore.jks\nssl.truststore.type=JKS\n"
        f"ssl.truststore.password={STORE_PASSWORD}\n",
    )
    assert refusal(config) == (
        f"ssl.truststore.location (--kafka-config {config})='/etc/kafka/truststore.jks': "
        "a JKS store cannot be read here (Python has no JKS reader): convert it with "
        "`keytool -importkeystore -srckeystore /etc/kafka/truststore.jks "
        "-destkeystore /etc/kafka/truststore.p12 -deststoretype PKCS12`, then set "
        "ssl.truststore.location=/etc/kafka/truststore.p12 and ssl.truststore.type=PKCS12"
    )


@pytest.mark.parametrize("declared", ["PKCS12", None])
@pytest.mark.parametrize("store", ["truststore", "keystore"])
def test_a_file_with_jks_magic_is_refused_whatever_its_declared_type(
    tmp_path: Path, declared: str | None, store: str
) -> None:
    (tmp_path / "client.keys").write_bytes(keystores.JKS_MAGIC + b"\x00\x00\x00\x02" + bytes(40))
    config = properties(
        tmp_path / "c.properties",
        f"ssl.{store}.location=client.keys\nssl.{store}.password={STORE_PASSWORD}\n"
        + (f"ssl.{store}.type={declared}\n" if declared else ""),
    )
    message = refusal(config)
    path = tmp_path / "client.keys"
    assert message.startswith(f"ssl.{store}.location (--kafka-config {config})='{path}'")
    assert (
        f"`keytool -importkeystore -srckeystore {path} -destkeystore {path}.p12 "
        "-deststoretype PKCS12`" in message
    )


def test_a_jks_store_from_a_variable_names_the_variables(tmp_path: Path) -> None:
    (tmp_path / "k.jceks").write_bytes(keystores.JCEKS_MAGIC + bytes(40))
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "SSL",
        "TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION": str(tmp_path / "k.jceks"),
    }
    message = refusal(env)
    assert message.startswith(f"TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION='{tmp_path / 'k.jceks'}'")
    assert "-srcstoretype JCEKS" in message
    assert (
        f"then set TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION={tmp_path / 'k.p12'} and "
        "TURNLOG_KAFKA_SSL_KEYSTORE_TYPE=PKCS12" in message
    )


@pytest.mark.skipif(KEYTOOL is None, reason="keytool (a JDK) is not installed")
def test_a_real_jks_store_and_its_conversion(pki: Pki, tmp_path: Path) -> None:
    """The keytool line of the refusal, run as printed, gives a store that is then read."""
    assert KEYTOOL is not None
    jks = tmp_path / "truststore.jks"
    subprocess.run(
        [KEYTOOL, "-importcert", "-noprompt", "-alias", "ca", "-file",
         str(pki.pem(tmp_path / "ca.pem", pki.ca)), "-keystore", str(jks), "-storetype", "JKS",
         "-storepass", STORE_PASSWORD],
        check=True, capture_output=True,
    )  # fmt: skip
    config = properties(
        tmp_path / "c.properties",
        f"ssl.truststore.location={jks}\nssl.truststore.password={STORE_PASSWORD}\n",
    )
    message = refusal(config)
    command = message.split("`")[1].split()
    assert command[0] == "keytool"
    subprocess.run(
        [KEYTOOL, *command[1:], "-srcstorepass", STORE_PASSWORD, "-deststorepass",
         STORE_PASSWORD, "-noprompt"],
        check=True, capture_output=True,
    )  # fmt: skip
    config.write_text(
        f"security.protocol=SSL\nssl.truststore.location={tmp_path / 'truststore.p12'}\n"
        f"ssl.truststore.type=PKCS12\nssl.truststore.password={STORE_PASSWORD}\n"
    )
    assert from_file(config).material.cadata == _pem(pki.ca)


# --- client keystores -----------------------------------------------------------------------------


@pytest.mark.parametrize("key_password", [False, True], ids=["store-password", "key-password"])
@pytest.mark.parametrize("legacy", [False, True], ids=["aes", "3des"])
async def test_a_pkcs12_keystore_is_the_certificate_the_server_sees(
    pki: Pki, tmp_path: Path, key_password: bool, legacy: bool
) -> None:
    """With ``ssl.keystore.password`` alone, or with ``ssl.key.password`` too (the same value,
    as keytool keeps it for PKCS12); a store of modern or of legacy encryption."""
    keystore(tmp_path / "client.p12", pki.client_key, pki.client, [pki.ca], STORE_PASSWORD,
             legacy=legacy)  # fmt: skip
    truststore(tmp_path / "t.p12", pki.ca, password=STORE_PASSWORD)
    config = properties(
        tmp_path / "c.properties",
        "ssl.keystore.type=PKCS12\nssl.keystore.location=client.p12\n"
        f"ssl.keystore.password={STORE_PASSWORD}\n"
        + (f"ssl.key.password={STORE_PASSWORD}\n" if key_password else "")
        + f"ssl.truststore.location=t.p12\nssl.truststore.password={STORE_PASSWORD}\n",
    )
    security = from_file(config)
    assert "client certificate CN=alice" in security.describe()
    seen = await handshake(security, pki, require_client=True)
    assert subject_cn(seen) == "alice"


async def test_a_pkcs12_keystore_with_an_rsa_key_from_variables(pki: Pki, tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = _certificate("bob", key, ("test-ca", pki.ca_key))
    keystore(tmp_path / "bob.p12", key, cert, [], STORE_PASSWORD)
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "SSL",
        "TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION": str(tmp_path / "bob.p12"),
        "TURNLOG_KAFKA_SSL_KEYSTORE_TYPE": "pkcs12",
        "TURNLOG_KAFKA_SSL_KEYSTORE_PASSWORD": STORE_PASSWORD,
        "TURNLOG_KAFKA_SSL_CA_FILE": str(pki.pem(tmp_path / "ca.pem", pki.ca)),
    }
    seen = await handshake(KafkaSecurity.from_env(env), pki, require_client=True)
    assert subject_cn(seen) == "bob"


@pytest.mark.skipif(KEYTOOL is None, reason="keytool (a JDK) is not installed")
def test_a_keystore_made_by_keytool(tmp_path: Path) -> None:
    assert KEYTOOL is not None
    subprocess.run(
        [KEYTOOL, "-genkeypair", "-alias", "me", "-keyalg", "RSA", "-keysize", "2048",
         "-dname", "CN=carol", "-validity", "2", "-keystore", str(tmp_path / "k.p12"),
         "-storetype", "PKCS12", "-storepass", STORE_PASSWORD],
        check=True, capture_output=True,
    )  # fmt: skip
    config = properties(
        tmp_path / "c.properties",
        f"ssl.keystore.location=k.p12\nssl.keystore.password={STORE_PASSWORD}\n",
    )
    security = from_file(config)
    client = security.material.client
    assert client is not None
    assert client.subject == "CN=carol"
    assert isinstance(clients.ssl_context(security), ssl.SSLContext)  # key and chain loaded


def test_keystore_passwords_wrong_missing_or_different(pki: Pki, tmp_path: Path) -> None:
    keystore(tmp_path / "k.p12", pki.client_key, pki.client, [], STORE_PASSWORD)
    base = "ssl.keystore.location=k.p12\nssl.keystore.type=PKCS12\n"
    config = tmp_path / "c.properties"
    where = f"(--kafka-config {config})"
    properties(config, base + f"ssl.keystore.password={WRONG}\n")
    assert refusal(config).startswith(f"ssl.keystore.password {where}='…': does not open")
    properties(config, base)
    assert refusal(config).startswith(f"ssl.keystore.password {where}='': is not set")
    # ssl.key.password alone is tried as the store's password.
    properties(config, base + f"ssl.key.password={STORE_PASSWORD}\n")
    assert from_file(config).material.client is not None
    properties(config, base + f"ssl.key.password={WRONG}\n")
    assert refusal(config).startswith(f"ssl.key.password {where}='…': does not open")
    # Java would fail to unlock a key under the store's password with another one.
    properties(
        config, base + f"ssl.keystore.password={STORE_PASSWORD}\nssl.key.password={KEY_PASSWORD}\n"
    )
    message = refusal(config)
    assert message.startswith(f"ssl.key.password {where}='…': differs from ssl.keystore.password")


def test_stores_that_are_not_what_they_are_named(pki: Pki, tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    where = f"(--kafka-config {config})"
    password = f"ssl.keystore.password={STORE_PASSWORD}\n"
    # A truststore given as the keystore.
    truststore(tmp_path / "t.p12", pki.ca, password=STORE_PASSWORD)
    properties(config, "ssl.keystore.location=t.p12\n" + password)
    assert "holds no private key" in refusal(config)
    # A key with another key's certificate (in a PEM keystore file: PKCS12 writers refuse it).
    other = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "mixed.pem").write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + pki.client.public_bytes(serialization.Encoding.PEM)
    )
    env = {
        "TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION": str(tmp_path / "mixed.pem"),
        "TURNLOG_KAFKA_SSL_KEYSTORE_TYPE": "PEM",
    }
    message = refusal(env)
    assert message.startswith(f"TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION='{tmp_path / 'mixed.pem'}'")
    assert "its private key does not belong to its first certificate" in message
    # Damaged bytes.
    data = (tmp_path / "t.p12").read_bytes()
    (tmp_path / "bad.p12").write_bytes(data[:7] + bytes(len(data) - 7))
    properties(config, "ssl.truststore.location=bad.p12\nssl.truststore.type=PKCS12\n")
    assert refusal(config).startswith(f"ssl.truststore.location {where}=")
    # PEM under PKCS12, PKCS12 under PEM, an unknown type.
    pki.pem(tmp_path / "ca.pem", pki.ca)
    properties(config, "ssl.truststore.location=ca.pem\nssl.truststore.type=PKCS12\n")
    assert "is PEM text, not a PKCS12 store: set ssl.truststore.type=PEM" in refusal(config)
    properties(config, "ssl.truststore.location=t.p12\nssl.truststore.type=PEM\n")
    assert "is a PKCS12 store, not PEM: set ssl.truststore.type=PKCS12" in refusal(config)
    properties(config, "ssl.truststore.location=t.p12\nssl.truststore.type=BCFKS\n")
    assert refusal(config).startswith(f"ssl.truststore.type {where}='BCFKS': must be PKCS12")


# --- PEM inline -----------------------------------------------------------------------------------


def continued(pem: str) -> str:
    """A PEM block as client.properties files carry it: one line per line, ``\\`` ended."""
    return " \\\n    ".join(pem.strip().splitlines())


@pytest.mark.parametrize("encrypted", [True, False])
async def test_inline_pem_keystore_and_truststore(
    pki: Pki, tmp_path: Path, encrypted: bool
) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode())
        if encrypted
        else serialization.NoEncryption()
    )
    key = pki.client_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()
    config = properties(
        tmp_path / "c.properties",
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.certificate.chain={continued(_pem(pki.client))}\n"
        f"ssl.keystore.key={continued(key)}\n"
        + (f"ssl.key.password={KEY_PASSWORD}\n" if encrypted else "")
        + f"ssl.truststore.type=PEM\nssl.truststore.certificates={continued(_pem(pki.ca))}\n",
    )
    security = from_file(config)
    assert security.material.cadata == _pem(pki.ca)
    assert "client certificate CN=alice (inline PEM)" in security.describe()
    for text in (repr(security), str(security), security.describe()):
        assert "PRIVATE KEY" not in text
        assert KEY_PASSWORD not in text
    seen = await handshake(security, pki, require_client=True)
    assert subject_cn(seen) == "alice"
    if encrypted:
        config.write_text(config.read_text().replace(KEY_PASSWORD, WRONG))
        message = refusal(config)
        assert message.startswith(f"ssl.key.password (--kafka-config {config})='…': does not")
        config.write_text(config.read_text().replace(f"ssl.key.password={WRONG}\n", ""))
        assert refusal(config).startswith(f"ssl.key.password (--kafka-config {config})='': is not")


def test_inline_pem_from_variables_and_what_java_refuses(pki: Pki, tmp_path: Path) -> None:
    key = pki.client_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "SSL",
        "TURNLOG_KAFKA_SSL_KEYSTORE_CERTIFICATE_CHAIN": _pem(pki.client) + _pem(pki.ca),
        "TURNLOG_KAFKA_SSL_KEYSTORE_KEY": key,
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_CERTIFICATES": _pem(pki.ca),
    }
    security = KafkaSecurity.from_env(env)
    assert security.material.client is not None
    assert len(security.material.client.chain) == 2
    assert "PRIVATE KEY" not in repr(security)
    # A chain without its key; a store password on PEM stores (Java refuses both too).
    assert refusal({**env, "TURNLOG_KAFKA_SSL_KEYSTORE_KEY": ""}).startswith(
        "TURNLOG_KAFKA_SSL_KEYSTORE_KEY='': is needed with"
    )
    assert refusal({**env, "TURNLOG_KAFKA_SSL_KEYSTORE_PASSWORD": WRONG}).startswith(
        "TURNLOG_KAFKA_SSL_KEYSTORE_PASSWORD='…': a PEM keystore has no store password"
    )
    assert refusal({**env, "TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD": WRONG}).startswith(
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD='…': a PEM truststore has no password"
    )
    assert "holds no PEM certificate" in refusal(
        {**env, "TURNLOG_KAFKA_SSL_TRUSTSTORE_CERTIFICATES": "not pem"}
    )
    # An encrypted key of the traditional format: Java reads PKCS#8 only, and says so.
    traditional = pki.client_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
    ).decode()
    message = refusal(
        {
            **env,
            "TURNLOG_KAFKA_SSL_KEYSTORE_KEY": traditional,
            "TURNLOG_KAFKA_SSL_KEY_PASSWORD": KEY_PASSWORD,
        }
    )
    assert message.startswith("TURNLOG_KAFKA_SSL_KEYSTORE_KEY='…': is an encrypted key in the")
    assert "openssl pkcs8 -topk8" in message
    # Two client certificates at once.
    keystore(tmp_path / "k.p12", pki.client_key, pki.client, [], STORE_PASSWORD)
    both = {
        **env,
        "TURNLOG_KAFKA_SSL_KEYSTORE_LOCATION": str(tmp_path / "k.p12"),
        "TURNLOG_KAFKA_SSL_KEYSTORE_PASSWORD": STORE_PASSWORD,
    }
    assert "both give the client certificate" in refusal(both)


# --- variables over the file, secrets, the loading itself ----------------------------------------


def test_a_store_variable_replaces_the_files_store(pki: Pki, tmp_path: Path) -> None:
    """The file names a PEM truststore; the variable's PKCS12 one replaces it, type and all."""
    pki.pem(tmp_path / "other.pem", pki.other_ca)
    config = properties(
        tmp_path / "c.properties", "ssl.truststore.type=PEM\nssl.truststore.location=other.pem\n"
    )
    truststore(tmp_path / "t.p12", pki.ca, password=STORE_PASSWORD)
    env = {
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_LOCATION": str(tmp_path / "t.p12"),
        "TURNLOG_KAFKA_SSL_TRUSTSTORE_PASSWORD": STORE_PASSWORD,
    }
    security = KafkaSecurity.from_env(env, config_file=config)
    assert security.ca_file is None
    assert security.material.cadata == _pem(pki.ca)
    # Only the type from a variable: the file's location is read under it.
    security = KafkaSecurity.from_env(
        {"TURNLOG_KAFKA_SSL_TRUSTSTORE_TYPE": "PEM"}, config_file=config
    )
    assert (security.ca_file, security.truststore) == (None, tmp_path / "other.pem")
    assert security.material.cadata == _pem(pki.other_ca)


def test_passwords_are_in_no_repr_str_or_start_line(pki: Pki, tmp_path: Path) -> None:
    keystore(tmp_path / "k.p12", pki.client_key, pki.client, [pki.ca], STORE_PASSWORD)
    truststore(tmp_path / "t.p12", pki.ca, password=STORE_PASSWORD)
    config = properties(
        tmp_path / "c.properties",
        f"ssl.keystore.location=k.p12\nssl.keystore.password={STORE_PASSWORD}\n"
        f"ssl.truststore.location=t.p12\nssl.truststore.password={STORE_PASSWORD}\n",
    )
    settings = Settings.from_env({}, kafka_config=config)
    client = settings.kafka.material.client
    for text in (
        repr(settings),
        str(settings),
        repr(settings.kafka),
        repr(settings.kafka.material),
        repr(client),
        settings.connection.describe(),
    ):
        assert STORE_PASSWORD not in text
        assert "PRIVATE KEY" not in text
    assert settings.connection.describe() == (
        f"Kafka at 127.0.0.1:9092 (SSL truststore {tmp_path / 't.p12'} "
        f"client certificate CN=alice ({tmp_path / 'k.p12'}))"
    )


class RecordingContext:
    """Stands in for an SSLContext: what load_cert_chain was given, and the file as it was."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes, int, bytes]] = []

    def load_cert_chain(self, certfile: str, password: bytes) -> None:
        data = Path(certfile).read_bytes()
        self.seen.append((certfile, data, stat.S_IMODE(os.stat(certfile).st_mode), password))
        ssl.create_default_context().load_cert_chain(certfile, password=password)


@pytest.fixture
def no_memfd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path


@pytest.mark.parametrize("memory", [True, False], ids=["memfd", "temporary-file"])
def test_the_key_reaches_ssl_encrypted_and_leaves_no_file(
    pki: Pki, tmp_path: Path, request: pytest.FixtureRequest, memory: bool
) -> None:
    if memory and not hasattr(os, "memfd_create"):
        pytest.skip("no memfd on this system")
    temp = tmp_path if memory else request.getfixturevalue("no_memfd")
    keystore(tmp_path / "k.p12", pki.client_key, pki.client, [pki.ca], STORE_PASSWORD)
    security = KafkaSecurity(
        protocol="SSL", keystore=tmp_path / "k.p12", keystore_password=Secret(STORE_PASSWORD)
    )
    client = security.material.client
    assert client is not None
    before = sorted(temp.iterdir())
    context = RecordingContext()
    client.load_into(context)  # type: ignore[arg-type]
    [(path, data, mode, one_time)] = context.seen
    assert b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in data
    assert b"-----BEGIN PRIVATE KEY-----" not in data
    assert STORE_PASSWORD.encode() not in one_time
    assert data.count(b"-----BEGIN CERTIFICATE-----") == 2
    if memory:
        assert path.startswith("/proc/self/fd/")
    else:
        assert Path(path).parent == temp
        assert mode == 0o600
        assert not Path(path).exists()  # deleted right after the load
    assert sorted(temp.iterdir()) == before
