"""The keyring: the signing key and the verification keys, by key id.

A :class:`Keyring` holds at most one signing key and any number of verification keys, so a
rotated-out key keeps verifying the pauses it signed until it is removed from the ring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from turnlog.errors import ConfigurationError
from turnlog.tokens.key import TokenKey
from turnlog.tokens.keyfiles import (
    ENV_HS256_SECRET,
    ENV_SIGNING_KEY_PEM,
    ENV_SIGNING_KID,
    directory_keys,
)


class Keyring:
    """The signing key and the verification keys, by ``kid``. Immutable: rotation builds a new
    ring (:meth:`with_key`, :meth:`without`) and swaps it in."""

    __slots__ = ("_keys", "_signing_kid")

    def __init__(self, keys: Iterable[TokenKey], *, signing_kid: str | None = None) -> None:
        table: dict[str, TokenKey] = {}
        for key in keys:
            previous = table.get(key.kid)
            if previous is not None and not previous.same_verifier(key):
                raise ConfigurationError(f"two different keys claim the key id {key.kid!r}")
            if previous is None or key.signing is not None:
                table[key.kid] = key
        if signing_kid is not None:
            chosen = table.get(signing_kid)
            if chosen is None or chosen.signing is None:
                raise ConfigurationError(
                    f"signing key {signing_kid!r} is not in the keyring with its private half"
                )
        self._keys: Mapping[str, TokenKey] = table
        self._signing_kid = signing_kid

    @property
    def signing_kid(self) -> str | None:
        return self._signing_kid

    @property
    def kids(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    def signing_key(self) -> TokenKey:
        if self._signing_kid is None:
            raise ConfigurationError("this keyring only verifies: it has no signing key")
        return self._keys[self._signing_kid]

    def verification_key(self, kid: str) -> TokenKey | None:
        return self._keys.get(kid)

    def with_key(self, key: TokenKey, *, sign: bool = False) -> Keyring:
        """A ring that also holds ``key``; with ``sign=True`` it becomes the signing key."""
        signing = key.kid if sign else self._signing_kid
        return Keyring([*self._keys.values(), key], signing_kid=signing)

    def without(self, kid: str) -> Keyring:
        """A ring without ``kid``: tokens it signed are refused from then on."""
        if kid == self._signing_kid:
            raise ConfigurationError(f"{kid!r} signs new tokens; choose another signing key first")
        return Keyring(
            [k for k in self._keys.values() if k.kid != kid], signing_kid=self._signing_kid
        )

    @classmethod
    def ed25519(cls, kid: str, private_pem: bytes | str) -> Keyring:
        return cls([TokenKey.ed25519_private(kid, private_pem)], signing_kid=kid)

    @classmethod
    def hs256(cls, kid: str, secret: bytes | str) -> Keyring:
        return cls([TokenKey.hs256(kid, secret)], signing_kid=kid)

    @classmethod
    def from_directory(cls, directory: Path | str, *, signing_kid: str | None = None) -> Keyring:
        """Every ``<kid>.private.pem`` and ``<kid>.public.pem`` in ``directory``.

        A ``.pem`` file with any other name is refused rather than skipped: a silently ignored
        key would surface only later, as live tokens refused for an unknown key.
        """
        root = Path(directory)
        keys, private = directory_keys(root)
        if signing_kid is None and len(private) > 1:
            raise ConfigurationError(
                f"keys directory {root} holds several private keys ({', '.join(private)}); "
                "name the signing one"
            )
        if signing_kid is None and private:
            signing_kid = private[0]
        return cls(keys, signing_kid=signing_kid)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, keys_dir: Path | None = None) -> Keyring:
        """The keyring a process is configured with (names: :mod:`turnlog.tokens.keyfiles`)."""
        kid = env.get(ENV_SIGNING_KID) or None
        pem = env.get(ENV_SIGNING_KEY_PEM) or None
        secret = env.get(ENV_HS256_SECRET) or None
        if pem and secret:
            raise ConfigurationError(
                f"set {ENV_SIGNING_KEY_PEM} or {ENV_HS256_SECRET}, not both: one signing key"
            )
        if (pem or secret) and kid is None:
            raise ConfigurationError(f"{ENV_SIGNING_KID} must name the signing key")
        own: TokenKey | None = None
        if kid is not None and pem:
            own = TokenKey.ed25519_private(kid, pem)
        elif kid is not None and secret:
            own = TokenKey.hs256(kid, secret)
        if keys_dir is None:
            if own is None:
                raise ConfigurationError(
                    "no token keys: `turnlog keys new` writes a key pair into the keys "
                    f"directory (TURNLOG_KEYS_DIR), or set {ENV_SIGNING_KEY_PEM} or "
                    f"{ENV_HS256_SECRET} with {ENV_SIGNING_KID}"
                )
            return cls([own], signing_kid=own.kid)
        if own is None:
            return cls.from_directory(keys_dir, signing_kid=kid)
        keys, _ = directory_keys(Path(keys_dir))
        return cls([*keys, own], signing_kid=own.kid)
