"""The schema registry wire against a real registry and the real broker: turnlog writes
registry-framed records, a stock registry-aware deserializer (confluent-kafka's
``AvroDeserializer``) reads them with the values the worker wrote, a single-object pause written
before the switch is resumed after it, and the refusals a registry can cause are one line at
start or an undecodable answer, never a stopped worker."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.registry_support import REPO, _single_object_after, schema_registry
from tests.integration.test_api import api_settings
from tests.kafka_helpers import eventually, read_to_end
from turnlog import RefusalReason, Turnlog, TurnResumed
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approve
from turnlog.contracts.events import AnswerRejected, PauseRecorded, TokenConsumed
from turnlog.contracts.group import CallToPause
from turnlog.errors import SchemaRegistryRefused
from turnlog.kafka import clients
from turnlog.kafka.registry import prepare_wire, subject_name
from turnlog.wire import codec

__all__ = ["_single_object_after", "schema_registry"]


def _snippet() -> ModuleType:
    path = REPO / "docs" / "snippets" / "registry_read_resumed.py"
    spec = importlib.util.spec_from_file_location("registry_read_resumed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Stock:
    """confluent-kafka's registry client and ``AvroDeserializer``, set up and used as the
    any-client page's reader does (its ``read`` is the one called)."""

    def __init__(self, url: str) -> None:
        self.client = SchemaRegistryClient({"url": url})
        self.deserializer = AvroDeserializer(self.client)
        self.read = _snippet().read

    def __call__(self, topic: str, value: bytes) -> Any:
        found = self.read(self.deserializer, topic, value)
        assert found is not None, "the reader took a registry record for a single-object one"
        return found

    def close(self) -> None:
        self.client.__exit__()


def _rest(url: str, method: str, path: str, body: Any = None) -> Any:
    """One call of the registry's REST API, as an operator would make it."""
    request = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)


async def _values(bootstrap: str, topic: str) -> list[bytes]:
    return [r.value for r in await read_to_end(bootstrap, topic) if r.value is not None]


def _read_back(
    stock: _Stock, topics: Any, pauses: list[bytes], resumed: list[bytes], rejections: list[bytes]
) -> None:
    """What the stock deserializer reads is what turnlog's decoder reads, field for field."""
    assert sorted(v[:1] for v in pauses) == [b"\x00", b"\xc3"]  # one of each framing
    single = next(v for v in pauses if v[:1] == b"\xc3")
    assert stock.read(stock.deserializer, topics.pauses, single) is None  # skipped, not misread
    framed = next(v for v in pauses if v[:1] == b"\x00")
    pause = codec.decode(framed, PauseRecorded)
    read = stock(topics.pauses, framed)
    assert read["token_id"] == pause.token_id
    assert read["expires_at"] == pause.expires_at
    assert read["request_json"] == pause.request_json
    assert read["checkpoint"]["thread_id"] == pause.checkpoint.thread_id == "new-thread"
    assert [m["content"] for m in read["checkpoint"]["messages"]] == [
        m["content"] for m in pause.checkpoint.messages
    ]

    assert len(resumed) == 2 and all(v[:1] == b"\x00" for v in resumed)
    for value in resumed:
        turn = codec.decode(value, TurnResumed)
        read = stock(topics.resumed, value)
        for field in ("event_id", "token_id", "answer_id", "thread_id", "occurred_at"):
            assert read[field] == getattr(turn, field)
        assert read["response_json"] == turn.response_json
        assert [m["content"] for m in read["history"]] == [m["content"] for m in turn.history]

    assert len(rejections) == 1 and rejections[0][:1] == b"\x00"
    rejected = codec.decode(rejections[0], AnswerRejected)
    read = stock(topics.rejections, rejections[0])
    for field in ("event_id", "answer_id", "reason", "detail", "occurred_at"):
        assert read[field] == getattr(rejected, field)
    assert read["reason"] == RefusalReason.ALREADY_CONSUMED.value


async def test_registry_records_read_by_a_stock_deserializer_and_an_old_pause_still_resumes(
    bootstrap: str, names: Names, tmp_path: Path, schema_registry: str
) -> None:
    plain = api_settings(bootstrap, names, tmp_path)
    # Before the switch: a pause written single-object.
    async with Turnlog(plain) as before:
        old = await before.pause(sample_checkpoint("old-thread"), request=REQUEST)

    settings = plain.with_(wire="registry", schema_registry_url=schema_registry)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        new = await tl.pause(sample_checkpoint("new-thread"), request=REQUEST)
        sent = await tl.answer(new.token, ANSWER, **new.axes)
        outcome = await tl.outcome(sent.answer_id, timeout=45)
        assert outcome.accepted and isinstance(outcome.resumed, TurnResumed)
        # The pause written before the switch, answered and resumed after it.
        sent_old = await tl.answer(old.token, ANSWER, **old.axes)
        outcome_old = await tl.outcome(sent_old.answer_id, timeout=45)
        assert outcome_old.accepted and isinstance(outcome_old.resumed, TurnResumed)
        again = await tl.answer(new.token, ANSWER, **new.axes)
        late = await tl.outcome(again.answer_id, timeout=45)
        assert not late.accepted and late.reason == RefusalReason.ALREADY_CONSUMED.value
        assert not worker.done()

    topics = tl.topics
    pauses = await _values(bootstrap, topics.pauses)
    resumed = await _values(bootstrap, topics.resumed)
    rejections = await _values(bootstrap, topics.rejections)
    stock = _Stock(schema_registry)
    try:
        _read_back(stock, topics, pauses, resumed, rejections)
    finally:
        stock.close()
    assert {new.token_id, old.token_id} == {codec.decode(v, TurnResumed).token_id for v in resumed}
    turns = {codec.decode(v, TurnResumed).token_id: codec.decode(v, TurnResumed) for v in resumed}
    assert turns[new.token_id].answer_id == sent.answer_id
    assert turns[old.token_id].answer_id == sent_old.answer_id
    assert turns[old.token_id].thread_id == "old-thread"
    assert codec.decode(rejections[0], AnswerRejected).answer_id == again.answer_id

    # The CLI's readers, in a process of their own that never wrote: either framing decodes.
    env = cli_env(bootstrap, names.prefix, names.app, tmp_path)
    cli = Cli({**env, "TURNLOG_PARTITIONS": "2", "TURNLOG_SCHEMA_REGISTRY_URL": schema_registry})
    ran = cli("tail", "resumed", "--from-beginning", "--max", "2", "--idle", "20", "--json")
    tailed = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    assert {t["token_id"] for t in tailed} == {new.token_id, old.token_id}
    refused = cli("tail", "rejections", "--from-beginning", "--max", "1", "--idle", "20", "--json")
    assert json.loads(refused.stdout)["answer_id"] == again.answer_id

    # Each record type's subject holds its history under BACKWARD.
    for topic, name, versions in (
        (topics.resumed, "TurnResumed", 4),  # v4: sealed
        (topics.answers, "AnswerSubmitted", 2),
        (topics.pauses, "PauseRecorded", 2),
        (topics.consumptions, "TokenConsumed", 3),  # v3: the continuation claim
    ):
        subject = subject_name(topic, name)
        assert len(_rest(schema_registry, "GET", f"/subjects/{subject}/versions")) == versions
        assert _rest(schema_registry, "GET", f"/config/{subject}") == {
            "compatibilityLevel": "BACKWARD"
        }


async def test_a_pause_of_several_calls_reads_back_through_the_stock_deserializer(
    bootstrap: str, names: Names, tmp_path: Path, schema_registry: str
) -> None:
    """The current versions' new fields on the registry wire: PauseRecorded v2's ``group``,
    TokenConsumed v2's held answer and TurnResumed v3's ``answers``, as the worker wrote them
    (its direct writers for the consumption and the resumed turn), read by the stock reader."""
    settings = api_settings(bootstrap, names, tmp_path).with_(
        wire="registry", schema_registry_url=schema_registry
    )
    approval = approval_request("search", {"q": 2})
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        question, search = await tl.pause_calls(
            sample_checkpoint("group-thread"),
            [CallToPause("call-2", APPROVE_TOOL_CALL, json.dumps(approval)), CallToPause("call-1")],
        )
        held = await tl.answer(search.token, approve("search", {"q": 2}), **search.axes)
        last = await tl.answer(question.token, ANSWER, **question.axes)
        outcome = await tl.outcome(last.answer_id, timeout=45)
        assert outcome.accepted and isinstance(outcome.resumed, TurnResumed)
        assert not worker.done()

    topics = tl.topics
    [framed_pause] = await _values(bootstrap, topics.pauses)
    resumed = await _values(bootstrap, topics.resumed)
    consumed = await _values(bootstrap, topics.consumptions)
    assert all(v[:1] == b"\x00" for v in [framed_pause, *resumed, *consumed])
    stock = _Stock(schema_registry)
    try:
        pause = codec.decode(framed_pause, PauseRecorded)
        read = stock(topics.pauses, framed_pause)
        assert [c["tool_call_id"] for c in read["group"]] == ["call-1", "call-2"]
        assert read["group"] == list(pause.group)
        assert {question.token_id, search.token_id} == {c["token_id"] for c in read["group"]}

        [value] = resumed
        turn = codec.decode(value, TurnResumed)
        read = stock(topics.resumed, value)
        # In the order of the calls: call-1's answer (the question) before call-2's (held).
        assert [a["answer_id"] for a in read["answers"]] == [last.answer_id, held.answer_id]
        assert read["answers"] == list(turn.answers)
        assert json.loads(read["answers"][1]["response_json"]) == approve("search", {"q": 2})
        assert read["response_json"] == turn.response_json

        outcomes = {stock(topics.consumptions, v)["answer_id"]: v for v in consumed}
        held_read = stock(topics.consumptions, outcomes[held.answer_id])
        held_own = codec.decode(outcomes[held.answer_id], TokenConsumed)
        assert held_read["outcome"] == held_own.outcome == "held"
        assert json.loads(held_read["response_json"]) == approve("search", {"q": 2})
    finally:
        stock.close()


async def test_an_answer_with_a_schema_id_the_registry_lacks_is_refused_as_undecodable(
    bootstrap: str, names: Names, tmp_path: Path, schema_registry: str
) -> None:
    settings = api_settings(bootstrap, names, tmp_path).with_(
        wire="registry", schema_registry_url=schema_registry
    )
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await tl.pause(sample_checkpoint("id-thread"), request=REQUEST)
        producer = clients.producer(bootstrap)
        await producer.start()
        try:
            unknown = b"\x00" + (2**31 - 7).to_bytes(4, "big") + b"\x02ab"
            await producer.send_and_wait(tl.topics.answers, unknown, key=b"id-thread")
        finally:
            await producer.stop()

        async def refused() -> list[AnswerRejected]:
            values = await _values(bootstrap, tl.topics.rejections)
            return [codec.decode(v, AnswerRejected) for v in values]

        found = await eventually(refused, timeout=45)
        assert found[0].reason == RefusalReason.ANSWER_UNDECODABLE.value
        assert found[0].detail.startswith("unknown_schema_id: ")
        assert str(2**31 - 7) in found[0].detail
        # The worker goes on: the pause is still answered and resumed.
        sent = await tl.answer(paused.token, ANSWER, **paused.axes)
        outcome = await tl.outcome(sent.answer_id, timeout=45)
        assert outcome.accepted
        assert not worker.done()


async def test_an_incompatible_subject_or_no_registry_is_one_line_at_start(
    bootstrap: str, names: Names, tmp_path: Path, schema_registry: str
) -> None:
    settings = api_settings(bootstrap, names, tmp_path).with_(
        wire="registry", schema_registry_url=schema_registry
    )
    # A subject that already holds a TurnResumed no version of turnlog's reads (BACKWARD:
    # the new schema must read the old records, and this one's field has no default).
    subject = subject_name(f"{names.prefix}resumed", "TurnResumed")
    other = {
        "type": "record",
        "name": "dev.turnlog.TurnResumed",
        "fields": [{"name": "someone_elses", "type": "string"}],
    }
    _rest(schema_registry, "PUT", f"/config/{subject}", {"compatibility": "BACKWARD"})
    _rest(schema_registry, "POST", f"/subjects/{subject}/versions", {"schema": json.dumps(other)})

    with pytest.raises(SchemaRegistryRefused) as refused:
        await prepare_wire(settings)
    assert refused.value.reason == "incompatible"
    assert subject in str(refused.value) and "\n" not in str(refused.value)

    # Nothing listens there: refused at once, by name, not waited on as an outage.
    away = settings.with_(schema_registry_url="http://127.0.0.1:9/apis/ccompat/v7")
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(SchemaRegistryRefused) as unreachable:
        async with Turnlog(away) as tl:
            await tl.pause(sample_checkpoint("no-registry"), request=REQUEST)
    assert unreachable.value.reason == "unreachable"
    assert "127.0.0.1:9" in str(unreachable.value) and "\n" not in str(unreachable.value)
    assert loop.time() - began < settings.connect_timeout_seconds
