"""The compiled codec's varint reader, unrolled for speed, reads exactly what the plain loop
reads and refuses exactly what it refuses (a varint over ten bytes or 64 bits, or cut short)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.wire import compiled


def _loop(data: bytes, p: int) -> tuple[int, int]:
    """The plain reading of an unsigned varint, as the Avro specification describes it."""
    b = data[p]
    p += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift > 63:
            raise compiled._Malformed("a varint longer than ten bytes")
        b = data[p]
        p += 1
        n |= (b & 0x7F) << shift
        shift += 7
    if n >> 64:
        raise compiled._Malformed("a varint beyond 64 bits")
    return n, p


def _outcome(read: object, data: bytes) -> object:
    try:
        return read(data, 0)  # type: ignore[operator]
    except compiled._Malformed as exc:
        return ("malformed", str(exc))
    except IndexError:
        return "short"


continuation = st.integers(128, 255)
last = st.integers(0, 127)
varint_like = st.lists(st.one_of(continuation, last), min_size=1, max_size=12).map(bytes)


@settings(max_examples=2000)
@given(varint_like)
def test_the_unrolled_reader_agrees_with_the_loop(data: bytes) -> None:
    assert _outcome(compiled._read_unsigned, data) == _outcome(_loop, data)


@given(st.integers(0, 2**64 - 1))
def test_every_unsigned_64_bit_value_reads_back(value: int) -> None:
    data = compiled._varint(value) + b"\x7f"
    assert compiled._read_unsigned(data, 0) == (value, len(data) - 1)
