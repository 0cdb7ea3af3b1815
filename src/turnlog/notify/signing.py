"""The signature a receiver checks before it trusts a notice.

``turnlog-signature: t=<unix seconds>,v1=<hex>``, where the hex is HMAC-SHA256 under the shared
secret of ``<t>.`` followed by the body's exact bytes. The timestamp is inside the MAC so a
captured notice cannot be replayed later with a fresh one; a receiver refuses a ``t`` too far
from its clock. Several ``v1=`` values may appear while a secret is rotated: one must match.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

SIGNATURE_HEADER: Final = "turnlog-signature"
#: The event id of the notice: the same on every attempt and after a restart, for deduping.
IDEMPOTENCY_HEADER: Final = "turnlog-idempotency-key"
#: How far a signature's timestamp may be from the receiver's clock, by default.
TOLERANCE_SECONDS: Final = 300


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``<timestamp>.<body>`` under ``secret``."""
    return hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secrets: tuple[bytes, ...], timestamp: int, body: bytes) -> str:
    """The header's value: the timestamp and one ``v1`` per secret (the first is current)."""
    macs = ",".join(f"v1={signature(s, timestamp, body)}" for s in secrets)
    return f"t={timestamp},{macs}"


def verify(
    secret: bytes,
    header: str,
    body: bytes,
    *,
    now: float,
    tolerance: float = TOLERANCE_SECONDS,
) -> bool:
    """Whether ``header`` signs ``body`` under ``secret`` at a time within ``tolerance`` of
    ``now`` (unix seconds): the check the documented recipe makes, for tests and receivers."""
    stamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            stamp = int(value)
        elif name == "v1":
            macs.append(value)
    if stamp is None or abs(now - stamp) > tolerance:
        return False
    expected = signature(secret, stamp, body)
    return any(hmac.compare_digest(expected, mac) for mac in macs)
