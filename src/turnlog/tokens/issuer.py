"""Signing pause claims into a compact JWT."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from turnlog.contracts.claims import PauseClaims
from turnlog.errors import ConfigurationError
from turnlog.tokens.key import JWT
from turnlog.tokens.keyring import Keyring


class TokenIssuer:
    """Signs pause claims with the keyring's signing key."""

    __slots__ = ("_audience", "_issuer", "_key", "_secret")

    def __init__(self, keyring: Keyring, *, issuer: str, audience: str) -> None:
        key = keyring.signing_key()
        if key.signing is None:  # the keyring guarantees it; kept for the type checker
            raise ConfigurationError(f"key {key.kid!r} cannot sign")
        self._key = key
        self._secret: Ed25519PrivateKey | bytes = key.signing
        self._issuer = issuer
        self._audience = audience

    def issue(self, claims: PauseClaims) -> str:
        payload: dict[str, Any] = {
            "iss": self._issuer,
            "aud": self._audience,
            "jti": claims.token_id,
            "iat": int(claims.issued_at.timestamp()),
            "nbf": int(claims.not_before.timestamp()),
            "exp": int(claims.expires_at.timestamp()),
            "scope_hash": claims.scope_hash,
            "session_id": claims.session_id,
            "run_id": claims.run_id,
            "tool_call_id": claims.tool_call_id,
            "interrupt_id": claims.interrupt_id,
            "thread_id": claims.thread_id,
            "checkpoint_id": claims.checkpoint_id,
            "interaction": claims.interaction,
            "request_hash": claims.request_hash,
        }
        if claims.tool_name or claims.arguments_hash:
            payload["tool_name"] = claims.tool_name
            payload["arguments_hash"] = claims.arguments_hash
        if claims.pause_partition is not None:
            payload["pause_partition"] = claims.pause_partition
        if claims.pause_offset is not None:
            payload["pause_offset"] = claims.pause_offset
        return JWT.encode(
            payload,
            self._secret,
            algorithm=self._key.algorithm,
            headers={"kid": self._key.kid},
        )
