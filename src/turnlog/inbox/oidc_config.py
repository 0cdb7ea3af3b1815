"""What ``turnlog inbox`` is told of the team's OpenID Connect provider: ``TURNLOG_INBOX_OIDC_*``
variables, each overridden by the verb's ``--oidc-*`` option; every value checked when the
config is built (a :class:`~turnlog.errors.SettingError` naming where it came from).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from turnlog.errors import SettingError

ENV: Final = {
    "issuer": "TURNLOG_INBOX_OIDC_ISSUER",
    "client_id": "TURNLOG_INBOX_OIDC_CLIENT_ID",
    "client_secret_file": "TURNLOG_INBOX_OIDC_CLIENT_SECRET_FILE",
    "audience": "TURNLOG_INBOX_OIDC_AUDIENCE",
    "scopes_claim": "TURNLOG_INBOX_OIDC_SCOPES_CLAIM",
    "scope_map": "TURNLOG_INBOX_OIDC_SCOPE_MAP",
    "jwks_file": "TURNLOG_INBOX_OIDC_JWKS_FILE",
    "redirect_base": "TURNLOG_INBOX_OIDC_REDIRECT_BASE",
    "name": "TURNLOG_INBOX_OIDC_NAME",
}

#: Signatures by a key the provider publishes; never ``none``, never a shared secret (an HMAC
#: key would be the client secret, which the inbox must not treat as a provider's key).


@dataclass(frozen=True, slots=True)
class OidcConfig:
    """The provider and this inbox's place at it (see :func:`build` for the variables)."""

    issuer: str
    client_id: str = ""
    client_secret: str = ""
    #: What ``aud`` may name besides the client id (an access token's API audience).
    audiences: tuple[str, ...] = ()
    scopes_claim: str = "groups"
    #: A claim value to the scopes it gives; ``None``: the claim's values are the scopes.
    scope_map: Mapping[str, frozenset[str]] | None = None
    jwks_file: Path | None = None
    #: The inbox's public address (``https://inbox.example.com``); empty: the request's own.
    redirect_base: str = ""
    #: What the sign-in button says (``Sign in with <name>``); empty: the issuer's host.
    name: str = ""
    request_scopes: str = "openid profile email"
    leeway_seconds: float = 60.0
    refetch_seconds: float = 30.0
    max_key_age_seconds: float = 3600.0
    http_timeout_seconds: float = 10.0
    accepted_audiences: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        wanted = [self.client_id, *self.audiences]
        object.__setattr__(self, "accepted_audiences", tuple(dict.fromkeys(a for a in wanted if a)))

    @property
    def shown_name(self) -> str:
        return self.name or urlsplit(self.issuer).hostname or self.issuer

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def _https_or_local(name: str, url: str) -> None:
    parts = urlsplit(url)
    local = parts.hostname in ("localhost", "127.0.0.1", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and local):
        raise SettingError(name, url, "must be an https:// URL (http:// only on localhost)")


def parse_scope_map(name: str, text: str) -> dict[str, frozenset[str]]:
    """``{"claim value": "scope" | ["scope", ...], ...}`` (JSON) into the map."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingError(name, text, f"is not a JSON object: {exc.msg}") from None
    if not isinstance(raw, dict) or not raw:
        raise SettingError(name, text, 'must be a JSON object, {"group": ["scope", ...]}')
    found: dict[str, frozenset[str]] = {}
    for value, scopes in raw.items():
        listed = [scopes] if isinstance(scopes, str) else scopes
        if not isinstance(listed, list) or not all(isinstance(s, str) and s for s in listed):
            raise SettingError(name, text, f"{value!r} must map to a scope or a list of scopes")
        found[value] = frozenset(listed)
    return found


def build(env: Mapping[str, str], **given: Any) -> OidcConfig | None:
    """The provider's settings from ``TURNLOG_INBOX_OIDC_*``, each overridden by a ``given``
    value that is not ``None`` (the ``turnlog inbox`` options); ``None`` when no issuer is
    set (no provider sign-in). Every value is checked here, naming where it came from."""

    def value(key: str) -> tuple[str, str]:
        option = given.get(key)
        if option is not None:
            return "--oidc-" + key.replace("_", "-"), str(option)
        return ENV[key], env.get(ENV[key], "")

    where, issuer = value("issuer")
    if not issuer:
        return None
    _https_or_local(where, issuer)
    where_base, base = value("redirect_base")
    if base:
        _https_or_local(where_base, base)
    where_secret, secret_file = value("client_secret_file")
    secret = ""
    if secret_file:
        try:
            secret = Path(secret_file).read_text().strip()
        except OSError as exc:
            raise SettingError(where_secret, secret_file, f"cannot be read: {exc}") from None
    where_jwks, jwks_file = value("jwks_file")
    if jwks_file and not Path(jwks_file).is_file():
        raise SettingError(where_jwks, jwks_file, "is not a file")
    where_map, map_text = value("scope_map")
    _, audience = value("audience")
    _, claim = value("scopes_claim")
    _, client_id = value("client_id")
    return OidcConfig(
        issuer=issuer,
        client_id=client_id,
        client_secret=secret,
        audiences=tuple(a for a in audience.replace(",", " ").split() if a),
        scopes_claim=claim or "groups",
        scope_map=parse_scope_map(where_map, map_text) if map_text else None,
        jwks_file=Path(jwks_file) if jwks_file else None,
        redirect_base=base.rstrip("/"),
        name=value("name")[1],
    )
