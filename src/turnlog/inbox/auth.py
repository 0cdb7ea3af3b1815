"""Who is looking at the inbox, what they may answer, and that a POST came from the inbox's page.

A viewer is identified by a credential -- a bearer token, or the same token kept in an HttpOnly
session cookie after logging in -- that a verifier hook turns into a :class:`Viewer`: a name and
the tenant scopes (``scope_hash`` values, ``*`` for every scope) whose pauses they may see and
answer. The default hook accepts viewer JWTs signed by a key of the viewer keyring, for this
inbox's issuer and audience (:class:`ViewerTokens`, minted by ``turnlog inbox token``). A
deployment with its own login passes its own hook.

The four axes of an answer never come from the viewer: they are the pause's own. The viewer only
decides *whether* a pause is shown and may be answered.

CSRF: every form carries a token that is an HMAC, under a secret of the running inbox, of the
session it was rendered for (the credential, or a random pre-login cookie). A cross-site POST
cannot read it, and a token taken from one session is worthless in another.

Signing out is kept on the server too (:class:`SignOuts`): a credential signed out is nobody's
until someone signs in with it again, so the live streams and other tabs it opened end with it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import jwt

from turnlog.errors import ConfigurationError
from turnlog.tokens import Keyring, write_keypair
from turnlog.tokens.key import JWT

#: The scope value that grants every scope (an operator's view).
ALL_SCOPES: Final = "*"

DEFAULT_VIEWER_ISSUER: Final = "turnlog-inbox"

DEFAULT_VIEWER_AUDIENCE: Final = "turnlog-inbox"

#: The kid ``turnlog inbox token`` gives the viewer key it creates when there is none.
DEFAULT_VIEWER_KID: Final = "viewer-1"


@dataclass(frozen=True, slots=True)
class Viewer:
    """A person at the inbox: ``name`` (shown, and on no answer) and the scopes they may answer.

    Who they are is :attr:`identity` -- the credential's ``issuer`` and ``subject`` (the name
    when the hook gives none) and the scopes -- never the name alone: two issuers, or two
    tokens of one issuer for two tenants, may both say ``alice``. ``expires_at`` is when the
    credential stops being valid (``None``: the hook does not say), so a live stream ends then.
    """

    name: str
    scopes: frozenset[str]
    issuer: str = ""
    subject: str = ""
    expires_at: datetime | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.subject:
            object.__setattr__(self, "subject", self.name)

    @property
    def identity(self) -> tuple[str, str, tuple[str, ...]]:
        """``(issuer, subject, scopes)``: what an answer sent by this viewer is bound to."""
        return (self.issuer, self.subject, tuple(sorted(self.scopes)))

    def may_answer(self, scope_hash: str) -> bool:
        return ALL_SCOPES in self.scopes or scope_hash in self.scopes


#: The hook: a credential in, the viewer it identifies out (``None``: not a valid credential).
ViewerVerifier = Callable[[str], "Viewer | None"]


class ViewerTokens:
    """Viewer JWTs: signed with the keyring's signing key, verified by any of its keys.

    Claims: ``iss``, ``aud``, ``sub`` (the viewer's name), ``scopes`` (a list of scope values),
    ``iat``, ``exp``, ``jti``. The algorithm is pinned to the key the header's ``kid`` names, as
    for pause tokens; ``none`` and algorithm confusion are impossible.
    """

    def __init__(
        self,
        keyring: Keyring,
        *,
        issuer: str = DEFAULT_VIEWER_ISSUER,
        audience: str = DEFAULT_VIEWER_AUDIENCE,
    ) -> None:
        self.keyring = keyring
        self.issuer = issuer
        self.audience = audience

    def mint(self, name: str, scopes: Iterable[str], *, ttl: timedelta, now: datetime) -> str:
        """A token for ``name`` answering ``scopes``, valid for ``ttl`` from ``now``."""
        wanted = sorted({s for s in scopes if s})
        if not name.strip():
            raise ConfigurationError("a viewer token needs a name")
        if not wanted:
            raise ConfigurationError("a viewer token needs at least one scope ('*' for all)")
        if ttl <= timedelta(0):
            raise ConfigurationError("a viewer token's lifetime must be positive")
        key = self.keyring.signing_key()
        if key.signing is None:  # the keyring guarantees it; kept for the type checker
            raise ConfigurationError(f"viewer key {key.kid!r} cannot sign")
        payload: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": name,
            "scopes": wanted,
            "iat": int(now.timestamp()),
            "exp": int((now + ttl).timestamp()),
            "jti": uuid.uuid4().hex,
        }
        return JWT.encode(payload, key.signing, algorithm=key.algorithm, headers={"kid": key.kid})

    def verify(self, credential: str) -> Viewer | None:
        """The viewer of a valid token; ``None`` for anything else (never an exception: a bad
        cookie is a logged-out visitor, not a server error)."""
        try:
            header = jwt.get_unverified_header(credential)
        except jwt.InvalidTokenError:
            return None
        kid = header.get("kid")
        key = self.keyring.verification_key(kid) if isinstance(kid, str) else None
        if key is None or header.get("alg") != key.algorithm:
            return None
        try:
            payload = JWT.decode(
                credential,
                key.verifying,
                algorithms=[key.algorithm],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["iss", "aud", "sub", "exp", "iat", "scopes"]},
            )
        except (jwt.InvalidTokenError, jwt.InvalidKeyError, ValueError, TypeError):
            return None
        name, scopes = payload.get("sub"), payload.get("scopes")
        if not isinstance(name, str) or not name or not isinstance(scopes, list):
            return None
        if not all(isinstance(s, str) and s for s in scopes) or not scopes:
            return None
        expires = datetime.fromtimestamp(int(payload["exp"]), UTC)
        return Viewer(name, frozenset(scopes), self.issuer, name, expires)

    __call__ = verify


def viewer_keyring(directory: Path, *, create: bool = False) -> Keyring:
    """The viewer keyring of ``directory`` (``<kid>.private.pem`` signs, every key verifies).

    With ``create``, a directory without keys gets a new Ed25519 key first (what ``turnlog inbox
    token`` does on a fresh machine); otherwise a missing key is a :class:`ConfigurationError`.
    """
    has_keys = directory.is_dir() and any(directory.glob("*.pem"))
    if not has_keys:
        if not create:
            raise ConfigurationError(
                f"no viewer keys in {directory}: `turnlog inbox token` creates one"
            )
        write_keypair(directory, DEFAULT_VIEWER_KID)
    return Keyring.from_directory(directory)


class Csrf:
    """Double-submit tokens bound to a session: ``HMAC(secret, session)``, compared in constant
    time. The secret lives only in the running inbox (a restart invalidates open forms)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def token(self, session: str) -> str:
        digest = hmac.new(self._secret, b"csrf\x00" + session.encode(), hashlib.sha256)
        return digest.hexdigest()

    def check(self, session: str, given: str | None) -> bool:
        if not session or not given:
            return False
        return hmac.compare_digest(self.token(session), given)


#: How long a sign-out is remembered when the viewer's credential does not say when it expires.
SIGN_OUT_KEPT = timedelta(hours=24)

#: The most sign-outs remembered; past it the soonest to expire are forgotten first.
SIGN_OUTS_KEPT = 100_000


class SignOuts:
    """The credentials signed out of this inbox, until they expire (by a digest: the inbox keeps
    no credential). Signing in with one again takes it off the list: a person who signs out and
    back in with the same link is let in, while every tab and stream of the session they left
    ends. Kept in memory: a restarted inbox forgets them, as it forgets its CSRF secret."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock
        self._until: dict[str, datetime] = {}

    @staticmethod
    def _key(credential: str) -> str:
        return hashlib.sha256(credential.encode()).hexdigest()

    def sign_out(self, credential: str, viewer: Viewer | None) -> None:
        now = self._clock()
        until = viewer.expires_at if viewer and viewer.expires_at else now + SIGN_OUT_KEPT
        self._until = {k: t for k, t in self._until.items() if t > now}
        if len(self._until) >= SIGN_OUTS_KEPT:
            for key in sorted(self._until, key=self._until.__getitem__)[: len(self._until) // 10]:
                del self._until[key]
        self._until[self._key(credential)] = until

    def sign_in(self, credential: str) -> None:
        self._until.pop(self._key(credential), None)

    def __contains__(self, credential: object) -> bool:
        if not isinstance(credential, str):
            return False
        until = self._until.get(self._key(credential))
        return until is not None and until > self._clock()
