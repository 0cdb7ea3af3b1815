"""OAUTHBEARER with the client-credentials grant, as Java clients configure it.

A Java ``client.properties`` for an OAuth cluster (Confluent Cloud, Strimzi with Keycloak, Amazon
MSK through an OIDC provider, Aiven) names a token endpoint
(``sasl.oauthbearer.token.endpoint.url``) and gives the client id, secret and scope in the
OAuthBearerLoginModule's JAAS line; Kafka's own ``OAuthBearerLoginCallbackHandler`` then posts
``grant_type=client_credentials`` there and refreshes the token before it expires. aiokafka
takes a token provider instead: :class:`ClientCredentialsProvider` is that handler's behaviour
for it -- one token shared by every connection of the process, fetched again once 80% of its
lifetime has passed (Java's ``sasl.login.refresh.window.factor``), so a connection made later
never presents an expired token.

A refused grant (a wrong secret, an unknown client) is :class:`AuthenticationFailedError`
naming the endpoint and its answer, never the secret, and never waited out as an outage.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import AuthenticationFailedError

if TYPE_CHECKING:
    from turnlog.kafka.secret import Secret

#: The share of a token's lifetime after which it is fetched again (Java's default window).
REFRESH_FACTOR: Final = 0.8
#: How long one request to the token endpoint may take.
REQUEST_SECONDS: Final = 10.0


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """Where and as whom a client-credentials token is fetched."""

    token_endpoint: str
    client_id: str
    client_secret: Secret = field(repr=False)
    scope: str | None = None

    def __post_init__(self) -> None:
        scheme = urllib.parse.urlsplit(self.token_endpoint).scheme
        if scheme not in ("https", "http"):
            raise ValueError("must be an http(s) URL")


class ClientCredentialsProvider(AbstractTokenProvider):  # type: ignore[misc]
    """aiokafka's token provider over one :class:`ClientCredentials`: a cached token, fetched
    again once :data:`REFRESH_FACTOR` of its lifetime has passed."""

    def __init__(self, credentials: ClientCredentials) -> None:
        self.credentials = credentials
        self._token: str | None = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()
        #: Tokens fetched so far (what a test or an operator's debugging reads).
        self.fetched = 0

    async def token(self) -> str:
        async with self._lock:
            if self._token is None or time.monotonic() >= self._refresh_at:
                started = time.monotonic()
                token, lifetime = await asyncio.to_thread(self._fetch)
                self._token = token
                self._refresh_at = started + max(1.0, lifetime * REFRESH_FACTOR)
                self.fetched += 1
            return self._token

    def _fetch(self) -> tuple[str, float]:
        """POST the grant (client id and secret as HTTP Basic, as RFC 6749 prefers)."""
        creds = self.credentials
        form = {"grant_type": "client_credentials"}
        if creds.scope:
            form["scope"] = creds.scope
        basic = base64.b64encode(
            f"{_form(creds.client_id)}:{_form(creds.client_secret.reveal())}".encode()
        ).decode()
        request = urllib.request.Request(
            creds.token_endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        where = f"the token endpoint {creds.token_endpoint}"
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as answer:
                body = json.loads(answer.read(1 << 20))
        except urllib.error.HTTPError as exc:
            said = _error_of(exc)
            raise AuthenticationFailedError(
                f"{where} refused client {creds.client_id!r}: HTTP {exc.code}{said}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise AuthenticationFailedError(f"{where} gave no token: {exc}") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise AuthenticationFailedError(f"{where} answered without an access_token")
        lifetime = body.get("expires_in", 3600)
        return token, float(lifetime) if isinstance(lifetime, int | float) else 3600.0


def _form(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _error_of(exc: urllib.error.HTTPError) -> str:
    """The OAuth error code the endpoint sent (``invalid_client``), if any, never its body."""
    try:
        body = json.loads(exc.read(1 << 16))
    except (ValueError, OSError):
        return ""
    code = body.get("error") if isinstance(body, dict) else None
    return f" ({code})" if isinstance(code, str) and code.isprintable() and len(code) < 80 else ""


__all__ = ["ClientCredentials", "ClientCredentialsProvider"]
