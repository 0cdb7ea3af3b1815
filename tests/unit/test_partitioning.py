from __future__ import annotations

from collections.abc import Callable

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from turnlog.errors import DecodeError
from turnlog.kafka.partitioning import (
    answer_key,
    consumption_key,
    murmur2,
    partition_for,
    pause_key,
    split_key,
    thread_of_key,
)

PARTITION_COUNTS = (1, 3, 6, 12, 50, 7)

# Computed with the Java client itself (kafka-clients 4.4.0): for each key,
# Utils.murmur2(key.getBytes(UTF_8)) and Utils.toPositive(hash) % n for n in PARTITION_COUNTS.
JAVA_VECTORS: list[tuple[str, int, tuple[int, ...]]] = [
    ("", 275646681, (0, 0, 3, 9, 31, 2)),
    ("a", -1563381124, (0, 1, 4, 4, 24, 5)),
    ("ab", 316155434, (0, 2, 2, 2, 34, 0)),
    ("abc", 479470107, (0, 0, 3, 3, 7, 4)),
    ("abcd", -1323649548, (0, 2, 2, 8, 0, 5)),
    ("abcde", 461995741, (0, 1, 1, 1, 41, 4)),
    ("t", 349920049, (0, 1, 1, 1, 49, 3)),
    ("thread-1", -84512706, (0, 2, 2, 2, 42, 4)),
    ("thread-2", -1220057576, (0, 0, 0, 0, 22, 6)),
    ("hello world", 1221641059, (0, 1, 1, 7, 9, 2)),
    ("0", 971027396, (0, 2, 2, 8, 46, 3)),
    ("42", 417700972, (0, 1, 4, 4, 22, 3)),
    ("th_01HZX9Q6N0Y6Q8M4T9V2K7R3A1", 1500194950, (0, 1, 4, 10, 0, 2)),
    ("550e8400-e29b-41d4-a716-446655440000", 2143099391, (0, 2, 5, 11, 41, 6)),
    ("tenant:acme/thread:7", -45896491, (0, 1, 1, 1, 7, 5)),
    ("\u00e9", 186971271, (0, 0, 3, 3, 21, 4)),
    ("caf\u00e9", -1358007374, (0, 0, 0, 6, 24, 6)),
    ("\u65e5\u672c\u8a9e\u30b9\u30ec\u30c3\u30c9", -1538331890, (0, 0, 0, 6, 8, 5)),
    ("\U0001f9f5-thread", 923674723, (0, 1, 1, 7, 23, 6)),
    ("\u0416\u0443\u0440\u043d\u0430\u043b", -392931938, (0, 0, 0, 6, 10, 2)),
    ("x" * 257, -939133454, (0, 0, 0, 6, 44, 2)),
    ("The quick brown fox jumps over the lazy dog", 495243318, (0, 0, 0, 6, 18, 3)),
]


@pytest.mark.parametrize(("key", "java_hash", "java_partitions"), JAVA_VECTORS)
def test_matches_the_java_client(
    key: str, java_hash: int, java_partitions: tuple[int, ...]
) -> None:
    assert murmur2(key.encode("utf-8")) == java_hash
    assert tuple(partition_for(key, n) for n in PARTITION_COUNTS) == java_partitions


def test_vectors_cover_every_tail_length_and_both_signs() -> None:
    assert {len(k.encode()) % 4 for k, _, _ in JAVA_VECTORS} == {0, 1, 2, 3}
    assert any(h < 0 for _, h, _ in JAVA_VECTORS)
    assert any(h > 0 for _, h, _ in JAVA_VECTORS)


@given(st.binary(max_size=300))
def test_same_hash_as_aiokafka(data: bytes) -> None:
    # aiokafka returns the hash as an unsigned 32-bit value; Java (and we) return it signed.
    ours = murmur2(data)
    assert -(2**31) <= ours < 2**31
    assert ours & 0xFFFFFFFF == aiokafka_murmur2(data)


@given(st.text(max_size=80), st.integers(min_value=1, max_value=500))
def test_same_partition_as_aiokafka_default_partitioner(thread_id: str, n: int) -> None:
    partitions = list(range(n))
    expected = DefaultPartitioner()(thread_id.encode("utf-8"), partitions, partitions)
    assert partition_for(thread_id, n) == expected


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for("t", 0)


@pytest.mark.parametrize("make", [pause_key, answer_key, consumption_key])
def test_composite_keys_recover_the_thread(make: Callable[[str, str], bytes]) -> None:
    key = make("th\u00e9-1", "id-\x00-with-nul")
    assert isinstance(key, bytes)
    assert key == "th\u00e9-1".encode() + b"\x00" + b"id-\x00-with-nul"
    assert thread_of_key(key) == "th\u00e9-1"
    assert split_key(key) == ("th\u00e9-1", "id-\x00-with-nul")


@given(
    st.text(min_size=1).filter(lambda s: "\x00" not in s),
    st.text(),
)
def test_split_inverts_every_key(thread_id: str, other: str) -> None:
    assert split_key(pause_key(thread_id, other)) == (thread_id, other)


def test_keys_of_different_facts_of_one_thread_differ_only_after_the_thread() -> None:
    a, b = pause_key("t", "c1"), pause_key("t", "c2")
    assert a != b
    assert thread_of_key(a) == thread_of_key(b) == "t"
    # "t" and "t1" must not share a key prefix, or a scan of one thread would see the other.
    assert not pause_key("t1", "c").startswith(b"t\x00")


@pytest.mark.parametrize("bad", ["", "a\x00b", "\x00"])
def test_thread_ids_that_cannot_be_keyed_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="thread id"):
        pause_key(bad, "c")


@pytest.mark.parametrize("key", [b"no-separator", b"\x00leading", b"\xff\xfe\x00x"])
def test_malformed_keys_are_refused_by_name(key: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        thread_of_key(key)
    assert info.value.reason == "bad_key"
