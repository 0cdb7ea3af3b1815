"""Verifying a token: strict, because it is the one thing an answer carries that turnlog did not
write itself. The key is chosen by the header's ``kid``, the algorithm is pinned to that key's
own, every claim is required and typed, and the window is checked against a clock the caller
passes in. Every failure is a refusal with the rule's name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from turnlog.contracts.claims import PauseClaims
from turnlog.contracts.refusals import RefusalReason, refuse
from turnlog.errors import ConfigurationError
from turnlog.tokens.keyring import Keyring
from turnlog.tokens.peek import ParsedToken, parse_token

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

    @property
    def leeway(self) -> timedelta:
        """The clock skew this verifier allows past ``exp``: until then a ledger row is kept."""
        return self._leeway

    def verify(self, token: object, now: datetime) -> PauseClaims:
        """The token's claims, or :class:`~turnlog.contracts.refusals.Refused` naming the rule."""
        return self.verify_parsed(parse_token(token), now)

    def verify_parsed(self, token: ParsedToken, now: datetime) -> PauseClaims:
        """:meth:`verify` of a token already parsed (the worker parses each token once).

        The signature is checked here with the key object itself rather than through pyjwt:
        pyjwt would parse the token again and re-check options on every call, which doubled
        the cost of a resume (bench/README.md). The rules are pyjwt's, and stricter: the key
        comes from the header's ``kid``, the algorithm is pinned to that key's own, every
        claim is required, ``iss`` and ``aud`` must be exactly this deployment's.
        """
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware (UTC)")
        header = token.header
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise refuse(RefusalReason.TOKEN_INVALID, "the token header names no key id")
        key = self._keyring.verification_key(kid)
        if key is None:
            raise refuse(RefusalReason.TOKEN_UNKNOWN_KEY, f"no key {kid[:100]!r} in the keyring")
        if header.get("alg") != key.algorithm:
            raise refuse(
                RefusalReason.TOKEN_INVALID,
                f"algorithm {str(header.get('alg'))[:40]!r} is not key {kid!r}'s own "
                f"({key.algorithm})",
            )
        if not key.check(token.signature, token.signing_input):
            raise refuse(RefusalReason.TOKEN_INVALID, "Signature verification failed")
        payload = token.payload
        for name in _REQUIRED:
            if name not in payload:
                raise refuse(RefusalReason.TOKEN_INVALID, f'Token is missing the "{name}" claim')
        if payload["iss"] != self._issuer:
            raise refuse(RefusalReason.TOKEN_WRONG_ISSUER, "issued by someone else")
        if payload["aud"] != self._audience:
            raise refuse(RefusalReason.TOKEN_WRONG_AUDIENCE, "issued for someone else")
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
    bound: dict[str, str] = {}
    for name in ("tool_name", "arguments_hash"):  # an approval's call, only on approvals
        value = payload.get(name, "")
        if not isinstance(value, str):
            raise refuse(RefusalReason.TOKEN_INVALID, f"claim {name} is not text")
        bound[name] = value
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
            interaction=payload["interaction"],
            request_hash=payload["request_hash"],
            issued_at=_numeric_date(payload, "iat"),
            not_before=_numeric_date(payload, "nbf"),
            expires_at=_numeric_date(payload, "exp"),
            pause_partition=located["pause_partition"],
            pause_offset=located["pause_offset"],
            tool_name=bound["tool_name"],
            arguments_hash=bound["arguments_hash"],
        )
    except ValueError as exc:
        raise refuse(RefusalReason.TOKEN_INVALID, str(exc)) from None
