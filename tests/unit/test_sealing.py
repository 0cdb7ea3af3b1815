"""Sealing a resumed turn (``wire/sealing.py``) and the worker's outputs (``seal_outputs``):
pure, no broker."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tests.unit.test_codec_golden import _RESUMED, GOLDEN
from turnlog.consumers.content_keys import seal_outputs
from turnlog.contracts.events import PauseExpired, TurnResumed
from turnlog.errors import DecodeError
from turnlog.kafka.topics import TopicSet
from turnlog.wire.codec import decode, encode
from turnlog.wire.sealing import (
    KEY_BYTES,
    NONCE_BYTES,
    _seal_decoded,
    _seal_walked,
    content_key_name,
    new_key,
    seal,
    unseal,
)

GROUP = dataclasses.replace(
    _RESUMED,
    answers=(
        {"tool_call_id": "call-0", "interrupt_id": "int-0", "token_id": "tok-0",
         "answer_id": "ans-0", "name": "ask_user", "response_json": '{"secret":"first"}'},
    ),
)  # fmt: skip


def test_a_sealed_turn_keeps_its_ids_and_nothing_of_its_content() -> None:
    key = new_key()
    data = encode(GROUP)
    name, sealed = seal(data, key)
    assert name == content_key_name(GROUP.thread_id, GROUP.event_id)
    outer = decode(sealed, TurnResumed)
    for word in (b"Window seat", b"selected", b"secret", b"first"):
        assert word not in sealed
    assert (outer.prompt, outer.response_json, outer.history, outer.answered) == ("", "", (), None)
    assert [a["token_id"] for a in outer.answers] == ["tok-0"]  # a call's token still finds it
    assert [a["response_json"] for a in outer.answers] == [""]
    assert outer.sealed is not None and len(outer.sealed) > NONCE_BYTES
    assert dataclasses.replace(outer, sealed=None, prompt=GROUP.prompt) != GROUP
    for field in ("event_id", "token_id", "answer_id", "thread_id", "checkpoint_id", "run_id"):
        assert getattr(outer, field) == getattr(GROUP, field)
    assert unseal(outer, key) == GROUP


def test_an_unsealed_turn_is_opened_as_it_is() -> None:
    assert unseal(GROUP, new_key()) is GROUP


Change = Callable[[TurnResumed, bytes], tuple[TurnResumed, bytes]]


def _another_key(outer: TurnResumed, key: bytes) -> tuple[TurnResumed, bytes]:
    return outer, new_key()


def _short_key(outer: TurnResumed, key: bytes) -> tuple[TurnResumed, bytes]:
    return outer, key[:16]


def _flipped(outer: TurnResumed, key: bytes) -> tuple[TurnResumed, bytes]:
    box = outer.sealed or b""
    return dataclasses.replace(outer, sealed=box[:-1] + bytes([box[-1] ^ 1])), key


def _cut(outer: TurnResumed, key: bytes) -> tuple[TurnResumed, bytes]:
    return dataclasses.replace(outer, sealed=b"short"), key


def _moved(outer: TurnResumed, key: bytes) -> tuple[TurnResumed, bytes]:
    # The sealed bytes on another turn's envelope: the key's name is the associated data.
    return dataclasses.replace(outer, event_id="ev-other"), key


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_another_key, "sealed_unreadable"),
        (_short_key, "bad_content_key"),
        (_flipped, "sealed_unreadable"),
        (_cut, "sealed_unreadable"),
        (_moved, "sealed_unreadable"),
    ],
)
def test_a_turn_that_does_not_open_is_refused_by_name(change: Change, reason: str) -> None:
    key = new_key()
    _, sealed = seal(encode(GROUP), key)
    outer, wrong = change(decode(sealed, TurnResumed), key)
    with pytest.raises(DecodeError) as caught:
        unseal(outer, wrong)
    assert caught.value.reason == reason


def test_only_an_unsealed_turn_is_sealed() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        seal(encode(GROUP), b"k" * 16)
    _, sealed = seal(encode(GROUP), new_key())
    with pytest.raises(ValueError, match="unsealed TurnResumed"):
        seal(sealed, new_key())
    with pytest.raises(ValueError, match="unsealed TurnResumed"):
        seal(encode(GOLDEN["PauseExpired"]), new_key())


def test_the_worker_writes_each_turn_sealed_with_its_key_just_before_it() -> None:
    topics = TopicSet("t.", 2)
    expired = encode(GOLDEN["PauseExpired"])
    assert isinstance(decode(expired), PauseExpired)
    outputs = [
        (topics.consumptions, b"thread-42\x00tok-1", b"spent"),
        (topics.resumed, b"thread-42", encode(GROUP)),
        (topics.resumed, b"thread-43", expired),
        (topics.rejections, b"thread-42", b"refusal"),
    ]
    sealed = seal_outputs(topics, outputs)
    assert [(t, k) for t, k, _ in sealed] == [
        (topics.consumptions, b"thread-42\x00tok-1"),
        (topics.keys, content_key_name("thread-42", GROUP.event_id)),
        (topics.resumed, b"thread-42"),
        (topics.resumed, b"thread-43"),
        (topics.rejections, b"thread-42"),
    ]
    key = sealed[1][2]
    assert key is not None and len(key) == KEY_BYTES
    turn = decode(sealed[2][2] or b"", TurnResumed)
    assert turn.sealed is not None and unseal(turn, key) == GROUP
    assert sealed[3][2] == expired  # an expiry holds no content: written as it is
    assert seal_outputs(topics, []) == []


def test_the_keys_topic_is_compacted_and_lives_past_the_turns_it_opens() -> None:
    spec = TopicSet("t.", 3).keys_spec()
    configs = spec.all_configs()
    assert spec.name == "t.keys" and spec.compacted
    assert configs["cleanup.policy"] == "compact,delete"
    assert int(configs["retention.ms"]) > TopicSet("t.", 3).retention_ms
    assert "t.keys" not in {s.name for s in TopicSet("t.", 3).specs()}


@pytest.mark.parametrize(
    "turn",
    [
        _RESUMED,
        dataclasses.replace(_RESUMED, answered=None),
        dataclasses.replace(
            _RESUMED,
            history=tuple(
                {"role": "user" if i % 2 else "assistant", "content": f"message {i} " * 30}
                for i in range(22)
            ),
        ),
        dataclasses.replace(_RESUMED, history=(), prompt="", response_json="{}"),
    ],
    ids=["answered", "plain", "22 messages", "empty"],
)
def test_the_walked_seal_writes_what_the_decoding_path_writes(turn: TurnResumed) -> None:
    key, nonce = new_key(), b"\x07" * NONCE_BYTES
    data = encode(turn)
    walked = _seal_walked(data, key, nonce)
    assert walked is not None and walked == _seal_decoded(data, key, nonce)
    assert unseal(decode(walked[1], TurnResumed), key) == turn


def test_a_group_turn_and_a_sealed_one_take_the_decoding_path() -> None:
    key, nonce = new_key(), b"\x07" * NONCE_BYTES
    assert _seal_walked(encode(GROUP), key, nonce) is None  # its calls keep their ids
    _, sealed = seal(encode(_RESUMED), key)
    assert _seal_walked(sealed, key, nonce) is None
