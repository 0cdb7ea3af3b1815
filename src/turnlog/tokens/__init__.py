"""Pause tokens: compact JWTs naming one pause, signed under a key id from a keyring.

- :mod:`~turnlog.tokens.key`: one key and its algorithm;
- :mod:`~turnlog.tokens.keyring`: the signing key and the verification keys (rotation);
- :mod:`~turnlog.tokens.keyfiles`: keys directories, generation, environment variables;
- :mod:`~turnlog.tokens.issuer` / :mod:`~turnlog.tokens.verifier`: sign and check;
- :mod:`~turnlog.tokens.peek`: the unverified read that may only route and look up.

The claims themselves are a pure value, :class:`turnlog.contracts.claims.PauseClaims`.
"""

from __future__ import annotations

from turnlog.contracts.claims import PauseClaims
from turnlog.tokens.issuer import TokenIssuer
from turnlog.tokens.key import MIN_HS256_SECRET_BYTES, Algorithm, TokenKey
from turnlog.tokens.keyfiles import (
    ENV_HS256_SECRET,
    ENV_SIGNING_KEY_PEM,
    ENV_SIGNING_KID,
    PRIVATE_SUFFIX,
    PUBLIC_SUFFIX,
    generate_ed25519,
    write_keypair,
)
from turnlog.tokens.keyring import Keyring
from turnlog.tokens.peek import peek_claims
from turnlog.tokens.verifier import TokenVerifier

__all__ = [
    "ENV_HS256_SECRET",
    "ENV_SIGNING_KEY_PEM",
    "ENV_SIGNING_KID",
    "MIN_HS256_SECRET_BYTES",
    "PRIVATE_SUFFIX",
    "PUBLIC_SUFFIX",
    "Algorithm",
    "Keyring",
    "PauseClaims",
    "TokenIssuer",
    "TokenKey",
    "TokenVerifier",
    "generate_ed25519",
    "peek_claims",
    "write_keypair",
]
