"""Sealed resumed turns: content that a forget makes unreadable everywhere at once.

A resumed turn carries the whole conversation, the answer folded in, on a topic that is not
compacted: a ``forget``'s tombstones never reach it, nor a copy of it in another region or a
backup. With sealing on (``TURNLOG_SEAL``), the worker encrypts each resumed turn under a key of
its own (AES-256-GCM) and writes that key, in the same transaction, on the compacted keys topic
under ``thread_id NUL event_id``. ``forget`` tombstones the thread's keys: every copy of every
sealed turn of the thread is then ciphertext nobody can open.

The sealed record is an ordinary ``TurnResumed`` whose ids stay readable (the audit, the trail
and the notifier need nothing else) and whose content fields are empty; ``sealed`` holds the
nonce and the ciphertext of the whole record as it was encoded before sealing, with the key's
name as associated data, so a key can only open the turn it was written for. Opening gives back
exactly the unsealed record. Everything here is pure: the keys themselves are read by
:mod:`turnlog.consumers.content_keys`.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import replace

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from turnlog.contracts.events import TurnResumed
from turnlog.errors import DecodeError
from turnlog.wire.codec import WRITE_HEADERS, decode, encode, schema_for
from turnlog.wire.compiled import CompiledSchema, compile_skim
from turnlog.wire.direct import long_bytes
from turnlog.wire.resumed_bytes import ResumedFields, encode_turn_resumed

#: An AES-256 key's length: the whole value of a keys-topic record.
KEY_BYTES = 32
#: The GCM nonce that begins ``sealed``.
NONCE_BYTES = 12
#: GCM's tag, at the end of ``sealed``.
TAG_BYTES = 16
_HISTORY = "dev.turnlog.TurnResumed.history"


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def content_key_name(thread_id: str, event_id: str) -> bytes:
    """The keys-topic key of the key that sealed the turn ``event_id`` of ``thread_id``: a
    composite key like every other of the thread's (``thread_id NUL event_id``), so the
    thread's partition holds it and ``forget`` finds it as it finds the thread's others."""
    return thread_id.encode("utf-8") + b"\x00" + event_id.encode("utf-8")


def key_name(turn: TurnResumed) -> bytes:
    """The keys-topic key of ``turn``'s content key (and the ciphertext's associated data)."""
    return content_key_name(turn.thread_id, turn.event_id)


@functools.cache
def _turn_reader() -> CompiledSchema | None:
    """A reader of today's ``TurnResumed`` that leaves the history as bytes: what sealing needs
    of a turn (its ids) without building its messages."""
    return compile_skim(schema_for("TurnResumed"), frozenset({_HISTORY}))


def seal(data: bytes, key: bytes, nonce: bytes | None = None) -> tuple[bytes, bytes]:
    """``(key name, sealed record)`` for the encoded resumed turn ``data`` under ``key``.

    ``ValueError`` when ``data`` is not an unsealed ``TurnResumed`` (a ``PauseExpired`` on the
    same topic holds no content and is written as it is).
    """
    if len(key) != KEY_BYTES:
        raise ValueError(f"a content key is {KEY_BYTES} bytes, got {len(key)}")
    nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
    return _seal_walked(data, key, nonce) or _seal_decoded(data, key, nonce)


def _seal_decoded(data: bytes, key: bytes, nonce: bytes) -> tuple[bytes, bytes]:
    """:func:`seal` through the codec: any turn (a group's calls, another framing)."""
    turn = decode(data)
    if not isinstance(turn, TurnResumed) or turn.sealed is not None:
        raise ValueError("only an unsealed TurnResumed is sealed")
    name = key_name(turn)
    box = nonce + AESGCM(key).encrypt(nonce, data, name)
    empty = replace(
        turn,
        prompt="",
        response_json="",
        history=(),
        answered=None,
        # The calls of a group keep their ids (a continuation finds the turn by any call's
        # token; an outcome by any call's answer id), never what was answered.
        answers=tuple({**answer, "response_json": ""} for answer in turn.answers),
        sealed=box,
    )
    return name, encode(empty)


def _seal_walked(data: bytes, key: bytes, nonce: bytes) -> tuple[bytes, bytes] | None:
    """:func:`seal` of a turn written now by this process's writer with no calls of a group --
    every turn of the worker's direct path -- its ids read by a walk that leaves the history
    as bytes and the empty turn written by the direct writer: the same bytes as the decoding
    path, a third of its time (``tests/unit/test_sealing.py``). ``None`` for any other turn."""
    header = WRITE_HEADERS["TurnResumed"]
    reader = _turn_reader()
    if reader is None or not data.startswith(header):
        return None
    try:
        record, end = reader.read(data, len(header))
    except DecodeError:
        return None
    if end != len(data) or record["answers"] or record["sealed"] is not None:
        return None
    name = content_key_name(record["thread_id"], record["event_id"])
    box = nonce + AESGCM(key).encrypt(nonce, data, name)
    ids = ResumedFields(**{f: record[f] for f in ResumedFields._fields[:-2]}, prompt="",
                        response_json="")  # fmt: skip
    empty = encode_turn_resumed(ids, b"", 0, (), None)
    # The direct writer ends with ``sealed`` null (one zero byte): the union's second branch
    # and the bytes instead.
    return name, empty[:-1] + b"\x02" + long_bytes(len(box)) + box


def unseal(turn: TurnResumed, key: bytes) -> TurnResumed:
    """The turn as it was before sealing (``turn`` itself when it is not sealed).

    :class:`DecodeError` names what is wrong: a key of the wrong length, a ciphertext the key
    does not open (another turn's key, or bytes changed), or a record inside whose ids are not
    the envelope's.
    """
    box = turn.sealed
    if box is None:
        return turn
    if len(key) != KEY_BYTES:
        raise DecodeError("bad_content_key", f"a content key is {KEY_BYTES} bytes, got {len(key)}")
    if len(box) < NONCE_BYTES + TAG_BYTES:
        raise DecodeError("sealed_unreadable", f"a sealed turn of {len(box)} bytes is cut short")
    try:
        data = AESGCM(key).decrypt(box[:NONCE_BYTES], box[NONCE_BYTES:], key_name(turn))
    except InvalidTag:
        raise DecodeError(
            "sealed_unreadable",
            f"the sealed turn {turn.event_id!r} does not open with the key under its name "
            "(another turn's key, or changed bytes)",
        ) from None
    inner = decode(data, TurnResumed)
    ids = ("event_id", "thread_id", "token_id", "answer_id", "checkpoint_id")
    if inner.sealed is not None or any(getattr(inner, f) != getattr(turn, f) for f in ids):
        raise DecodeError(
            "sealed_mismatch", f"the record sealed in turn {turn.event_id!r} is another turn"
        )
    return inner
