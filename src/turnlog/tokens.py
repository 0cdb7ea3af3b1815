"""Pause tokens: compact JWTs naming one pause, signed under a key id from a keyring.

A token is the only thing a person's answer carries that turnlog did not write itself, so
verification is strict: the key is chosen by the header's ``kid``, the algorithm is pinned to that
key's own (``none`` and an HMAC token verified with a public key are therefore impossible), every
claim is required, and the window is checked against a clock the caller passes in.

Keys, and where they come from
------------------------------
Ed25519 (JWT ``EdDSA``) is the default; HS256 exists for deployments that can only share one
secret. A :class:`Keyring` holds at most one signing key and any number of verification keys, so a
rotated-out key keeps verifying the pauses it signed until it is removed from the ring.

* Directory (``Settings.keys_dir``): ``<kid>.private.pem`` is an Ed25519 private key (PKCS#8, no
  password) and also verifies; ``<kid>.public.pem`` is a verification-only public key. The signing
  key is the one named by ``signing_kid``, or the only private key present.
* Environment: ``TURNLOG_SIGNING_KID`` names the signing key; ``TURNLOG_SIGNING_KEY_PEM`` holds an
  Ed25519 private key PEM, or ``TURNLOG_HS256_SECRET`` a shared secret (UTF-8, at least 32 bytes)
  -- never both. With a keys directory as well, the directory adds verification keys and
  ``TURNLOG_SIGNING_KID`` alone selects its signing key.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.refusals import RefusalReason, refuse
from turnlog.errors import ConfigurationError

Algorithm = Literal["EdDSA", "HS256"]

#: Environment variables read by :meth:`Keyring.from_env`.
ENV_SIGNING_KID: Final = "TURNLOG_SIGNING_KID"
ENV_SIGNING_KEY_PEM: Final = "TURNLOG_SIGNING_KEY_PEM"
ENV_HS256_SECRET: Final = "TURNLOG_HS256_SECRET"

#: The shortest HS256 secret accepted: the digest size, below which HMAC-SHA256 is weakened.
MIN_HS256_SECRET_BYTES: Final = 32

PRIVATE_SUFFIX: Final = ".private.pem"
PUBLIC_SUFFIX: Final = ".public.pem"

# A kid becomes a file name, so it is restricted to characters that are safe in one.
_KID = re.compile(r"[A-Za-z0-9_-]{1,64}")

_STRING_CLAIMS: Final = (
    "jti",
    "scope_hash",
    "session_id",
    "run_id",
    "tool_call_id",
    "interrupt_id",
    "thread_id",
    "checkpoint_id",
    "interaction",
    "request_hash",
)
_TIME_CLAIMS: Final = ("iat", "nbf", "exp")
_REQUIRED: Final = ["iss", "aud", *_TIME_CLAIMS, *_STRING_CLAIMS]

# One instance with short HMAC keys refused outright: pyjwt otherwise only warns about them.
_JWT = jwt.PyJWT(options={"enforce_minimum_key_length": True})


def _check_kid(kid: str) -> str:
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise ConfigurationError(
            f"a key id must be 1-64 letters, digits, '_' or '-', got {kid!r}; it names key files"
        )
    return kid


def _utc_second(value: datetime, name: str) -> datetime:
    """``value`` in UTC at whole seconds: a JWT NumericDate has no finer grain, so a claim
    value that kept microseconds would not survive its own round trip."""
    if value.tzinfo is None:
        raise ValueError(f"{name} must be timezone-aware (UTC)")
    return value.astimezone(UTC).replace(microsecond=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseClaims:
    """What a pause token says: its window and the identity of the pause it may resume.

    ``pause_partition``/``pause_offset`` locate the ``PauseRecorded`` record, so the worker that
    owns the partition can catch up to at least that offset before it calls a pause missing;
    they are optional because a token can be issued before that offset is known.
    """

    token_id: str
    scope_hash: str
    session_id: str
    run_id: str
    tool_call_id: str
    interrupt_id: str
    thread_id: str
    checkpoint_id: str
    name: str
    request_hash: str
    issued_at: datetime
    not_before: datetime
    expires_at: datetime
    pause_partition: int | None = None
    pause_offset: int | None = None

    def __post_init__(self) -> None:
        for attr in ("issued_at", "not_before", "expires_at"):
            object.__setattr__(self, attr, _utc_second(getattr(self, attr), attr))
        if self.expires_at <= self.not_before:
            raise ValueError("a pause token's window must close after it opens")
        if not self.token_id or not self.thread_id or not self.checkpoint_id:
            raise ValueError("token_id, thread_id and checkpoint_id must not be empty")
        if not (self.tool_call_id or self.interrupt_id):
            raise ValueError("a pause must name the call it stopped: tool_call_id or interrupt_id")
        for attr in ("pause_partition", "pause_offset"):
            value = getattr(self, attr)
            if value is not None and (isinstance(value, bool) or value < 0):
                raise ValueError(f"{attr} must be a non-negative int or None")

    @property
    def answered_call_id(self) -> str:
        """The call the answer stands in for: the tool call, or the interrupt when there is none."""
        return self.tool_call_id or self.interrupt_id

    @classmethod
    def for_pause(
        cls,
        pause: PauseRecorded,
        *,
        issued_at: datetime | None = None,
        pause_partition: int | None = None,
        pause_offset: int | None = None,
    ) -> PauseClaims:
        """The claims of the token handed out for ``pause``; its window runs from ``issued_at``
        (default: when the pause happened) to the pause's own ``expires_at``."""
        start = pause.occurred_at if issued_at is None else issued_at
        cp = pause.checkpoint
        return cls(
            token_id=pause.token_id,
            scope_hash=cp.scope_hash,
            session_id=cp.session_id,
            run_id=cp.run_id,
            tool_call_id=cp.tool_call_id,
            interrupt_id=cp.interrupt_id,
            thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id,
            name=pause.response_schema,
            request_hash=pause.request_hash,
            issued_at=start,
            not_before=start,
            expires_at=pause.expires_at,
            pause_partition=pause_partition,
            pause_offset=pause_offset,
        )


@dataclass(frozen=True, slots=True)
class TokenKey:
    """One key of a keyring. ``signing`` is absent for a verification-only key."""

    kid: str
    algorithm: Algorithm
    verifying: Ed25519PublicKey | bytes = field(repr=False)
    signing: Ed25519PrivateKey | bytes | None = field(default=None, repr=False)

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
        return cls(_check_kid(kid), "EdDSA", key.public_key(), key)

    @classmethod
    def ed25519_public(cls, kid: str, public_pem: bytes | str) -> TokenKey:
        data = public_pem.encode() if isinstance(public_pem, str) else public_pem
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"key {kid!r}: not a readable public key PEM: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigurationError(f"key {kid!r}: expected an Ed25519 public key")
        return cls(_check_kid(kid), "EdDSA", key)

    @classmethod
    def hs256(cls, kid: str, secret: bytes | str) -> TokenKey:
        data = secret.encode() if isinstance(secret, str) else secret
        if len(data) < MIN_HS256_SECRET_BYTES:
            raise ConfigurationError(
                f"key {kid!r}: an HS256 secret needs at least {MIN_HS256_SECRET_BYTES} bytes"
            )
        return cls(_check_kid(kid), "HS256", data, data)

    def same_verifier(self, other: TokenKey) -> bool:
        """Whether two entries verify the same tokens (used to refuse one kid with two keys)."""
        if self.algorithm != other.algorithm:
            return False
        return _raw(self.verifying) == _raw(other.verifying)


def _raw(key: Ed25519PublicKey | bytes) -> bytes:
    if isinstance(key, bytes):
        return key
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


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
        keys, private = _directory_keys(root)
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
        """The keyring a process is configured with (see the module docstring for the names)."""
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
                    f"no token keys: set {ENV_SIGNING_KEY_PEM} or {ENV_HS256_SECRET} with "
                    f"{ENV_SIGNING_KID}, or a keys directory"
                )
            return cls([own], signing_kid=own.kid)
        if own is None:
            return cls.from_directory(keys_dir, signing_kid=kid)
        keys, _ = _directory_keys(Path(keys_dir))
        return cls([*keys, own], signing_kid=own.kid)


def _directory_keys(root: Path) -> tuple[list[TokenKey], list[str]]:
    """The keys of a keys directory, and the kids that have a private half."""
    if not root.is_dir():
        raise ConfigurationError(f"keys directory {root} does not exist")
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
        raise ConfigurationError(f"keys directory {root} holds no keys")
    return keys, private


def generate_ed25519(kid: str) -> tuple[bytes, bytes]:
    """A new key pair as ``(private_pem, public_pem)``; ``kid`` is checked now so that a key
    is never generated under a name that cannot be written or looked up."""
    _check_kid(kid)
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
            "interaction": claims.name,
            "request_hash": claims.request_hash,
        }
        if claims.pause_partition is not None:
            payload["pause_partition"] = claims.pause_partition
        if claims.pause_offset is not None:
            payload["pause_offset"] = claims.pause_offset
        return _JWT.encode(
            payload,
            self._secret,
            algorithm=self._key.algorithm,
            headers={"kid": self._key.kid},
        )


class TokenVerifier:
    """Checks a token against the keyring and a clock the caller owns.

    pyjwt would check ``exp``/``nbf``/``iat`` against the machine clock; that is switched off and
    the window checked here against ``now``, so a replayed log and a test decide the same way.
    """

    __slots__ = ("_audience", "_issuer", "_keyring", "_leeway")

    def __init__(
        self,
        keyring: Keyring,
        *,
        issuer: str,
        audience: str,
        leeway: timedelta = timedelta(seconds=5),
    ) -> None:
        if leeway < timedelta(0):
            raise ConfigurationError("token leeway cannot be negative")
        self._keyring = keyring
        self._issuer = issuer
        self._audience = audience
        self._leeway = leeway

    def verify(self, token: str, now: datetime) -> PauseClaims:
        """The token's claims, or :class:`~turnlog.contracts.refusals.Refused` naming the rule."""
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware (UTC)")
        if not isinstance(token, str):
            raise refuse(RefusalReason.TOKEN_INVALID, "a token is text")
        header = _unverified(token, 0)
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise refuse(RefusalReason.TOKEN_INVALID, "the token header names no key id")
        key = self._keyring.verification_key(kid)
        if key is None:
            raise refuse(RefusalReason.TOKEN_UNKNOWN_KEY, f"no key {kid!r} in the keyring")
        if header.get("alg") != key.algorithm:
            raise refuse(
                RefusalReason.TOKEN_INVALID,
                f"algorithm {header.get('alg')!r} is not key {kid!r}'s own ({key.algorithm})",
            )
        try:
            payload = _JWT.decode(
                token,
                key.verifying,
                algorithms=[key.algorithm],
                issuer=self._issuer,
                audience=self._audience,
                options={
                    "require": list(_REQUIRED),
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "strict_aud": True,
                    "enforce_minimum_key_length": True,
                },
            )
        except jwt.InvalidIssuerError:
            raise refuse(RefusalReason.TOKEN_WRONG_ISSUER, "issued by someone else") from None
        except jwt.InvalidAudienceError:
            raise refuse(RefusalReason.TOKEN_WRONG_AUDIENCE, "issued for someone else") from None
        except jwt.PyJWTError as exc:  # InvalidTokenError and InvalidKeyError alike
            raise refuse(RefusalReason.TOKEN_INVALID, str(exc) or type(exc).__name__) from None
        except RecursionError:  # JSON nested deeper than the parser goes: never a real token
            raise refuse(RefusalReason.TOKEN_INVALID, "the token nests too deep") from None
        claims = _claims(payload)
        moment = now.astimezone(UTC)
        if moment + self._leeway < claims.not_before or moment + self._leeway < claims.issued_at:
            raise refuse(
                RefusalReason.TOKEN_NOT_YET_VALID,
                f"valid from {claims.not_before.isoformat()}, now {moment.isoformat()}",
            )
        if moment - self._leeway >= claims.expires_at:
            raise refuse(
                RefusalReason.TOKEN_EXPIRED,
                f"expired at {claims.expires_at.isoformat()}, now {moment.isoformat()}",
            )
        return claims


def _numeric_date(payload: Mapping[str, Any], name: str) -> datetime:
    value = payload[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise refuse(RefusalReason.TOKEN_INVALID, f"claim {name} is not a NumericDate")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        raise refuse(RefusalReason.TOKEN_INVALID, f"claim {name} is out of range") from None


def _claims(payload: Mapping[str, Any]) -> PauseClaims:
    """Typed claims from a verified payload; a wrong type is refused, never coerced."""
    for name in _STRING_CLAIMS:
        value = payload[name]
        if not isinstance(value, str):
            raise refuse(RefusalReason.TOKEN_INVALID, f"claim {name} is not text")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: legal in JSON, not writable as UTF-8
            raise refuse(RefusalReason.TOKEN_INVALID, f"claim {name} is not Unicode text") from None
    located: dict[str, int | None] = {}
    for name in ("pause_partition", "pause_offset"):
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise refuse(RefusalReason.TOKEN_INVALID, f"claim {name} is not an integer")
        located[name] = value
    try:
        return PauseClaims(
            token_id=payload["jti"],
            scope_hash=payload["scope_hash"],
            session_id=payload["session_id"],
            run_id=payload["run_id"],
            tool_call_id=payload["tool_call_id"],
            interrupt_id=payload["interrupt_id"],
            thread_id=payload["thread_id"],
            checkpoint_id=payload["checkpoint_id"],
            name=payload["interaction"],
            request_hash=payload["request_hash"],
            issued_at=_numeric_date(payload, "iat"),
            not_before=_numeric_date(payload, "nbf"),
            expires_at=_numeric_date(payload, "exp"),
            pause_partition=located["pause_partition"],
            pause_offset=located["pause_offset"],
        )
    except ValueError as exc:
        raise refuse(RefusalReason.TOKEN_INVALID, str(exc)) from None


def peek_claims(token: str) -> dict[str, Any]:
    """The token's payload WITHOUT checking its signature, issuer, audience or window.

    Untrusted: only for choosing where a record goes (``thread_id`` as the partition key) or
    what to look up before verifying. Nothing read here may decide whether an answer is
    accepted; a forged value only sends a record to a worker that will then refuse it.
    """
    return _unverified(token, 1)


def _unverified(token: str, part: int) -> dict[str, Any]:
    """Part 0 (header) or 1 (payload) of a compact JWT as a JSON object, signature unchecked.

    Done by hand rather than through pyjwt: it runs for every answer on the worker's hot path
    (bench/: 35 -> 8 us), and the signature is still checked by pyjwt in :meth:`verify`.
    """
    if not isinstance(token, str):
        raise refuse(RefusalReason.TOKEN_INVALID, "a token is text")
    parts = token.split(".")
    if len(parts) != 3:
        raise refuse(RefusalReason.TOKEN_INVALID, "a compact token has three dot-separated parts")
    segment = parts[part]
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        value = json.loads(raw)
    except (ValueError, binascii.Error, RecursionError) as exc:
        what = "header" if part == 0 else "payload"
        raise refuse(RefusalReason.TOKEN_INVALID, f"unreadable token {what}: {exc}") from None
    if not isinstance(value, dict):
        raise refuse(RefusalReason.TOKEN_INVALID, "a token header and payload are JSON objects")
    return value
