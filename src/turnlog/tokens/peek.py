"""Reading a token's parts WITHOUT checking its signature: for routing and lookups only."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from turnlog.contracts.refusals import RefusalReason, refuse


def peek_claims(token: str) -> dict[str, Any]:
    """The token's payload WITHOUT checking its signature, issuer, audience or window.

    Untrusted: only for choosing where a record goes (``thread_id`` as the partition key) or
    what to look up before verifying. Nothing read here may decide whether an answer is
    accepted; a forged value only sends a record to a worker that will then refuse it.
    """
    return unverified_part(token, 1)


def unverified_part(token: str, part: int) -> dict[str, Any]:
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
