"""Where a thread's records go, and how the compacted topics' keys name a fact of a thread.

Every record of a thread must land on the partition Kafka's Java default partitioner picks for the
key ``thread_id``, so that any client in any language can publish an answer to the right
partition and one owner of partition p owns every fact of its threads. The compacted topics,
however, key each record by a *composite* (thread plus checkpoint, answer or token id) so that
compaction keeps one record per fact; their producers therefore pass the partition explicitly,
and the thread id must be recoverable from the key alone (a tombstone carries nothing else).

A composite key is ``utf8(thread_id) + b"\\x00" + utf8(other)``. Thread ids may not contain NUL
(refused when a key is built), so the first NUL of a key always ends the thread id.
"""

from __future__ import annotations

import struct

from turnlog.errors import DecodeError

__all__ = [
    "SEPARATOR",
    "answer_key",
    "check_thread_id",
    "consumption_key",
    "murmur2",
    "partition_for",
    "pause_key",
    "split_key",
    "thread_of_key",
]

#: Ends the thread id inside a composite key.
SEPARATOR = b"\x00"

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as Java's signed 32-bit ``int``.

    It must match Java bit for bit: a different hash would route an answer published by another
    client to a partition whose owner never saw the pause.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(thread_id: str, partitions: int) -> int:
    """The partition Kafka's Java default partitioner picks for the record key ``thread_id``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    return (murmur2(thread_id.encode("utf-8")) & 0x7FFFFFFF) % partitions


def check_thread_id(thread_id: str) -> str:
    """Refuse a thread id that cannot be put in a composite key; return it unchanged otherwise."""
    if not thread_id:
        raise ValueError("a thread id must not be empty")
    if "\x00" in thread_id:
        raise ValueError(
            "a thread id must not contain NUL: it ends the thread id inside a composite key, "
            "so the thread (and with it the partition) could not be recovered from the key"
        )
    return thread_id


def _composite(thread_id: str, other: object, what: str) -> bytes:
    if not isinstance(other, str):
        raise TypeError(f"{what} must be a str, got {type(other).__name__}")
    return check_thread_id(thread_id).encode("utf-8") + SEPARATOR + other.encode("utf-8")


def pause_key(thread_id: str, checkpoint_id: str) -> bytes:
    """Key of a pauses record: one per checkpoint, so compaction keeps a thread's history."""
    return _composite(thread_id, checkpoint_id, "checkpoint_id")


def answer_key(thread_id: str, answer_id: str) -> bytes:
    """Key of an answers record: a publisher retry with the same answer id collapses."""
    return _composite(thread_id, answer_id, "answer_id")


def consumption_key(thread_id: str, token_id: str) -> bytes:
    """Key of a consumptions record: the one final record of a token."""
    return _composite(thread_id, token_id, "token_id")


def split_key(key: bytes) -> tuple[str, str]:
    """``(thread_id, other_id)`` of a composite key; bytes from a topic, so refused by name."""
    thread, sep, other = bytes(key).partition(SEPARATOR)
    if not sep or not thread:
        raise DecodeError("bad_key", f"a composite key needs 'thread_id NUL id', got {key!r}")
    try:
        return thread.decode("utf-8"), other.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("bad_key", f"a composite key must be UTF-8: {exc}") from None


def thread_of_key(key: bytes) -> str:
    """The thread id a composite key belongs to (and so the partition it must live on)."""
    return split_key(key)[0]
