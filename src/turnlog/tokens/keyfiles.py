"""Key files: a keys directory, key generation, and the environment variables a process reads.

* Directory (``Settings.keys_dir``): ``<kid>.private.pem`` is an Ed25519 private key (PKCS#8, no
  password) and also verifies; ``<kid>.public.pem`` is a verification-only public key.
* Environment: ``TURNLOG_SIGNING_KID`` names the signing key; ``TURNLOG_SIGNING_KEY_PEM`` holds an
  Ed25519 private key PEM, or ``TURNLOG_HS256_SECRET`` a shared secret (UTF-8, at least 32 bytes)
  -- never both. With a keys directory as well, the directory adds verification keys and
  ``TURNLOG_SIGNING_KID`` alone selects its signing key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from turnlog.errors import ConfigurationError
from turnlog.tokens.key import TokenKey, check_kid

#: Environment variables read by :meth:`turnlog.tokens.Keyring.from_env`.
ENV_SIGNING_KID: Final = "TURNLOG_SIGNING_KID"

ENV_SIGNING_KEY_PEM: Final = "TURNLOG_SIGNING_KEY_PEM"

ENV_HS256_SECRET: Final = "TURNLOG_HS256_SECRET"

PRIVATE_SUFFIX: Final = ".private.pem"

PUBLIC_SUFFIX: Final = ".public.pem"


def directory_keys(root: Path) -> tuple[list[TokenKey], list[str]]:
    """The keys of a keys directory, and the kids that have a private half."""
    if not root.is_dir():
        raise ConfigurationError(
            f"keys directory {root} does not exist: `turnlog keys new` writes a key pair there"
        )
    keys: list[TokenKey] = []
    private: list[str] = []
    for path in sorted(root.iterdir()):
        name = path.name
        if name.endswith(PRIVATE_SUFFIX):
            kid = name.removesuffix(PRIVATE_SUFFIX)
            keys.append(TokenKey.ed25519_private(kid, path.read_bytes()))
            private.append(kid)
        elif name.endswith(PUBLIC_SUFFIX):
            kid = name.removesuffix(PUBLIC_SUFFIX)
            keys.append(TokenKey.ed25519_public(kid, path.read_bytes()))
        elif name.endswith(".pem"):
            raise ConfigurationError(
                f"{name}: key files are named <kid>{PRIVATE_SUFFIX} or <kid>{PUBLIC_SUFFIX}"
            )
    if not keys:
        raise ConfigurationError(
            f"keys directory {root} holds no keys: `turnlog keys new` writes a key pair there"
        )
    return keys, private


def generate_ed25519(kid: str) -> tuple[bytes, bytes]:
    """A new key pair as ``(private_pem, public_pem)``; ``kid`` is checked now so that a key
    is never generated under a name that cannot be written or looked up."""
    check_kid(kid)
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, public_pem


def write_keypair(directory: Path | str, kid: str) -> tuple[Path, Path]:
    """Generate a pair and write it as ``<kid>.private.pem`` (owner-only) and ``<kid>.public.pem``.

    Existing files are never overwritten: replacing a key in place would orphan every live token
    it signed.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    private_pem, public_pem = generate_ed25519(kid)
    private_path = root / f"{kid}{PRIVATE_SUFFIX}"
    public_path = root / f"{kid}{PUBLIC_SUFFIX}"
    for path in (private_path, public_path):
        if path.exists():
            raise ConfigurationError(f"{path} already exists; a key id names one key forever")
    for path, data, mode in ((private_path, private_pem, 0o600), (public_path, public_pem, 0o644)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    return private_path, public_path
