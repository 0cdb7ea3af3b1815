"""One token key: its id, its algorithm and its halves; and the JWT codec every key is used with.

Ed25519 (JWT ``EdDSA``) is the default; HS256 exists for deployments that can only share one
secret. The algorithm belongs to the key, never to the token, so a token cannot choose how it is
checked (``none`` and an HMAC token verified with a public key are therefore impossible).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from typing import Final, Literal

import jwt
import nacl.exceptions
import nacl.signing
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from turnlog.errors import ConfigurationError

Algorithm = Literal["EdDSA", "HS256"]


#: The shortest HS256 secret accepted: the digest size, below which HMAC-SHA256 is weakened.
MIN_HS256_SECRET_BYTES: Final = 32


# A kid becomes a file name, so it is restricted to characters that are safe in one.
_KID = re.compile(r"[A-Za-z0-9_-]{1,64}")


# One instance with short HMAC keys refused outright: pyjwt otherwise only warns about them.
JWT = jwt.PyJWT(options={"enforce_minimum_key_length": True})


def check_kid(kid: str) -> str:
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise ConfigurationError(
            f"a key id must be 1-64 letters, digits, '_' or '-', got {kid!r}; it names key files"
        )
    return kid


@dataclass(frozen=True, slots=True)
class TokenKey:
    """One key of a keyring. ``signing`` is absent for a verification-only key."""

    kid: str
    algorithm: Algorithm
    verifying: Ed25519PublicKey | bytes = field(repr=False)
    signing: Ed25519PrivateKey | bytes | None = field(default=None, repr=False)
    #: The Ed25519 public key as libsodium's verifier (``None`` for HS256): see :meth:`check`.
    _sodium: nacl.signing.VerifyKey | None = field(
        init=False, default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if isinstance(self.verifying, Ed25519PublicKey):
            object.__setattr__(self, "_sodium", nacl.signing.VerifyKey(_raw(self.verifying)))

    def check(self, signature: bytes, signing_input: bytes) -> bool:
        """Whether ``signature`` is this key's over ``signing_input``.

        Ed25519 goes through libsodium (PyNaCl), not ``cryptography``: on the machines the
        benchmarks run on, one check costs about half as much (63 vs 121 µs), and it is the
        costliest step of a resume. libsodium is the stricter of the two (it also refuses
        non-canonical and small-order points); ``tests/unit/test_tokens.py`` holds the two to the
        same verdict on real signatures and on tampered ones. HS256 compares its HMAC in
        constant time. Both release the GIL, so checks on several threads run side by side.
        """
        if isinstance(self.verifying, bytes):
            expected = hmac.new(self.verifying, signing_input, hashlib.sha256).digest()
            return hmac.compare_digest(expected, signature)
        if self._sodium is None or len(signature) != 64:
            return False
        try:
            self._sodium.verify(signing_input, signature)
        except nacl.exceptions.BadSignatureError:
            return False
        return True

    @classmethod
    def ed25519_private(cls, kid: str, private_pem: bytes | str) -> TokenKey:
        data = private_pem.encode() if isinstance(private_pem, str) else private_pem
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"key {kid!r}: not a readable private key PEM: {exc}"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError(f"key {kid!r}: expected an Ed25519 private key")
        return cls(check_kid(kid), "EdDSA", key.public_key(), key)

    @classmethod
    def ed25519_public(cls, kid: str, public_pem: bytes | str) -> TokenKey:
        data = public_pem.encode() if isinstance(public_pem, str) else public_pem
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"key {kid!r}: not a readable public key PEM: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigurationError(f"key {kid!r}: expected an Ed25519 public key")
        return cls(check_kid(kid), "EdDSA", key)

    @classmethod
    def hs256(cls, kid: str, secret: bytes | str) -> TokenKey:
        data = secret.encode() if isinstance(secret, str) else secret
        if len(data) < MIN_HS256_SECRET_BYTES:
            raise ConfigurationError(
                f"key {kid!r}: an HS256 secret needs at least {MIN_HS256_SECRET_BYTES} bytes"
            )
        return cls(check_kid(kid), "HS256", data, data)

    def same_verifier(self, other: TokenKey) -> bool:
        """Whether two entries verify the same tokens (used to refuse one kid with two keys)."""
        if self.algorithm != other.algorithm:
            return False
        return _raw(self.verifying) == _raw(other.verifying)


def _raw(key: Ed25519PublicKey | bytes) -> bytes:
    if isinstance(key, bytes):
        return key
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
