"""The first look at an answer record, and what of it a rejection may echo.

Kept apart from :mod:`turnlog.consumers.handler` so the rules read on their own: an answer is
handled only on the partition its thread maps to, with its key and value naming the same thread
and answer (``misrouted`` otherwise), and every field echoed into a rejection is clipped and made
writable, because a record from outside is attacker-sized and may hold lone surrogates.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from turnlog._version import __version__
from turnlog.contracts.events import AnswerRejected, AnswerSubmitted
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.kafka.partitioning import SEPARATOR, answer_key, partition_for
from turnlog.kafka.reader import Record
from turnlog.tokens import peek_claims

#: Longest identifier (answer, token, thread id) echoed into a rejection, in characters.
ID_CHARS = 256
#: Longest detail written into a rejection, in characters.
DETAIL_CHARS = 1000
#: Longest unverified token id looked up in the ledger; a real one is 32 hex digits.
_TOKEN_ID_CHARS = 256


def clip(text: str | None, limit: int) -> str:
    """``text`` made safe to encode and at most about ``limit`` characters long.

    Fields echoed from a record are attacker-sized and may hold lone surrogates (legal in JSON,
    not in UTF-8); written back unbounded they would make the rejection itself unwritable.
    """
    if text is None:
        return ""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(safe) <= limit:
        return safe
    return f"{safe[:limit]}... ({len(safe)} characters)"


def misrouted(record: Record, answer: AnswerSubmitted, partitions: int) -> Refusal | None:
    if not answer.thread_id:
        # Names no thread, so it can never spend a token (a verified token names one: step
        # 2 refuses the difference); publishers park such answers under a placeholder key.
        return None
    try:
        expected_key = answer_key(answer.thread_id, answer.answer_id)
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        return Refusal(RefusalReason.MISROUTED, f"the answer cannot be keyed: {exc}")
    if record.key != expected_key:
        return Refusal(
            RefusalReason.MISROUTED,
            "the record's key must be the value's 'thread_id NUL answer_id', got "
            f"{clip(repr(record.key), 200)}",
        )
    expected = partition_for(answer.thread_id, partitions)
    if expected != record.partition:
        return Refusal(
            RefusalReason.MISROUTED,
            f"thread {clip(answer.thread_id, ID_CHARS)!r} maps to partition {expected} of "
            f"{partitions}, the answer is on partition {record.partition}: "
            "(murmur2(utf8(thread_id)) & 0x7fffffff) % partitions",
        )
    return None


class _RandomPool:
    """Random bytes drawn from ``os.urandom`` a few kilobytes at a time and handed out in order.

    Each ``os.urandom`` call is a system call that lets go of the GIL; the worker asked for two
    per resumed answer, and while its signature threads run, getting the GIL back is what such a
    call cost. The bytes are the same kernel randomness, each handed out once (a lock guards the
    position), and a forked child starts from a fresh draw rather than its parent's remainder.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._buffer = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            at = self._at
            if at + n > len(self._buffer):
                self._buffer = os.urandom(max(self._size, n))
                at = 0
            self._at = at + n
            return self._buffer[at : at + n]

    def reset(self) -> None:
        self._buffer = b""
        self._at = 0
        self._lock = threading.Lock()


_RANDOM = _RandomPool(16 * 256)
os.register_at_fork(after_in_child=_RANDOM.reset)


def event_id() -> str:
    """A random event id, as ``uuid.uuid4().hex`` writes it (version 4, RFC 4122 variant).

    The same 122 random bits from ``os.urandom`` (drawn for 256 ids at a time), with the version
    and variant set on the bytes; about half the cost of building a ``uuid.UUID`` and asking it
    for ``.hex``, and the worker takes two per resumed answer.
    """
    raw = bytearray(_RANDOM.take(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


def derived_event_id(*names: str) -> str:
    """The event id of an output whose identity is its input's: the same names give the same
    id, written as :func:`event_id` writes ids (a name-based, version 5 style UUID's hex).

    A resumed turn is named by its token and answer, a refusal by the answer it refuses, an
    expiry by its token. Should one be on the log twice -- a transaction left partly visible by
    the broker (``docs/guarantees.md``), then repaired -- both copies carry one id, and a reader
    that deduplicates on ``event_id`` sees one event.
    """
    joined = "\0".join(names).encode("utf-8", "surrogatepass")
    raw = bytearray(hashlib.sha1(b"turnlog.event\0" + joined, usedforsecurity=False).digest()[:16])
    raw[6] = raw[6] & 0x0F | 0x50
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


def event_meta(now: datetime, event: str | None = None) -> dict[str, Any]:
    """The fields every event the worker writes starts with; ``event``: the id it must have
    (:func:`derived_event_id`), else a random one."""
    ident = event_id() if event is None else event
    return {"event_id": ident, "occurred_at": now, "package_version": __version__}


def key_thread(key: bytes | None) -> str | None:
    """The thread a key names (for correlating a rejection), if it can be read at all."""
    if not key:
        return None
    thread = key.partition(SEPARATOR)[0]
    try:
        return thread.decode("utf-8")
    except UnicodeDecodeError:
        return None


def claimed_token_id(token: str) -> str | None:
    """The token id the token *claims*, unverified: only a ledger key to look up."""
    try:
        return jti_of(peek_claims(token))
    except Refused:
        return None


def jti_of(payload: Mapping[str, Any]) -> str | None:
    jti = payload.get("jti")
    if not isinstance(jti, str) or not jti or len(jti) > _TOKEN_ID_CHARS:
        return None
    try:
        jti.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return jti


def rejection(
    record: Record,
    refusal: Refusal,
    now: datetime,
    *,
    answer: AnswerSubmitted | None = None,
    thread_id: str | None = None,
) -> AnswerRejected:
    """The ``AnswerRejected`` of ``record``: what it names is echoed, clipped."""
    if answer is not None:
        answer_id: str = answer.answer_id
        thread_id = answer.thread_id or thread_id
        token_id = claimed_token_id(answer.token)
    else:
        answer_id = f"{record.topic}:{record.partition}:{record.offset}"
        token_id = None
    answer_id = clip(answer_id, ID_CHARS)
    return AnswerRejected(
        # One refusal per answer (and partition it was read from): a copy has the same id.
        **event_meta(
            now, derived_event_id("refused", record.topic, str(record.partition), answer_id)
        ),
        answer_id=answer_id,
        token_id=clip(token_id, ID_CHARS) if token_id else None,
        thread_id=clip(thread_id, ID_CHARS) if thread_id else None,
        reason=refusal.reason.value,
        step=refusal.step,
        detail=clip(refusal.detail, DETAIL_CHARS),
    )
