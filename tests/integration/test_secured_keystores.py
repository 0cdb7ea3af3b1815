"""A Java client.properties with a PKCS12 truststore, against the SASL_SSL broker with the
StandardAuthorizer on (``kafka.sh start-secure``): topics, a pause, an answer and its resumed
turn all through ``--kafka-config``, each role as its own principal with its least-privilege
ACLs -- the file issue 30 was refused with -- and a wrong store password refused at once."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from aiokafka.errors import TopicAuthorizationFailedError
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.brokers import SecureBroker
from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.cli_support import EXIT_USAGE, Cli, cli_env
from tests.kafka_helpers import eventually
from turnlog.kafka.acls import role_acls
from turnlog.kafka.reader import LogReader
from turnlog.kafka.security import KafkaConnection, KafkaSecurity
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings

pytest_plugins = ["tests.brokers"]

STORE_PASSWORD = "trust-" + "a91f3c0d"


def pkcs12_truststore(ca_pem: Path, path: Path, password: str) -> Path:
    """The broker's PEM CA as a Java PKCS12 truststore (as keytool -importcert writes one)."""
    certs = x509.load_pem_x509_certificates(ca_pem.read_bytes())
    path.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(c, b"kafka-ca") for c in certs],
            serialization.BestAvailableEncryption(password.encode()),
        )
    )
    return path


def java_properties(broker: SecureBroker, user: str, truststore: Path, directory: Path) -> Path:
    """The fixture's client.properties for ``user`` with its PEM truststore swapped for the
    PKCS12 one: SASL_SSL, SCRAM-SHA-512, the JAAS line, ``ssl.truststore.*`` of type PKCS12."""
    path = broker.properties(user, directory / f"{user}.properties")
    kept = [line for line in path.read_text().splitlines() if not line.startswith("ssl.")]
    path.write_text(
        "\n".join(kept)
        + f"\nssl.truststore.location={truststore}\n"
        + f"ssl.truststore.password={STORE_PASSWORD}\nssl.truststore.type=PKCS12\n"
    )
    return path


async def test_a_pkcs12_truststore_through_kafka_config(
    secure_broker: SecureBroker, names: Names, tmp_path: Path
) -> None:
    broker = secure_broker
    store = pkcs12_truststore(broker.ca_file, tmp_path / "truststore.p12", STORE_PASSWORD)
    props = {
        user: java_properties(broker, user, store, tmp_path)
        for user in ("admin", "agent", "worker", "publisher", "reader")
    }
    env = {
        **cli_env(broker.bootstrap, names.prefix, names.app, tmp_path),
        "TURNLOG_BROKER_TIMEOUT": "60",
    }

    def as_(user: str) -> Cli:
        return Cli({**env, "TURNLOG_KAFKA_CONFIG": str(props[user])})

    # A wrong store password: one line naming the setting, exit 2, before any broker contact.
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(props["agent"].read_text().replace(STORE_PASSWORD, "not-" + STORE_PASSWORD))
    refused = Cli(env)("--kafka-config", str(wrong), "pending", check=EXIT_USAGE, timeout=30)
    assert refused.lines == [
        f"error: ssl.truststore.password (--kafka-config {wrong})='…': "
        f"does not open the PKCS12 store {store}"
    ]
    assert STORE_PASSWORD not in refused.stderr + refused.stdout
    assert refused.seconds < 20  # refused from the file, not waited out as an outage

    as_("agent")("keys", "new", "--kid", "k1")
    # The operator makes the topics (admin, a super user); no role below may create one.
    created = as_("admin").json("topics", "ensure")
    assert isinstance(created, dict) and len(created["created"]) == 5
    env["TURNLOG_CREATE_TOPICS"] = "false"
    settings = Settings.from_env(env)
    topics = TopicSet.from_settings(settings)
    roles = role_acls(
        topics,
        settings.application_id,
        publisher="publisher",
        agent="agent",
        worker="worker",
        reader="reader",
    )
    await broker.grant(a.line() for entries in roles.values() for a in entries)

    async def acls_applied() -> bool:
        # ACLs reach the authorizer through the metadata log: poll, with a deadline. The
        # library reads the same file: its KafkaSecurity holds the PKCS12 store's CA.
        security = KafkaSecurity.from_env({}, config_file=props["reader"])
        assert security.material.cadata is not None
        reader = LogReader(KafkaConnection(broker.bootstrap, security))
        await reader.start()
        try:
            await reader.partitions_of(topics.resumed, timeout=5)
            return True
        except TopicAuthorizationFailedError:
            return False
        finally:
            await reader.stop()

    await eventually(acls_applied, timeout=30)

    cp = sample_checkpoint("p12-thread")
    checkpoint_file = tmp_path / "checkpoint.json"
    checkpoint_file.write_text(cp.encode())
    paused = as_("agent").json("pause", str(checkpoint_file), "--request", REQUEST)
    assert isinstance(paused, dict) and paused["thread_id"] == "p12-thread"

    worker = as_("worker").spawn("worker", "--instance-id", "p12-worker")
    try:
        response = json.dumps(ANSWER)
        stated = ["--scope", cp.scope_hash, "--session", cp.session_id, "--run", cp.run_id]
        sent = as_("publisher").json(
            "answer", str(paused["token"]), "--response", response, *stated, "--call", "call-1"
        )
        assert isinstance(sent, dict) and sent["answer_id"]
        tailed = as_("reader")(
            "tail", "resumed", "--from-beginning", "--max", "1", "--json", timeout=90
        )
        event = json.loads(tailed.stdout)
        assert (event["type"], event["thread_id"]) == ("TurnResumed", "p12-thread")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_err = worker.communicate(timeout=60)
    assert worker.returncode == 0, worker_err
    assert "resumed 1" in worker_err
    assert f"truststore {store}" in worker_err  # the start line says what it connected with
    for user in props:
        assert broker.passwords[user] not in worker_err
    assert STORE_PASSWORD not in worker_err
