"""The registry framing in the codec, without a registry: ``00`` + a 4-byte schema id + the same
Avro body as single-object, ids resolved once through the lookup the registry client gives
(here a dict of what a registry would answer), both framings read whatever this process writes.
The integration test (tests/integration/test_registry_wire.py) runs it against a real one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.test_codec_golden import GOLDEN, HISTORY, encode_old
from turnlog.contracts.events import PauseRecorded, TurnResumed
from turnlog.errors import DecodeError, SettingError
from turnlog.settings import Settings
from turnlog.wire import codec
from turnlog.wire.direct import encode_token_consumed
from turnlog.wire.resumed_bytes import ResumedFields, encode_turn_resumed
from turnlog.wire.skim import StoredPause, messages_hint, read_stored, skim_pause

IDS = {name: 100 + i for i, name in enumerate(sorted(GOLDEN))}


class Registry:
    """What a registry answers to ``GET /schemas/ids/{id}``, and how often it was asked."""

    def __init__(self, schemas: dict[int, str]) -> None:
        self.schemas = schemas
        self.asked: list[int] = []

    def __call__(self, schema_id: int) -> str | None:
        self.asked.append(schema_id)
        return self.schemas.get(schema_id)


def _text(schema: Any) -> str:
    return json.dumps(schema, separators=(",", ":"))


@pytest.fixture(autouse=True)
def _single_object_after() -> Iterator[None]:
    yield
    codec.use_single_object()


def _use(registry: Registry | None = None) -> Registry:
    registry = registry or Registry({})
    known = {IDS[name]: _text(codec.schema_for(name)) for name in IDS}
    codec.use_registry(registry, IDS, known)
    return registry


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_a_value_is_framed_with_its_schema_id_and_the_same_body(name: str) -> None:
    single = codec.encode(GOLDEN[name])
    _use()
    framed = codec.encode(GOLDEN[name])
    assert framed == b"\x00" + IDS[name].to_bytes(4, "big") + single[10:]
    assert codec.decode(framed) == GOLDEN[name]
    assert codec.decode(single) == GOLDEN[name]  # the other framing is still read


def test_an_id_is_asked_of_the_registry_once_and_kept() -> None:
    schema = _text(codec.schema_for("PauseRecorded"))
    registry = Registry({7: schema})
    codec.use_registry(registry)  # a reader: no ids of its own
    framed = b"\x00\x00\x00\x00\x07" + codec.encode(GOLDEN["PauseRecorded"])[10:]
    for _ in range(3):
        assert codec.decode(framed, PauseRecorded) == GOLDEN["PauseRecorded"]
    assert registry.asked == [7]


def test_an_id_the_registry_lacks_is_refused_by_name_and_not_asked_again() -> None:
    registry = _use()
    framed = b"\x00" + (999).to_bytes(4, "big") + b"\x02ab"
    for _ in range(2):
        with pytest.raises(DecodeError) as refused:
            codec.decode(framed)
        assert refused.value.reason == "unknown_schema_id"
        assert "no schema with id 999" in refused.value.detail
    assert registry.asked == [999]


def test_an_id_of_a_schema_that_is_no_turnlog_value_is_refused() -> None:
    other = _text({"type": "record", "name": "acme.Order", "fields": []})
    codec.use_registry(Registry({5: other}))
    with pytest.raises(DecodeError) as refused:
        codec.decode(b"\x00\x00\x00\x00\x05")
    assert refused.value.reason == "unknown_schema_id"
    assert "not a turnlog value's schema" in refused.value.detail


def test_registry_framing_without_a_registry_is_refused() -> None:
    framed = b"\x00\x00\x00\x00\x05" + codec.encode(GOLDEN["PauseRecorded"])[10:]
    with pytest.raises(DecodeError) as refused:
        codec.decode(framed)
    assert refused.value.reason == "unknown_schema_id"
    assert "no schema registry is set" in refused.value.detail


@pytest.mark.parametrize("name", sorted(HISTORY))
def test_a_record_written_with_an_earlier_version_resolves_to_todays(name: str) -> None:
    base, version = name.split(".")
    old = codec.versions_of(base)[int(version.removeprefix("v")) - 1]
    codec.use_registry(Registry({3: _text(old)}))
    framed = b"\x00\x00\x00\x00\x03" + encode_old(name)[10:]
    assert codec.decode(framed) == HISTORY[name][0]


def test_a_turnlog_type_under_a_schema_this_build_never_saw_is_read_by_resolution() -> None:
    newer = codec.schema_for("AnswerRejected")
    newer["fields"].append({"name": "added_later", "type": "string", "default": ""})
    body = codec.encode(GOLDEN["AnswerRejected"])[10:] + b"\x02z"  # the new field written last
    codec.use_registry(Registry({11: _text(newer)}))
    assert codec.decode(b"\x00\x00\x00\x00\x0b" + body) == GOLDEN["AnswerRejected"]


def test_the_history_is_oldest_first_and_ends_with_todays() -> None:
    versions = codec.versions_of("TurnResumed")
    assert len(versions) == 4 and versions[-1] == codec.schema_for("TurnResumed")
    assert [f["name"] for f in versions[0]["fields"]][-1] == "history"
    assert [f["name"] for f in versions[-2]["fields"]][-1] == "answers"
    assert [f["name"] for f in versions[-1]["fields"]][-1] == "sealed"
    paused = codec.versions_of("PauseRecorded")
    assert len(paused) == 2 and paused[-1] == codec.schema_for("PauseRecorded")
    assert codec.versions_of("AnswerRejected") == (codec.schema_for("AnswerRejected"),)


def test_the_worker_direct_writers_frame_as_the_codec_does() -> None:
    _use()
    consumed = GOLDEN["TokenConsumed"]
    meta = {
        "event_id": consumed.event_id,  # type: ignore[union-attr]
        "occurred_at": consumed.occurred_at,  # type: ignore[union-attr]
        "package_version": consumed.package_version,  # type: ignore[union-attr]
    }
    direct = encode_token_consumed(
        meta,
        consumed.token_id,  # type: ignore[union-attr]
        consumed.answer_id,  # type: ignore[union-attr]
        consumed.thread_id,  # type: ignore[union-attr]
        consumed.checkpoint_id,  # type: ignore[union-attr]
        consumed.outcome,  # type: ignore[union-attr]
        "",
        (
            consumed.claim_id,  # type: ignore[union-attr]
            consumed.claimant,  # type: ignore[union-attr]
            consumed.claimed_at_ms,  # type: ignore[union-attr]
            consumed.claim_state,  # type: ignore[union-attr]
        ),
    )
    assert direct == codec.encode(consumed)
    turn = GOLDEN["TurnResumed"]
    assert isinstance(turn, TurnResumed)
    fields = ResumedFields(*(getattr(turn, f) for f in ResumedFields._fields))
    written = encode_turn_resumed(fields, b"", 0, turn.history, turn.answered)
    assert written == codec.encode(turn)
    assert written[:5] == b"\x00" + IDS["TurnResumed"].to_bytes(4, "big")


def test_a_framed_pause_is_skimmed_and_read_with_its_hint_as_a_single_object_one() -> None:
    pause = GOLDEN["PauseRecorded"]
    single = skim_pause(codec.encode(pause))
    _use()
    value = codec.encode(pause)
    framed = skim_pause(value)
    assert framed._replace(value=b"", checkpoint=framed.checkpoint._replace(messages_at=0)) == (
        single._replace(value=b"", checkpoint=single.checkpoint._replace(messages_at=0))
    )
    assert framed.checkpoint.messages_at == single.checkpoint.messages_at - 5
    hinted = read_stored(StoredPause(value, messages_hint(framed.checkpoint)))
    assert hinted == framed
    with pytest.raises(DecodeError) as refused:
        skim_pause(value[:-1])
    assert refused.value.reason == "truncated_body"


def test_the_registry_wire_needs_a_registry_and_its_credentials_are_never_printed() -> None:
    with pytest.raises(SettingError) as refused:
        Settings(wire="registry")
    assert "schema_registry_url" in str(refused.value)
    with pytest.raises(SettingError) as refused:
        Settings(wire="avro")
    assert "single-object, registry" in str(refused.value)
    with pytest.raises(SettingError) as refused:
        Settings.from_env({"TURNLOG_SCHEMA_REGISTRY_URL": "ftp://key:s3cret@registry"})
    assert "s3cret" not in str(refused.value) and "TURNLOG_SCHEMA_REGISTRY_URL" in str(
        refused.value
    )
    ok = Settings.from_env(
        {"TURNLOG_WIRE": "registry", "TURNLOG_SCHEMA_REGISTRY_URL": "https://k:s@sr.example"}
    )
    assert ok.wire == "registry"
