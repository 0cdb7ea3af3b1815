"""Viewers from the team's OpenID Connect provider: its keys and its tokens' checks (its
settings are :mod:`~turnlog.inbox.oidc_config`'s, its browser sign-in
:mod:`~turnlog.inbox.oidc_flow`'s).

A provider token -- an ID token from the browser sign-in (:mod:`~turnlog.inbox.oidc_flow`), or
an access token in a ``Bearer`` header -- is a viewer when it is signed by a key the provider
publishes (its JWKS, found through ``<issuer>/.well-known/openid-configuration``, or a JWKS
file), names this provider as ``iss``, this inbox (the client id, or a configured audience) in
``aud``, has not expired, and its claims map to at least one inbox scope. The viewer is the
issuer and ``sub``; the name shown is ``preferred_username``, ``email``, ``name`` or ``sub``.

Scopes come from one claim, ``groups`` by default, or ``roles``, or a path into nested claims
(``realm_access.roles``; a claim whose name has dots, such as a URL, is found whole first). With
a scope map, each value of the claim the map names gives its scopes and other values give
none; without one, the claim's values are the scopes themselves (a custom claim holding
``scope_hash`` values, or ``*``).

Keys are cached. A token naming a ``kid`` the cache lacks refetches the JWKS (or rereads the
file) at most once per :attr:`OidcConfig.refetch_seconds`, so a rotation at the provider is
picked up by the first token signed with the new key, and a stream of made-up kids costs one
fetch per interval; a key the provider stopped publishing is gone from the cache after that
fetch. Fetching is done before the check, in :meth:`ProviderKeys.ensure` (awaited, in a
thread): :meth:`OidcVerifier.verify` itself never waits on the network.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit

import jwt

from turnlog.inbox.auth import Viewer
from turnlog.inbox.oidc_config import OidcConfig

log = logging.getLogger(__name__)

ALGORITHMS: Final = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384", "ES512"),
    "OKP": ("EdDSA",),
}

#: The most a provider's document (discovery, JWKS, token response) may hold.
MAX_DOCUMENT_BYTES: Final = 1024 * 1024

NAME_CLAIMS: Final = ("preferred_username", "email", "name", "sub")


class ProviderRefused(Exception):
    """A token or a sign-in the inbox refuses; ``str()`` is one line a person can read."""


def fetch_json(url: str, timeout: float, data: bytes | None = None, **headers: str) -> Any:
    """A provider's JSON document (GET, or POST of ``data``): ``(status, body)``. Raises
    :class:`ProviderRefused` saying what went wrong when it cannot be had."""
    request = urllib.request.Request(url, data=data, headers={"Accept": "application/json"})
    for key, val in headers.items():
        request.add_header(key.replace("_", "-"), val)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body = response.status, response.read(MAX_DOCUMENT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read(MAX_DOCUMENT_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProviderRefused(f"{urlsplit(url).netloc} cannot be reached: {reason}") from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise ProviderRefused(f"{urlsplit(url).netloc} sent more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return status, json.loads(body)
    except ValueError:
        raise ProviderRefused(f"{urlsplit(url).netloc} answered {status} without JSON") from None


def claim_values(claims: Mapping[str, Any], path: str) -> list[str]:
    """The strings at ``path`` (a list, or a space-separated string like ``scope``)."""
    found = _at(claims, path)
    if isinstance(found, str):
        return found.split()
    if isinstance(found, list):
        return [v for v in found if isinstance(v, str) and v]
    return []


def _at(node: Any, path: str) -> Any:
    if not isinstance(node, Mapping):
        return None
    if path in node:
        return node[path]
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:cut])
        if head in node:
            found = _at(node[head], ".".join(parts[cut:]))
            if found is not None:
                return found
    return None


class ProviderKeys:
    """The provider's signing keys by ``kid``, from its JWKS URL or a JWKS file."""

    def __init__(self, config: OidcConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.jwks_uri: str | None = None
        self._clock = clock
        self._keys: dict[str, dict[str, Any]] = {}
        self._fetched: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0

    def key(self, kid: str | None) -> dict[str, Any] | None:
        """The JWK of ``kid`` the cache holds."""
        if kid is None:  # a provider with one key may leave the kid out
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def due(self, kid: str | None) -> bool:
        """Whether :meth:`ensure` would fetch for a token naming ``kid``."""
        if self._fetched is None:
            return True
        age = self._clock() - self._fetched
        if age >= self.config.max_key_age_seconds:
            return True
        return self.key(kid) is None and age >= self.config.refetch_seconds

    async def ensure(self, kid: str | None) -> None:
        """Fetches the keys when the cache is empty or old, or lacks ``kid`` and the last fetch
        is older than the refetch interval; a failed fetch keeps the keys there were."""
        if not self.due(kid):
            return
        async with self._lock:
            if not self.due(kid):  # another request fetched while this one waited
                return
            try:
                keys = await asyncio.to_thread(self._load)
            except ProviderRefused as exc:
                log.warning("inbox: the provider's keys could not be fetched: %s", exc)
                keys = None
            self._fetched = self._clock()
            if keys is not None:
                self._keys = keys

    def _load(self) -> dict[str, dict[str, Any]]:
        self.fetches += 1
        if self.config.jwks_file is not None:
            try:
                document = json.loads(self.config.jwks_file.read_text())
            except (OSError, ValueError) as exc:
                raise ProviderRefused(f"{self.config.jwks_file}: {exc}") from None
        elif self.jwks_uri is None:
            raise ProviderRefused("the provider's discovery document was not read yet")
        else:
            status, document = fetch_json(self.jwks_uri, self.config.http_timeout_seconds)
            if status != 200:
                raise ProviderRefused(f"its JWKS answered {status}")
        listed = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(listed, list):
            raise ProviderRefused("its JWKS has no keys list")
        keys: dict[str, dict[str, Any]] = {}
        for entry in listed:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            if entry.get("kty") not in ALGORITHMS:
                continue
            try:
                jwt.PyJWK(entry)  # one it cannot load is left out, not a failure of the rest
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue
            keys[str(entry.get("kid", ""))] = entry
        return keys


class OidcVerifier:
    """Provider tokens into viewers: :meth:`check` says why not, :meth:`verify` is the hook."""

    def __init__(self, config: OidcConfig, keys: ProviderKeys) -> None:
        self.config = config
        self.keys = keys

    def kid_of(self, token: str) -> tuple[bool, str | None]:
        """``(is this provider's, kid)``, read unverified: what :meth:`ProviderKeys.ensure`
        needs before :meth:`verify` (a viewer JWT of the inbox is not the provider's)."""
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False})
        except (jwt.PyJWTError, ValueError, TypeError):
            return False, None
        kid = header.get("kid")
        return claims.get("iss") == self.config.issuer, kid if isinstance(kid, str) else None

    def check(self, token: str, *, nonce: str | None = None) -> Viewer:
        """The viewer ``token`` names; :class:`ProviderRefused` saying why when it is none.
        ``nonce`` (the browser sign-in's) is required in the token when given."""
        config = self.config
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except (jwt.PyJWTError, ValueError, TypeError):
            raise ProviderRefused("the provider's answer is not a signed token (JWT)") from None
        alg, kid = header.get("alg"), header.get("kid")
        if unverified.get("iss") != config.issuer:
            raise ProviderRefused(
                f"wrong issuer: the token is from {unverified.get('iss')!r}, not {config.issuer}"
            )
        entry = self.keys.key(kid if isinstance(kid, str) else None)
        if entry is None:
            raise ProviderRefused(
                f"the token is signed by a key the provider does not publish (kid {kid!r})"
            )
        declared = entry.get("alg")
        if alg not in ALGORITHMS[entry["kty"]] or declared not in (None, alg):
            raise ProviderRefused(f"the token's algorithm {alg!r} is not its key's")
        try:
            key = jwt.PyJWK(entry, algorithm=str(alg))
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[str(alg)],
                audience=list(config.accepted_audiences) or None,
                issuer=config.issuer,
                leeway=config.leeway_seconds,
                options={"require": ["iss", "sub", "exp", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            when = _when(unverified.get("exp"))
            raise ProviderRefused(f"the token expired{when}: sign in again") from None
        except jwt.InvalidAudienceError:
            raise ProviderRefused(
                f"wrong audience: the token is for {unverified.get('aud')!r}, not this inbox "
                f"({', '.join(config.accepted_audiences)})"
            ) from None
        except jwt.InvalidSignatureError:
            raise ProviderRefused(f"the token's signature does not verify (kid {kid!r})") from None
        except jwt.ImmatureSignatureError:
            raise ProviderRefused("the token is not valid yet (check the clocks)") from None
        except jwt.MissingRequiredClaimError as exc:
            raise ProviderRefused(f"the token has no {exc.claim!r} claim") from None
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise ProviderRefused(f"the token is not valid: {exc}") from None
        if nonce is not None:
            given = claims.get("nonce")
            if not isinstance(given, str) or not hmac.compare_digest(
                given.encode(), nonce.encode()
            ):
                raise ProviderRefused(
                    "bad nonce: the ID token is not this sign-in's (replayed or mixed up)"
                )
            audience = claims["aud"]
            several = isinstance(audience, list) and len(audience) > 1
            if several and claims.get("azp") != config.client_id:
                raise ProviderRefused("the ID token was issued to another client (azp)")
        return self._viewer(claims)

    def _viewer(self, claims: Mapping[str, Any]) -> Viewer:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise ProviderRefused("the token names no subject (sub)")
        name = next(
            (str(claims[c]) for c in NAME_CLAIMS if isinstance(claims.get(c), str) and claims[c]),
            subject,
        )
        values = claim_values(claims, self.config.scopes_claim)
        scope_map = self.config.scope_map
        if scope_map is None:
            scopes = frozenset(values)
        else:
            scopes = frozenset(s for v in values for s in scope_map.get(v, ()))
        if not scopes:
            raise ProviderRefused(
                f"signed in as {name}, but your {self.config.scopes_claim!r} claim gives no "
                "inbox scope: ask your operator to map one of your groups or roles"
            )
        expires = datetime.fromtimestamp(int(claims["exp"]), UTC)
        return Viewer(name, scopes, self.config.issuer, subject, expires)

    def verify(self, token: str) -> Viewer | None:
        """The hook: the viewer of a valid provider token, else ``None`` (never raises)."""
        try:
            return self.check(token)
        except ProviderRefused:
            return None

    __call__ = verify


def _when(exp: Any) -> str:
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return f" at {datetime.fromtimestamp(exp, UTC):%Y-%m-%d %H:%M:%S} UTC"
    return ""


def first_of(*verifiers: Callable[[str], Viewer | None]) -> Callable[[str], Viewer | None]:
    """A hook trying each verifier in turn (the inbox's viewer JWTs, then the provider's)."""

    def verify(credential: str) -> Viewer | None:
        for each in verifiers:
            viewer = each(credential)
            if viewer is not None:
                return viewer
        return None

    return verify
