"""The key layout of the local store: one column family per index, fixed-width big-endian numbers.

Keys sort the way the queries read them (a thread's checkpoints in the log's order, pauses by
deadline),
so every query is a seek plus a bounded scan. Index values are canonical JSON (sorted keys, no
spaces): small, readable with any tool, never pickled, and byte-identical for equal content, which
the digest relies on.
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from turnlog.contracts.ledger import Outcome
from turnlog.kafka.partitioning import SEPARATOR, check_thread_id

#: Bumped when the layout changes; a store of another layout is rebuilt, not read.
#: 2: the spent index (the ledger's retirement finds its due rows by deadline).
#: 3: the waiting index and its counts (pages of pending pauses by scope and interaction, and
#: how many wait, without reading every pause).
#: 4: a thread's checkpoints in the log's order (the pause's offset, not the caller's
#: ``sequence``) and the unfinalized index; no store of an earlier layout knows the offsets, so
#: one is emptied when it is opened read-write and refilled from the log (``Store._refill``).
LAYOUT_VERSION = 4

#: thread NUL be64(order) checkpoint_id -> the caller's encoded pause/checkpoint value; the
#: order is the offset of the pause's first write on its partition of the pauses topic (one
#: partition per thread), so a thread's checkpoints sort as the log holds them
CHECKPOINTS = "checkpoints"
#: thread NUL checkpoint_id -> {order, token_id, expires_at}: finds a checkpoint from its
#: pauses-topic key, which is all a tombstone carries
PAUSES = "pauses"
#: token_id -> {thread_id, checkpoint_id, order, expires_at}, then optionally a second line:
#: the hint the pause's skim left (where the checkpoint's messages stand in the stored record)
TOKENS = "tokens"
#: be64(expires_at_ms) token_id -> thread_id, for pauses whose token is not in the ledger
DEADLINES = "deadlines"
#: be64(expires_at_ms) token_id -> thread_id, for pauses whose token is in the ledger: the
#: rows the ledger's retirement finds by deadline (a pause is in DEADLINES or here, never both)
SPENT = "spent"
#: token_id -> {outcome, answer_id, thread_id[, response_json][, claim]}: the spent-token ledger
LEDGER = "ledger"
#: thread NUL token_id -> b"": the ledger entries of a thread, so forgetting it finds them
THREAD_TOKENS = "thread_tokens"
#: The pauses of DEADLINES again (exactly those: unspent), for the pages of what waits:
#: ``WAIT_ALL be64(expires_at_ms) token_id`` -> the pause's facts (:func:`dump_facts`), and one
#: ``facet be32(len) value be64(expires_at_ms) token_id`` -> b"" per facet (scope, interaction)
#: that has a value, so a page of one scope or one interaction is a seek and a bounded scan.
WAITING = "waiting"
#: be64(expires_at_ms) token_id -> {paused_at, thread_id}: the pauses written unfinalized and
#: not finalized since (the crash window, :mod:`turnlog.kafka.finalization`), whether their
#: token is spent or not -- a function of the pauses alone, as the other pause indexes are
UNFINALIZED = "unfinalized"
#: offsets, the layout version and the waiting counts (:func:`count_key`); never part of user
#: data or the digest
META = "meta"

USER_FAMILIES: tuple[str, ...] = tuple(
    sorted(
        (CHECKPOINTS, PAUSES, TOKENS, DEADLINES, SPENT, LEDGER, THREAD_TOKENS, WAITING, UNFINALIZED)
    )
)
ALL_FAMILIES: tuple[str, ...] = (*USER_FAMILIES, META)

VERSION_KEY = b"layout-version"
_OFFSET_PREFIX = b"offset\x00"

OUTCOMES = frozenset(Outcome)

_U64 = 1 << 64


def u64(value: int, what: str) -> bytes:
    """Big-endian so byte order is numeric order; negative values would sort after every other."""
    if not 0 <= value < _U64:
        raise ValueError(f"{what} must be in [0, 2**64), got {value}")
    return value.to_bytes(8, "big")


def thread_prefix(thread_id: str) -> bytes:
    return check_thread_id(thread_id).encode("utf-8") + SEPARATOR


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key after every key starting with ``prefix`` (prefixes here end in NUL)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def checkpoint_key(thread_id: str, order: int, checkpoint_id: str) -> bytes:
    return thread_prefix(thread_id) + u64(order, "order") + checkpoint_id.encode("utf-8")


def pause_key(thread_id: str, checkpoint_id: str) -> bytes:
    return thread_prefix(thread_id) + checkpoint_id.encode("utf-8")


def thread_token_key(thread_id: str, token_id: str) -> bytes:
    return thread_prefix(thread_id) + token_id.encode("utf-8")


def deadline_key(expires_at_ms: int, token_id: str) -> bytes:
    return u64(expires_at_ms, "expires_at_ms") + token_id.encode("utf-8")


def split_deadline_key(key: bytes) -> tuple[int, str]:
    return int.from_bytes(key[:8], "big"), key[8:].decode("utf-8")


#: The prefixes of the waiting index: every waiting pause, and its pauses by facet.
WAIT_ALL = b"\x00"
WAIT_SCOPE = b"s"
WAIT_INTERACTION = b"i"

#: The waiting counts: pauses entering the waiting index count +1 in the bucket of their
#: deadline's hour and of its minute, leaving it -1, so "how many wait at ``now``" sums the
#: hours after now's, the minutes after now's within its hour, and scans the keys of now's
#: minute only -- bounded by the deadlines' span and one minute's pauses, never by all of them.
COUNT_HOUR = 3_600_000
COUNT_MINUTE = 60_000
_COUNT_PREFIX = b"count\x00"
_COUNT_HOURS = _COUNT_PREFIX + b"h"
_COUNT_MINUTES = _COUNT_PREFIX + b"m"


def facet_prefix(facet: bytes, value: str) -> bytes:
    """The waiting index's prefix of one facet value (length-prefixed: any text is a value)."""
    raw = value.encode("utf-8")
    return facet + len(raw).to_bytes(4, "big") + raw


def count_keys(expires_at_ms: int) -> tuple[bytes, bytes]:
    """The two counts a waiting pause with this deadline is counted in: its hour, its minute."""
    return (
        _COUNT_HOURS + u64(expires_at_ms // COUNT_HOUR, "hour"),
        _COUNT_MINUTES + u64(expires_at_ms // COUNT_MINUTE, "minute"),
    )


def hour_count_range(low_hour: int) -> tuple[bytes, bytes]:
    return _COUNT_HOURS + u64(low_hour, "hour"), _COUNT_PREFIX + b"i"  # every later hour


def minute_count_range(low_minute: int, high_minute: int) -> tuple[bytes, bytes]:
    return _COUNT_MINUTES + u64(low_minute, "minute"), _COUNT_MINUTES + u64(high_minute, "minute")


#: The changes feed: what entered or left the waiting index, batch by batch, numbered, so a
#: reader (the inbox's live stream) hears of them without reading what waits. Only the last
#: :data:`CHANGES_KEPT` are kept; a reader further behind reads the pages again.
_CHANGE_PREFIX = b"change\x00"
CHANGES_NEXT = b"changes-next"
CHANGES_KEPT = 10_000


def change_key(number: int) -> bytes:
    return _CHANGE_PREFIX + u64(number, "change number")


def change_range(low: int) -> tuple[bytes, bytes]:
    return change_key(low), prefix_end(_CHANGE_PREFIX)


def change_number(key: bytes) -> int:
    return int.from_bytes(key[len(_CHANGE_PREFIX) :], "big")


class PauseFacts(NamedTuple):
    """What a page of waiting pauses shows and filters on, kept in the waiting index: the
    pause's interaction, its four axes, and when it was made (ms since the epoch)."""

    interaction: str = ""
    scope: str = ""
    session: str = ""
    run: str = ""
    call: str = ""
    paused_at_ms: int = 0
    created_at_ms: int = 0


def dump_facts(thread_id: str, checkpoint_id: str, facts: PauseFacts) -> bytes:
    """``dump`` of a waiting pause's facts (its thread and checkpoint among them)."""
    return dump(
        {
            "call": facts.call,
            "checkpoint_id": checkpoint_id,
            "created_at": facts.created_at_ms,
            "interaction": facts.interaction,
            "paused_at": facts.paused_at_ms,
            "run": facts.run,
            "scope": facts.scope,
            "session": facts.session,
            "thread_id": thread_id,
        }
    )


def dump_change(kind: str, token_id: str, thread_id: str, scope: str, interaction: str) -> bytes:
    """``dump`` of one entry of the changes feed."""
    return dump(
        {
            "interaction": interaction,
            "kind": kind,
            "scope": scope,
            "thread_id": thread_id,
            "token_id": token_id,
        }
    )


def offset_key(topic: str, partition: int) -> bytes:
    if not topic or "\x00" in topic:
        raise ValueError(f"a topic name must be non-empty and without NUL, got {topic!r}")
    if not 0 <= partition < 1 << 31:
        raise ValueError(f"a partition is a non-negative int32, got {partition}")
    return _OFFSET_PREFIX + topic.encode("utf-8") + SEPARATOR + partition.to_bytes(4, "big")


def offset_range() -> tuple[bytes, bytes]:
    return _OFFSET_PREFIX, prefix_end(_OFFSET_PREFIX)


def split_offset_key(key: bytes) -> tuple[str, int]:
    rest = key[len(_OFFSET_PREFIX) :]  # topic NUL be32(partition); the partition may hold NULs
    return rest[:-5].decode("utf-8"), int.from_bytes(rest[-4:], "big")


#: One encoder for every index value: ``json.dumps`` with options builds a new one per call.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
#: The string encoder ``_ENCODER`` uses (``ensure_ascii=False``): quotes and escapes, in C.
_STRING: Any = json.encoder.encode_basestring


def dump(record: dict[str, Any]) -> bytes:
    return _ENCODER.encode(record).encode()


# The two index values written per pause, formatted directly: the same bytes as ``dump`` (keys
# sorted, no spaces, text not escaped to ASCII; tests/unit/test_store.py holds them to it) at a
# fraction of the cost of the general encoder, which a replay pays for every pause.


def dump_locator(
    order: int, token_id: str | None, expires_at: int | None, group: Sequence[str] = ()
) -> bytes:
    """``dump({"order": ..., "token_id": ..., "expires_at": ...})``: a pause's locator; a
    pause of several calls also names the other calls' tokens (``"group"``)."""
    token = "null" if token_id is None else _STRING(token_id)
    expires = "null" if expires_at is None else int.__repr__(expires_at)
    number = int.__repr__(order)
    others = f'"group":[{",".join(_STRING(t) for t in group)}],' if group else ""
    return f'{{"expires_at":{expires},{others}"order":{number},"token_id":{token}}}'.encode()


def dump_unfinalized(thread_id: str, paused_at_ms: int) -> bytes:
    """``dump({"paused_at": ..., "thread_id": ...})``: an unfinalized pause's entry."""
    return f'{{"paused_at":{int.__repr__(paused_at_ms)},"thread_id":{_STRING(thread_id)}}}'.encode()


def dump_token(
    thread_id: str,
    checkpoint_id: str,
    order: int,
    token_id: str,
    expires_at: int,
    messages: Sequence[int] | None = None,
) -> bytes:
    """``dump`` of a token's entry: its pause's thread and checkpoint, and the locator.

    With ``messages`` (the hint the pause's skim left: :func:`turnlog.wire.skim.messages_hint`)
    the entry carries it on a second line, in hex, as little-endian unsigned 32-bit numbers
    (about a third of the cost of reading decimals, on every resume): canonical JSON never
    holds a raw newline, so the first line is the entry as before, and a reader that needs only
    the entry (:func:`load`) does not parse the hint. An entry without one reads as before, and
    so does a hint with a number outside 32 bits (never left: a record is far smaller).
    """
    entry = (
        f'{{"checkpoint_id":{_STRING(checkpoint_id)},"expires_at":{int.__repr__(expires_at)},'
        f'"order":{int.__repr__(order)},"thread_id":{_STRING(thread_id)},'
        f'"token_id":{_STRING(token_id)}}}'
    )
    if messages:
        with contextlib.suppress(struct.error):  # a number outside 32 bits: no hint at all
            entry += "\n" + struct.pack(f"<{len(messages)}I", *messages).hex()
    return entry.encode()


def token_hint(raw: bytes) -> tuple[int, ...] | None:
    """The messages hint on a token entry's second line, if it has one that reads as numbers."""
    _, newline, hint = raw.partition(b"\n")
    if not newline:
        return None
    try:
        packed = bytes.fromhex(hint.decode("ascii"))
        return struct.unpack(f"<{len(packed) // 4}I", packed)
    except (ValueError, struct.error):
        return None


def dump_ledger(
    outcome: str,
    answer_id: str,
    thread_id: str,
    response_json: str = "",
    claim: tuple[str, str, int, str] | None = None,
) -> bytes:
    """``dump`` of a ledger entry: how the token was spent, by which answer, on which thread --
    for a held answer (one call of a group), its response, kept until the group resumes; for a
    resumed turn somebody claimed, the claim ``(claim_id, claimant, claimed_at_ms, state)``."""
    held = f'"response_json":{_STRING(response_json)},' if response_json else ""
    taken = ""
    if claim is not None and claim[3]:
        claim_id, claimant, at_ms, state = claim
        taken = (
            f'"claim":{{"at":{int(at_ms)},"by":{_STRING(claimant)},"id":{_STRING(claim_id)},'
            f'"state":{_STRING(state)}}},'
        )
    return (
        f'{{"answer_id":{_STRING(answer_id)},{taken}"outcome":{_STRING(outcome)},'
        f'{held}"thread_id":{_STRING(thread_id)}}}'
    ).encode()


def load(raw: bytes) -> dict[str, Any]:
    """An index value's JSON object (a token entry's hint line, if any, left out)."""
    value = json.loads(raw.partition(b"\n")[0])
    if not isinstance(value, dict):
        raise ValueError(f"a store index value must be a JSON object, got {raw!r}")
    return value
