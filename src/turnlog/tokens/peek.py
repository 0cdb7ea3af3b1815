"""Reading a token's parts WITHOUT checking its signature: for routing and lookups only."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from turnlog.contracts.refusals import RefusalReason, refuse


@dataclass(frozen=True, slots=True)
class ParsedToken:
    """A compact JWT read once: its header and payload as JSON objects, and what its signature
    covers. Nothing in it is trusted until :meth:`TokenVerifier.verify_parsed` says so."""

    header: dict[str, Any]
    payload: dict[str, Any]
    signing_input: bytes
    signature: bytes


def parse_token(token: str) -> ParsedToken:
    """Split and decode a compact JWT, signature unchecked; ``Refused`` (``token_invalid``) for
    anything that is not one. The worker parses each answer's token once with this: the
    unverified token id picks the ledger row, and the same parse is then verified."""
    if not isinstance(token, str):
        raise refuse(RefusalReason.TOKEN_INVALID, "a token is text")
    parts = token.split(".")
    if len(parts) != 3:
        raise refuse(RefusalReason.TOKEN_INVALID, "a compact token has three dot-separated parts")
    try:
        signing_input = f"{parts[0]}.{parts[1]}".encode("ascii")
        signature = base64.b64decode(_padded(parts[2]), altchars=b"-_", validate=True)
    except (UnicodeEncodeError, ValueError, binascii.Error):
        raise refuse(RefusalReason.TOKEN_INVALID, "unreadable token signature") from None
    return ParsedToken(
        _part(parts[0], "header"), _part(parts[1], "payload"), signing_input, signature
    )


def peek_claims(token: str) -> dict[str, Any]:
    """The token's payload WITHOUT checking its signature, issuer, audience or window.

    Untrusted: only for choosing where a record goes (``thread_id`` as the partition key) or
    what to look up before verifying. Nothing read here may decide whether an answer is
    accepted; a forged value only sends a record to a worker that will then refuse it.
    """
    return unverified_part(token, 1)


def unverified_part(token: str, part: int) -> dict[str, Any]:
    """Part 0 (header) or 1 (payload) of a compact JWT as a JSON object, signature unchecked.

    Done by hand rather than through pyjwt: it runs on the hot paths (figures in
    ``bench/README.md``, optimisation log).
    """
    if not isinstance(token, str):
        raise refuse(RefusalReason.TOKEN_INVALID, "a token is text")
    parts = token.split(".")
    if len(parts) != 3:
        raise refuse(RefusalReason.TOKEN_INVALID, "a compact token has three dot-separated parts")
    return _part(parts[part], "header" if part == 0 else "payload")


def _padded(segment: str) -> str:
    return segment + "=" * (-len(segment) % 4)


def _part(segment: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(_padded(segment)))
    except (ValueError, binascii.Error, RecursionError) as exc:
        raise refuse(RefusalReason.TOKEN_INVALID, f"unreadable token {what}: {exc}") from None
    if not isinstance(value, dict):
        raise refuse(RefusalReason.TOKEN_INVALID, "a token header and payload are JSON objects")
    return value
