"""SASL OAUTHBEARER on a real broker, with the client-credentials grant as Java clients set it.

The identity provider is the test's own (no OIDC provider installs here from a package
registry and runs without a container): a discovery-free token endpoint and JWKS over HTTP,
signing RS256 with a real key from ``cryptography``. The broker checks every token with Kafka's
own ``OAuthBearerValidatorCallbackHandler`` against that JWKS (``kafka.sh start-secure`` with
``KAFKA_LOCAL_OAUTH_JWKS``); each role's principal is its token's ``sub``, so the ACLs
``turnlog acls`` prints apply to it as to a SCRAM user of that name.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from aiokafka.errors import AuthenticationFailedError
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.brokers import SECURE_USERS, SecureBroker, free_ports
from tests.conftest import Names
from tests.deployment import REQUEST, make_deployment, sample_checkpoint
from tests.integration.secured_support import prepare_cluster, run_flow, until_acls_apply
from tests.kafka_helpers import eventually
from turnlog.api import Turnlog
from turnlog.kafka.oauth import ClientCredentialsProvider
from turnlog.settings import Settings

pytest_plugins = ["tests.brokers"]

#: Short, so the test sees a token expire and the provider fetch the next one.
LIFETIME = 8


@dataclass
class Provider:
    """A token endpoint and a JWKS: client credentials in, RS256 access tokens out."""

    secrets: dict[str, str]
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    kid: str = "key-1"
    issued: list[dict[str, object]] = field(default_factory=list)
    url: str = ""

    def jwks(self) -> dict[str, object]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def grant(
        self, authorization: str, form: dict[str, list[str]]
    ) -> tuple[int, dict[str, object]]:
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        try:
            client, _, secret = (
                base64.b64decode(authorization.removeprefix("Basic ")).decode().partition(":")
            )
        except ValueError:
            return 401, {"error": "invalid_client"}
        client, secret = urllib.parse.unquote(client), urllib.parse.unquote(secret)
        if self.secrets.get(client) != secret:
            return 401, {"error": "invalid_client"}
        now = int(time.time())
        claims = {"iss": self.url, "sub": client, "aud": "kafka", "iat": now, "exp": now + LIFETIME}
        claims["scope"] = form.get("scope", ["kafka"])[0]
        self.issued.append(claims)
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": LIFETIME}


@pytest.fixture
def provider() -> Iterator[Provider]:
    users = {user: f"secret-{user}" for user in SECURE_USERS}
    idp = Provider(users)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, idp.jwks()) if self.path == "/jwks" else self._send(404, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            if self.path != "/token":
                self._send(404, {})
                return
            self._send(*idp.grant(self.headers.get("Authorization", ""), form))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    idp.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield idp
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def oauth_broker(
    tmp_path_factory: pytest.TempPathFactory, provider: Provider
) -> AsyncIterator[SecureBroker]:
    env = {"KAFKA_LOCAL_OAUTH_JWKS": f"{provider.url}/jwks"}
    broker = SecureBroker(tmp_path_factory.mktemp("oauth-kafka"), free_ports(4), SECURE_USERS, env)
    try:
        await broker.start()
        yield broker
    finally:
        await broker.stop()


def _properties(
    broker: SecureBroker, provider: Provider, user: str, path: Path, secret: str | None = None
) -> Path:
    """A Java client.properties for the OAuth listener, as a managed service hands it out."""
    path.write_text(
        f"bootstrap.servers={broker.oauth_bootstrap}\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={provider.url}/token\n"
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        f'required clientId="{user}" clientSecret="{secret or provider.secrets[user]}" '
        'scope="kafka";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={broker.ca_file}\n"
    )
    return path


async def test_the_whole_flow_over_oauthbearer_with_client_credentials_and_refresh(
    oauth_broker: SecureBroker, provider: Provider, names: Names, tmp_path: Path
) -> None:
    broker = oauth_broker
    dep = make_deployment(
        broker.oauth_bootstrap, names.prefix, names.app, tmp_path / "s", partitions=2
    )
    base = dep.settings.with_(create_topics=False)
    await prepare_cluster(broker, base, broker.security("admin"), admin_bootstrap=broker.bootstrap)

    def as_(user: str) -> Settings:
        props = _properties(broker, provider, user, tmp_path / f"{user}.properties")
        return Settings.from_env(
            {"TURNLOG_BOOTSTRAP_SERVERS": broker.oauth_bootstrap}, kafka_config=props
        ).with_(
            topic_prefix=base.topic_prefix,
            application_id=base.application_id,
            state_dir=base.state_dir,
            keys_dir=base.keys_dir,
            partitions=base.partitions,
            create_topics=False,
        )

    await until_acls_apply(as_("reader"))
    await run_flow(replace(dep, settings=base), as_, "oauth-thread", tmp_path / "w")
    subjects = {str(c["sub"]) for c in provider.issued}
    assert {"agent", "worker", "publisher", "reader"} <= subjects

    # Refresh: once an agent's token has expired, a new connection of the same settings
    # presents a fresh one (the broker refuses an expired token).
    agent = as_("agent")
    provided = agent.kafka.token_provider
    assert isinstance(provided, ClientCredentialsProvider)
    async with Turnlog(agent, keyring=dep.keyring) as tl:
        await tl.pause(sample_checkpoint("oauth-thread-2"), request=REQUEST)
    first = provided.fetched
    assert first >= 1
    expiry = max(int(str(c["exp"])) for c in provider.issued if c["sub"] == "agent")

    async def expired() -> bool:
        return time.time() > expiry + 1

    await eventually(expired, timeout=LIFETIME + 10)
    async with Turnlog(agent, keyring=dep.keyring) as tl:
        await tl.pause(sample_checkpoint("oauth-thread-3"), request=REQUEST)
    assert provided.fetched > first


async def test_a_refused_client_secret_is_told_at_once(
    oauth_broker: SecureBroker, provider: Provider, names: Names, tmp_path: Path
) -> None:
    broker = oauth_broker
    props = _properties(broker, provider, "agent", tmp_path / "wrong.properties", secret="nope")
    settings = Settings.from_env(
        {
            "TURNLOG_BOOTSTRAP_SERVERS": broker.oauth_bootstrap,
            "TURNLOG_TOPIC_PREFIX": names.prefix,
            "TURNLOG_STATE_DIR": str(tmp_path / "s"),
            "TURNLOG_KEYS_DIR": str(tmp_path / "keys"),
            "TURNLOG_BROKER_TIMEOUT": "60",
        },
        kafka_config=props,
    )
    dep = make_deployment(broker.oauth_bootstrap, names.prefix, names.app, tmp_path / "d")
    loop = asyncio.get_running_loop()
    async with Turnlog(settings, keyring=dep.keyring) as tl:
        started = loop.time()
        with pytest.raises(
            AuthenticationFailedError, match=r"refused client 'agent': HTTP 401 \(invalid_client\)"
        ):
            async with asyncio.timeout(40):
                await tl.pause(sample_checkpoint("oauth-wrong"), request=REQUEST)
        assert loop.time() - started < 30  # no wait-out of the 60 s budget
