"""Kafka client security: client.properties parsing, the mapping onto aiokafka, no leaked secret."""

from __future__ import annotations

import logging
import re
import ssl
import subprocess
from pathlib import Path

import pytest

from turnlog.errors import SettingError
from turnlog.kafka import clients
from turnlog.kafka.oauth import ClientCredentialsProvider
from turnlog.kafka.security import KafkaSecurity, Secret, parse_properties
from turnlog.settings import Settings

REPO = Path(__file__).resolve().parents[2]
#: A test value, searched for in every output.
PASSWORD = "s3cr3t-Pa55word"

SCRAM_PROPERTIES = f"""\
# written for kafka-console-consumer --consumer.config
bootstrap.servers=broker-1.example.com:9093,broker-2.example.com:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="alice" \\
    password="{PASSWORD}";
ssl.truststore.type=PEM
ssl.truststore.location=ca.pem
ssl.endpoint.identification.algorithm=https
client.id=team-agents
key.deserializer=org.apache.kafka.common.serialization.StringDeserializer
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throw-away CA and a client certificate whose key is encrypted with PASSWORD."""
    d = tmp_path_factory.mktemp("pki")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=test-ca")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-passout", f"pass:{PASSWORD}", "-keyout", "client.key",
        "-out", "client.csr", "-subj", "/CN=alice")  # fmt: skip
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "client.pem", "-days", "2")  # fmt: skip
    return d


def test_properties_format_comments_continuations_and_separators() -> None:
    props = parse_properties(
        "# comment\n! also a comment\na=1\nb : two words \nc three\nd=x\\\n   y\ne=back\\\\slash\n"
    )
    assert props == {"a": "1", "b": "two words", "c": "three", "d": "xy", "e": "back\\slash"}


def test_a_java_scram_client_properties_works_unchanged(pki: Path) -> None:
    (pki / "client.properties").write_text(SCRAM_PROPERTIES)
    security = KafkaSecurity.from_env({}, config_file=pki / "client.properties")
    assert security.protocol == "SASL_SSL"
    assert security.mechanism == "SCRAM-SHA-512"
    assert security.username == "alice"
    assert security.password == Secret(PASSWORD)
    assert security.ca_file == pki / "ca.pem"  # relative to the file
    assert security.client_id == "team-agents"
    options = clients.client_options(as_settings(security), "turnlog-x")
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "alice"
    assert options["sasl_plain_password"] == PASSWORD
    assert options["client_id"] == "team-agents"
    assert options["bootstrap_servers"] == "broker-1.example.com:9093,broker-2.example.com:9093"
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname is True
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_the_issue_30_file_a_scram_cluster_with_a_pkcs12_truststore(pki: Path) -> None:
    """Refused before as "a password-protected (JKS/PKCS12) truststore cannot be read"."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    ca = x509.load_pem_x509_certificate((pki / "ca.pem").read_bytes())
    (pki / "ca.p12").write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca, b"ca")],
            serialization.BestAvailableEncryption(PASSWORD.encode()),
        )
    )
    text = SCRAM_PROPERTIES.replace(
        "ssl.truststore.type=PEM\nssl.truststore.location=ca.pem\n",
        f"ssl.truststore.type=PKCS12\nssl.truststore.location=ca.p12\n"
        f"ssl.truststore.password={PASSWORD}\n",
    )
    assert "ca.p12" in text
    (pki / "p12.properties").write_text(text)
    security = KafkaSecurity.from_env({}, config_file=pki / "p12.properties")
    assert (security.mechanism, security.username) == ("SCRAM-SHA-512", "alice")
    assert security.truststore == pki / "ca.p12"
    assert security.material.cadata == ca.public_bytes(serialization.Encoding.PEM).decode()
    options = clients.client_options(as_settings(security), "turnlog-x")
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert PASSWORD not in repr(security) + security.describe()


def as_settings(security: KafkaSecurity) -> Settings:
    return Settings(bootstrap_servers=security.bootstrap_servers or "x:1", kafka=security)


def test_the_files_bootstrap_comes_after_the_option_and_the_variable(pki: Path) -> None:
    path = pki / "client.properties"
    path.write_text(SCRAM_PROPERTIES)
    env = {"KAFKA_LOCAL_PORT": "9999"}
    from_file = Settings.from_env(env, kafka_config=path)
    assert from_file.bootstrap_servers.startswith("broker-1.example.com:9093")
    env["TURNLOG_BOOTSTRAP_SERVERS"] = "other:9093"
    assert Settings.from_env(env, kafka_config=path).bootstrap_servers == "other:9093"
    assert (
        Settings.from_env(env, kafka_config=path, bootstrap_servers="opt:1").bootstrap_servers
        == "opt:1"
    )


def test_without_option_or_variable_the_local_brokers_own_address_is_used() -> None:
    assert Settings.from_env({}).bootstrap_servers == "127.0.0.1:9092"
    assert Settings.from_env({"KAFKA_LOCAL_PORT": "9192"}).bootstrap_servers == "127.0.0.1:9192"
    env = {"KAFKA_LOCAL_HOST": "10.0.0.5", "KAFKA_LOCAL_PORT": "9192"}
    assert Settings.from_env(env).bootstrap_servers == "10.0.0.5:9192"
    env["TURNLOG_BOOTSTRAP_SERVERS"] = "elsewhere:9092"
    assert Settings.from_env(env).bootstrap_servers == "elsewhere:9092"


def test_mutual_tls_from_variables_with_an_encrypted_key(pki: Path) -> None:
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "ssl",
        "TURNLOG_KAFKA_SSL_CA_FILE": str(pki / "ca.pem"),
        "TURNLOG_KAFKA_SSL_CERT_FILE": str(pki / "client.pem"),
        "TURNLOG_KAFKA_SSL_KEY_FILE": str(pki / "client.key"),
        "TURNLOG_KAFKA_SSL_KEY_PASSWORD": PASSWORD,
        "TURNLOG_KAFKA_SSL_CHECK_HOSTNAME": "false",
    }
    settings = Settings.from_env(env)
    options = clients.client_options(settings, "turnlog-x")
    assert options["security_protocol"] == "SSL"
    assert "sasl_mechanism" not in options
    assert options["ssl_context"].check_hostname is False
    # A wrong key password names the files, never the password.
    env["TURNLOG_KAFKA_SSL_KEY_PASSWORD"] = "wrong-" + PASSWORD
    with pytest.raises(SettingError) as caught:
        clients.client_options(Settings.from_env(env), "turnlog-x")
    assert "client.key" in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_plain_and_librdkafka_key_names(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("")
    (tmp_path / "c.properties").write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username=bob\nsasl.password={PASSWORD}\nssl.ca.location=ca.pem\n"
    )
    security = KafkaSecurity.from_env({"TURNLOG_KAFKA_CONFIG": str(tmp_path / "c.properties")})
    assert (security.mechanism, security.username) == ("PLAIN", "bob")
    assert security.ca_file == tmp_path / "ca.pem"
    options = clients.client_options(as_settings(security), "x")
    assert "ssl_context" not in options  # SASL_PLAINTEXT: no TLS
    assert options["sasl_plain_password"] == PASSWORD


def test_variables_override_the_file(tmp_path: Path) -> None:
    (tmp_path / "c.properties").write_text(SCRAM_PROPERTIES.replace("ca.pem", "/nope/ca.pem"))
    env = {"TURNLOG_KAFKA_SASL_USERNAME": "carol", "TURNLOG_KAFKA_SASL_MECHANISM": "scram-sha-256"}
    security = KafkaSecurity.from_env(env, config_file=tmp_path / "c.properties")
    assert (security.username, security.mechanism) == ("carol", "SCRAM-SHA-256")
    assert security.password == Secret(PASSWORD)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        # A store that is not there; a store password without a store; a chain without a key.
        ("ssl.truststore.location=/etc/kafka/truststore.jks", "ssl.truststore.location"),
        ("ssl.truststore.password=changeit", "ssl.truststore.password"),
        (
            "ssl.keystore.location=/etc/kafka/keystore.p12\nssl.keystore.type=PKCS12",
            "ssl.keystore.location",
        ),
        ("sasl.mechanism=GSSAPI", "sasl.mechanism"),
        ("sasl.kerberos.service.name=kafka", "sasl.kerberos.service.name"),
        (
            "sasl.login.callback.handler.class=com.example.Handler",
            "sasl.login.callback.handler.class",
        ),
        (
            "sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required;",
            "sasl.jaas.config",
        ),
        ("ssl.keystore.key=-----BEGIN", "ssl.keystore.certificate.chain"),
        ("ssl.keystore.type=PEM\nssl.keystore.password=changeit", "ssl.keystore.password"),
        ("ssl.cipher.suites=TLS_AES_128_GCM_SHA256", "ssl.cipher.suites"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256", "sasl.jaas.config"),
        ("security.protocol=TLS", "security.protocol"),
    ],
)
def test_what_aiokafka_cannot_do_is_refused_by_name(tmp_path: Path, line: str, named: str) -> None:
    path = tmp_path / "c.properties"
    path.write_text(line + "\n")
    with pytest.raises(SettingError) as caught:
        KafkaSecurity.from_env({}, config_file=path)
    message = str(caught.value)
    assert named in message
    assert "\n" not in message
    assert "changeit" not in message


def test_oauthbearer_takes_a_token_provider_hook() -> None:
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "TURNLOG_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
    }
    with pytest.raises(SettingError, match="TURNLOG_KAFKA_OAUTH_TOKEN_PROVIDER"):
        KafkaSecurity.from_env(env)
    env["TURNLOG_KAFKA_OAUTH_TOKEN_PROVIDER"] = "tests.unit.token_provider:StaticTokenProvider"
    security = KafkaSecurity.from_env(env)
    options = clients.client_options(as_settings(security), "x")
    assert options["sasl_mechanism"] == "OAUTHBEARER"
    assert options["sasl_oauth_token_provider"] is security.token_provider
    env["TURNLOG_KAFKA_OAUTH_TOKEN_PROVIDER"] = "tests.unit.token_provider:missing"
    with pytest.raises(SettingError, match="cannot be loaded"):
        KafkaSecurity.from_env(env)


def test_secrets_never_in_repr_str_errors_or_the_start_line(pki: Path) -> None:
    (pki / "client.properties").write_text(SCRAM_PROPERTIES)
    settings = Settings.from_env(
        {"TURNLOG_KAFKA_SSL_KEY_PASSWORD": PASSWORD}, kafka_config=pki / "client.properties"
    )
    for text in (
        repr(settings),
        str(settings),
        repr(settings.kafka),
        settings.connection.describe(),
    ):
        assert PASSWORD not in text
    assert "SCRAM-SHA-512 as alice" in settings.connection.describe()
    # A file whose JAAS line is broken is refused without echoing the line.
    (pki / "bad.properties").write_text(
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'password="{PASSWORD}";\n'
    )
    with pytest.raises(SettingError) as caught:
        Settings.from_env({}, kafka_config=pki / "bad.properties")
    assert PASSWORD not in str(caught.value)
    assert "username" in str(caught.value)


def test_every_kafka_client_is_built_in_clients_py() -> None:
    """A client constructed anywhere else would connect without the security settings."""
    constructor = re.compile(r"\bAIOKafka(Producer|Consumer|AdminClient)\(")
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for root in ("src", "bench")
        for path in sorted((REPO / root).rglob("*.py"))
        if path.name != "clients.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if constructor.search(line)
    ]
    assert offenders == []


def test_operator_settings_from_variables() -> None:
    env = {"TURNLOG_REPLICATION_FACTOR": "3", "TURNLOG_MIN_INSYNC_REPLICAS": "2"}
    settings = Settings.from_env({**env, "TURNLOG_CREATE_TOPICS": "false"})
    assert (settings.replication_factor, settings.min_insync_replicas) == (3, 2)
    assert settings.create_topics is False
    with pytest.raises(SettingError, match="TURNLOG_CREATE_TOPICS"):
        Settings.from_env({"TURNLOG_CREATE_TOPICS": "maybe"})


def test_acls_per_role_are_least_privilege() -> None:
    from turnlog.consumers.ownership import transactional_id
    from turnlog.kafka.acls import role_acls
    from turnlog.kafka.topics import TopicSet

    topics = TopicSet("t.", partitions=3)
    roles = role_acls(topics, "app", publisher="pub", worker="User:wrk", agent="agt", reader="rdr")
    assert [a.line() for a in roles["publisher"]] == [
        "User:pub WRITE TOPIC t.answers LITERAL",
        "User:pub DESCRIBE TOPIC t.answers LITERAL",
    ]
    every = [a for entries in roles.values() for a in entries]
    assert not [a for a in every if a.operation in ("ALL", "CREATE", "ALTER", "DELETE")]
    assert not [a for a in every if a.resource_type == "CLUSTER"]
    # Only the worker writes resumed turns; nobody but the worker and the agent owns transactions.
    writers = {a.principal for a in every if a.operation == "WRITE" and a.name == topics.resumed}
    assert writers == {"User:wrk"}
    worker_ids = [a.name for a in roles["worker"] if a.resource_type == "TRANSACTIONAL_ID"]
    assert all(transactional_id("app", topics.answers, 2).startswith(n) for n in worker_ids)
    # The group `Turnlog.resumed()` reads in by default (issue 37: the ACLs named another).
    assert ("READ", "GROUP", "app.agents") in {
        (a.operation, a.resource_type, a.name) for a in roles["reader"]
    }


def test_sasl_handshake_bytes_never_reach_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    from aiokafka.protocol.admin import SaslAuthenticateRequest, SaslAuthenticateRequest_v1

    # What aiokafka's connection logs: the request as built for the wire (PLAIN: in clear).
    plain = SaslAuthenticateRequest(f"\x00alice\x00{PASSWORD}".encode())
    request = plain.build(SaslAuthenticateRequest_v1)
    assert PASSWORD in repr(request)
    with caplog.at_level(logging.DEBUG, logger="aiokafka.conn"):
        logging.getLogger("aiokafka.conn").debug("Request to %s:%d %d: %s", "h", 1, 2, request)
    assert PASSWORD not in caplog.text
    assert "sasl_auth_bytes=[redacted]" in caplog.text


def test_a_retried_offset_lookup_is_not_shown_as_an_error() -> None:
    """aiokafka logs it at ERROR and retries; with no logging set up it must not print.
    (``clients``, imported above, installs the filter.)"""
    assert clients is not None
    fetcher = logging.getLogger("aiokafka.consumer.fetcher")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(level=logging.DEBUG)
    fetcher.addHandler(keep)
    # Other tests may have quieted aiokafka's loggers; this one needs the fetcher's own records.
    level, disabled = fetcher.level, fetcher.disabled
    fetcher.setLevel(logging.DEBUG)
    fetcher.disabled = False
    try:
        fetcher.error("Failed fetch offsets from %s: %s", 1, "NotLeaderForPartitionError")
        fetcher.error("Unexpected error in fetcher routine")
    finally:
        fetcher.removeHandler(keep)
        fetcher.setLevel(level)
        fetcher.disabled = disabled
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", "Failed fetch offsets from 1: NotLeaderForPartitionError"),
        ("ERROR", "Unexpected error in fetcher routine"),
    ]


def test_oauthbearer_client_credentials_from_a_java_client_properties(tmp_path: Path) -> None:
    """The file a managed service hands out: Kafka's own login handler and the JAAS line's
    clientId, clientSecret and scope become turnlog's client-credentials token provider."""
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "sasl.oauthbearer.token.endpoint.url=https://idp.example.com/oauth2/token\n"
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        "sasl.login.refresh.window.factor=0.8\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        'required clientId="turnlog-worker" clientSecret="s3cret-value" scope="kafka";\n'
    )
    security = KafkaSecurity.from_env({}, config_file=path)
    provider = security.token_provider
    assert isinstance(provider, ClientCredentialsProvider)
    creds = provider.credentials
    assert (creds.token_endpoint, creds.client_id, creds.scope) == (
        "https://idp.example.com/oauth2/token",
        "turnlog-worker",
        "kafka",
    )
    assert creds.client_secret.reveal() == "s3cret-value"
    assert "s3cret-value" not in repr(security) + repr(creds)
    # The variables, named after the Java keys, override the file.
    env = {"TURNLOG_KAFKA_SASL_OAUTHBEARER_CLIENT_ID": "turnlog-agent"}
    assert KafkaSecurity.from_env(env, config_file=path).token_provider.credentials.client_id == (
        "turnlog-agent"
    )


def test_oauthbearer_refusals_name_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    lines = (
        "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.oauthbearer.token.endpoint.url=https://idp.example.com/token\n"
    )
    path.write_text(lines)
    with pytest.raises(SettingError, match="needs clientId and clientSecret"):
        KafkaSecurity.from_env({}, config_file=path)
    path.write_text(lines + "sasl.login.callback.handler.class=com.example.MyHandler\n")
    with pytest.raises(SettingError, match="a Java callback cannot run here"):
        KafkaSecurity.from_env({}, config_file=path)
    env = {
        "TURNLOG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "TURNLOG_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
        "TURNLOG_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "ftp://idp.example.com/token",
        "TURNLOG_KAFKA_SASL_OAUTHBEARER_CLIENT_ID": "a",
        "TURNLOG_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": "b",
    }
    with pytest.raises(SettingError, match="TURNLOG_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL"):
        KafkaSecurity.from_env(env)


def test_a_retried_produce_warning_is_info_and_a_final_one_stays_a_warning() -> None:
    """aiokafka's "not leader, retrying" right after topics are made heals in one retry: it is
    no warning on a terminal with no logging set up; a produce error it does not retry is."""
    sender = logging.getLogger("aiokafka.producer.sender")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(level=logging.DEBUG)
    sender.addHandler(keep)
    level = sender.level
    sender.setLevel(logging.DEBUG)
    try:
        sender.warning(
            "Got error produce response on topic-partition %s, retrying. Error: %s", "t-0", "x"
        )
        sender.warning("Got error produce response: %s", "KafkaConnectionError")
    finally:
        sender.removeHandler(keep)
        sender.setLevel(level)
    assert [r.levelname for r in records] == ["INFO", "WARNING"]


def test_a_java_registry_url_and_its_basic_auth_come_from_the_file(tmp_path: Path) -> None:
    """``schema.registry.url`` with ``basic.auth.user.info`` (``USER_INFO``), as Confluent
    Cloud hands them to Java clients: the registry's URL with the key and secret folded in,
    never printed; the variable comes first."""
    path = tmp_path / "c.properties"
    path.write_text(
        "bootstrap.servers=b:9092\n"
        "schema.registry.url=https://psrc-1.eu.aws.confluent.cloud\n"
        "basic.auth.credentials.source=USER_INFO\n"
        "basic.auth.user.info=SRKEY:se/cr@t\n"
    )
    settings = Settings.from_env({}, kafka_config=path)
    assert settings.schema_registry_url == "https://SRKEY:se%2Fcr%40t@psrc-1.eu.aws.confluent.cloud"
    assert "se/cr@t" not in repr(settings.kafka) and "se%2Fcr" not in repr(settings.kafka)
    from turnlog.kafka.registry import RegistryClient

    client = RegistryClient(settings.schema_registry_url)
    assert client.base == "https://psrc-1.eu.aws.confluent.cloud"  # what messages name
    env = {"TURNLOG_SCHEMA_REGISTRY_URL": "http://mine:8081"}
    assert Settings.from_env(env, kafka_config=path).schema_registry_url == "http://mine:8081"

    path.write_text(
        "schema.registry.url=http://r:8081\nbasic.auth.credentials.source=SASL_INHERIT\n"
    )
    with pytest.raises(SettingError, match=r"basic\.auth\.user\.info"):
        Settings.from_env({}, kafka_config=path)
    path.write_text("schema.registry.url=ftp://r\n")
    with pytest.raises(SettingError, match=r"http:// or https://") as refused:
        Settings.from_env({}, kafka_config=path)
    assert "schema.registry.url (--kafka-config" in str(refused.value)
