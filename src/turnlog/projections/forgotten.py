"""A forgotten thread, as a store remembers it: a marker that outlives the thread, for a while.

``turnlog forget`` tombstones a thread's keys, and a store applying the pauses tombstones drops
the thread at once. Without more, an answer to one of its tokens would be refused as if its pause
had never been recorded (``no_recorded_turn_state``), and a ``show`` would say "unknown", when
the truth is "forgotten" -- and the worker must know it to refuse the answer by that name and
tombstone the answer's record. So applying a thread's pauses tombstone also writes a marker:

- keyed by a hash of the thread id (the store keeps no id of the thread beyond its tombstones'
  day), in the store's metadata family: never user data, never part of the digest, since a
  store rebuilt once the tombstones were compacted away cannot know it;
- bounded: kept until a day (:data:`KEEP_MS`, the broker's default ``delete.retention.ms``, the
  time a rebuilt store can learn of the forget at all) after the later of the forget and the end
  of its pauses' windows -- past that the thread's tokens have expired and an answer to one is
  refused by its token (``token_expired``). Each new marker drops the markers past their bound,
  so the markers are those of one window's forgets at most;
- a thread paused again after it was forgotten is not forgotten any more: a marker counts only
  while the thread has no checkpoint in the store.
"""

from __future__ import annotations

import hashlib

__all__ = ["KEEP_MS", "PREFIX", "alive", "marker_key", "marker_range", "until"]

#: How long past the later of the forget and its pauses' deadlines a marker is kept.
KEEP_MS = 24 * 3600 * 1000
#: The metadata keys of the markers: ``forgotten NUL sha256(thread_id)[:16]`` -> be64(until_ms).
PREFIX = b"forgotten\x00"


def marker_key(thread_id: str) -> bytes:
    digest = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).digest()
    return PREFIX + digest[:16]


def marker_range() -> tuple[bytes, bytes]:
    """Every marker's key is in ``[low, high)``."""
    return PREFIX, PREFIX[:-1] + b"\x01"


def until(forgotten_at_ms: int, latest_deadline_ms: int | None, previous: bytes | None) -> int:
    """The bound of a thread's marker: :data:`KEEP_MS` past the later of the forget and the
    thread's latest pause deadline, never shorter than a marker it replaces."""
    bound = max(forgotten_at_ms, latest_deadline_ms or 0) + KEEP_MS
    if previous is not None:
        bound = max(bound, int.from_bytes(previous, "big"))
    return bound


def alive(raw: bytes | None, now_ms: int) -> bool:
    """Whether a stored marker still counts at ``now_ms``."""
    return raw is not None and int.from_bytes(raw, "big") > now_ms
