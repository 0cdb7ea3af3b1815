"""Check a turnlog notice's signature on the receiving side: the raw body, before parsing."""

import hashlib
import hmac
import time


def verify_turnlog_signature(
    secret: bytes, header: str, body: bytes, tolerance: float = 300
) -> bool:
    """True when ``header`` (the turnlog-signature value) signs ``body`` (the raw bytes).

    ``secret`` is the key's bytes: the secret's text exactly as the notifier was given it
    (TURNLOG_NOTIFY_SECRET, or a line of --secret-file without its surrounding whitespace),
    encoded as UTF-8 -- never decoded from hex or base64, whatever it looks like.
    """
    fields = [part.strip().partition("=") for part in header.split(",")]
    stamps = [value for name, _, value in fields if name == "t"]
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    if abs(time.time() - int(stamps[0])) > tolerance:
        return False  # too old (or from a clock far off): a replayed notice
    expected = hmac.new(secret, stamps[0].encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, value) for name, _, value in fields if name == "v1")
