"""Against a SASL_SSL broker with the StandardAuthorizer on (``kafka.sh start-secure``): every
role works with exactly the ACLs ``turnlog acls`` prints, and a principal without a right gets a
one-line "not authorized" (exit 5), neither a hang nor a traceback."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka.errors import (
    AuthenticationFailedError,
    SaslAuthenticationFailed,
)

from tests.brokers import SecureBroker
from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, make_deployment, sample_checkpoint
from tests.integration.secured_support import (
    cannot_forge_a_resumed_turn,
    prepare_cluster,
    run_flow,
    until_acls_apply,
)
from turnlog.api import Turnlog
from turnlog.audit import Auditor
from turnlog.kafka.security import Secret
from turnlog.kafka.topics import TopicSet
from turnlog.projections.projector import CheckpointProjector
from turnlog.projections.store import Store
from turnlog.settings import Settings

pytest_plugins = ["tests.brokers"]


async def test_the_whole_flow_with_least_privilege_acls(
    secure_broker: SecureBroker, names: Names, tmp_path: Path
) -> None:
    broker = secure_broker
    dep = make_deployment(broker.bootstrap, names.prefix, names.app, tmp_path / "s", partitions=2)
    # Operators make the topics (as admin); no role below may create one.
    base = dep.settings.with_(create_topics=False)
    await prepare_cluster(
        broker, base, broker.security("admin"), extra_roles=("projector", "auditor")
    )

    def as_(user: str) -> Settings:
        return base.with_(kafka=broker.security(user))

    await until_acls_apply(as_("reader"))
    await run_flow(dataclasses.replace(dep, settings=base), as_, "secured-thread", tmp_path / "w")
    # The projector's principal reads pauses and consumptions into a store.
    store = Store.open(tmp_path / "projection")
    try:
        async with CheckpointProjector(
            as_("projector").connection, store, TopicSet.from_settings(base)
        ) as projector:
            await projector.catch_up()
        assert store.digest()
        assert store.offsets()
    finally:
        store.close()

    # The auditor's principal judges the log with its own rights alone.
    async with Auditor(as_("auditor"), settle_seconds=0.5, timeout=60) as auditor:
        report = await auditor.audit()
    assert report.holds, report.as_dict()
    assert (report.answers_judged, report.resumed) == (1, 1)

    # A publisher cannot read pauses nor resumed turns: one line, its own exit code, at once.
    props = broker.properties("publisher", tmp_path / "publisher.properties")
    env = {
        "TURNLOG_BOOTSTRAP_SERVERS": broker.bootstrap,
        "TURNLOG_TOPIC_PREFIX": names.prefix,
        "TURNLOG_APPLICATION_ID": names.app,
        "TURNLOG_STATE_DIR": str(tmp_path / "cli-state"),
        "TURNLOG_BROKER_TIMEOUT": "60",
        "PATH": "/usr/bin:/bin",
    }
    for verb in (["pending"], ["tail", "resumed", "--max", "1"]):
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "turnlog", "--kafka-config", str(props), *verb],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,  # the outage budget is 60 s: an answer within 30 s is no wait-out
        )
        assert done.returncode == 5, (verb, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: not authorized: TopicAuthorizationFailedError")
        assert "as publisher" in lines[0]
        assert broker.passwords["publisher"] not in done.stderr + done.stdout

    # A wrong password is said at once (exit 5), not waited out as an unreachable broker.
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(props.read_text().replace(broker.passwords["publisher"], "not-the-password"))
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "turnlog", "--kafka-config", str(wrong), "pending"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 5, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: not authorized: SaslAuthenticationFailed")
    assert len(done.stderr.strip().splitlines()) == 1

    # Nor write a resumed turn: the broker refuses the record.
    await cannot_forge_a_resumed_turn(as_("publisher"))


async def test_a_library_caller_with_a_wrong_password_is_told_at_once(
    secure_broker: SecureBroker, names: Names, tmp_path: Path
) -> None:
    """aiokafka reports a refused SASL handshake only as a failed bootstrap, which the library
    would wait out as an outage for the whole budget (60 s here): every first call says it at
    once, as the CLI does, with aiokafka's own SaslAuthenticationFailed."""
    broker = secure_broker
    dep = make_deployment(broker.bootstrap, names.prefix, names.app, tmp_path / "s", partitions=2)
    good = broker.security("admin")
    wrong = dataclasses.replace(good, password=Secret("not-the-password"))
    settings = dep.settings.with_(kafka=wrong, broker_timeout_seconds=60.0)
    async with Turnlog(dep.settings.with_(kafka=good), keyring=dep.keyring) as tl:
        paused = await tl.pause(sample_checkpoint("wrong-pw"), request=REQUEST)
    loop = asyncio.get_running_loop()
    calls: dict[str, Callable[[Turnlog], Awaitable[object]]] = {
        "pause": lambda tl: tl.pause(sample_checkpoint("wrong-pw-2"), request=REQUEST),
        "answer": lambda tl: tl.answer(paused.token, ANSWER, **paused.axes),
        "run_worker": lambda tl: tl.run_worker(),
        "resumed_turn": lambda tl: tl.resumed_turn("wrong-pw", timeout=50),
    }
    for name, call in calls.items():
        async with Turnlog(settings, keyring=dep.keyring) as tl:
            started = loop.time()
            with pytest.raises(SaslAuthenticationFailed):
                async with asyncio.timeout(40):  # in this task: run_worker raises to its caller
                    await call(tl)
            assert loop.time() - started < 30, name  # no wait-out of the 60 s budget


async def test_the_whole_flow_over_mutual_tls_as_certificate_principals(
    secure_broker: SecureBroker, names: Names, tmp_path: Path
) -> None:
    """The node's mutual-TLS listener: each role connects with a client certificate of its own
    (``ssl.keystore.location`` and ``ssl.key.location`` as a Java client sets them), the broker
    maps the certificate's CN to the principal, and the same least-privilege ACLs apply."""
    broker = secure_broker
    dep = make_deployment(
        broker.mtls_bootstrap, names.prefix, names.app, tmp_path / "s", partitions=2
    )
    base = dep.settings.with_(create_topics=False)
    await prepare_cluster(broker, base, broker.mtls_security("admin"))

    def as_(user: str) -> Settings:
        return base.with_(kafka=broker.mtls_security(user))

    await until_acls_apply(as_("reader"))
    await run_flow(dataclasses.replace(dep, settings=base), as_, "mtls-thread", tmp_path / "w")

    # The certificate is the principal: the publisher's may not write a resumed turn.
    await cannot_forge_a_resumed_turn(as_("publisher"))


async def test_a_client_certificate_the_broker_does_not_trust_is_told_at_once(
    secure_broker: SecureBroker, names: Names, tmp_path: Path
) -> None:
    """A certificate of another CA fails the mutual-TLS handshake: aiokafka says only "Unable
    to bootstrap", which would be waited out as an outage; the library says it at once."""
    broker = secure_broker
    own = tmp_path / "own"
    own.mkdir()
    await asyncio.to_thread(
        subprocess.run,
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(own / "agent.key"),
            "-out",
            str(own / "agent.crt"),
            "-days",
            "1",
            "-subj",
            "/CN=agent",
        ],
        check=True,
        capture_output=True,
    )
    stranger = dataclasses.replace(
        broker.mtls_security("agent"), cert_file=own / "agent.crt", key_file=own / "agent.key"
    )
    dep = make_deployment(broker.mtls_bootstrap, names.prefix, names.app, tmp_path / "s")
    settings = dep.settings.with_(kafka=stranger, broker_timeout_seconds=60.0)
    loop = asyncio.get_running_loop()
    async with Turnlog(settings, keyring=dep.keyring) as tl:
        started = loop.time()
        with pytest.raises(AuthenticationFailedError, match="refused this client's TLS session"):
            async with asyncio.timeout(40):
                await tl.pause(sample_checkpoint("stranger"), request=REQUEST)
        assert loop.time() - started < 30  # no wait-out of the 60 s budget
