"""Reading a token's parts WITHOUT checking its signature: for routing and lookups only."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from turnlog.contracts.refusals import RefusalReason, refuse


@dataclass(frozen=True, slots=True)
class ParsedToken:
    """A compact JWT read once: its header and payload as JSON objects, and what its signature
    covers. Nothing in it is trusted until :meth:`TokenVerifier.verify_parsed` says so."""

    #: Read-only: a decoded header may be shared by every token that carries the same one.
    header: Mapping[str, Any]
    payload: dict[str, Any]
    signing_input: bytes
    signature: bytes


def parse_token(token: object) -> ParsedToken:
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
    return ParsedToken(_header(parts[0]), _part(parts[1], "payload"), signing_input, signature)


#: Decoded headers by their encoded text. A deployment signs with a few keys, so nearly every
#: token carries one of a few header strings: decoding it once saves a base64 and a JSON parse per
#: answer. Only headers that decoded are kept, as read-only views; the cache is emptied when full,
#: so a stream of distinct headers costs what it cost before and holds no more memory.
_HEADERS: dict[str, Mapping[str, Any]] = {}
_HEADERS_MAX = 64
_HEADER_CHARS_MAX = 1024


def _header(segment: str) -> Mapping[str, Any]:
    found = _HEADERS.get(segment)
    if found is None:
        found = MappingProxyType(_part(segment, "header"))
        if len(segment) <= _HEADER_CHARS_MAX:
            if len(_HEADERS) >= _HEADERS_MAX:
                _HEADERS.clear()
            _HEADERS[segment] = found
    return found


def peek_claims(token: object) -> dict[str, Any]:
    """The token's payload WITHOUT checking its signature, issuer, audience or window.

    Untrusted: only for choosing where a record goes (``thread_id`` as the partition key) or
    what to look up before verifying. Nothing read here may decide whether an answer is
    accepted; a forged value only sends a record to a worker that will then refuse it.
    """
    return unverified_part(token, 1)


def unverified_part(token: object, part: int) -> dict[str, Any]:
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
