"""Every writer writes the framing the settings name from its first record (issue 41): with
``TURNLOG_WIRE=registry``, ``turnlog pause`` wrote ``C3 01`` single-object pauses that a stock
registry deserializer refuses (``Invalid magic byte``), because the recorder encoded the pause
before its first connection registered the schemas and switched the codec -- the CLI records
without starting the recorder first. The publisher's first answer had the same order.

Here the writers run their real code down to the Kafka client, which is a stand-in that keeps
what it was given, and the registry is a stand-in for its REST calls; the integration test
(tests/integration/test_registry_wire.py) does the same against a real broker and registry."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deployment import REQUEST, axes, sample_checkpoint
from turnlog.kafka import clients
from turnlog.kafka import registry as registry_module
from turnlog.kafka.outage import mark_reached
from turnlog.kafka.registry import forget_prepared
from turnlog.producers import pauses as pauses_module
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder
from turnlog.settings import Settings
from turnlog.tokens import Keyring, TokenIssuer
from turnlog.tokens.keyfiles import write_keypair
from turnlog.wire import codec

URL = "http://registry.invalid:8081"


class FakeRegistry:
    """The REST calls ``prepare_wire`` makes, answered as a registry would: one id per
    (subject, schema text), every subject without a compatibility level yet."""

    ids: dict[tuple[str, str], int] = {}

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url

    def check(self) -> None:
        pass

    def compatibility(self, subject: str) -> str | None:
        return None

    def set_compatibility(self, subject: str, level: str) -> None:
        pass

    def register(self, subject: str, text: str) -> int:
        return self.ids.setdefault((subject, text), 1000 + len(self.ids))

    def schema_text(self, schema_id: int) -> str | None:
        return next((t for (_, t), i in self.ids.items() if i == schema_id), None)


@dataclass
class Sent:
    topic: str
    value: bytes


class FakeProducer:
    """Enough of aiokafka's producer for the writers: what was sent, in order."""

    def __init__(self, sent: list[Sent]) -> None:
        self.sent = sent

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def flush(self) -> None:
        pass

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2}

    async def begin_transaction(self) -> None:
        pass

    async def commit_transaction(self) -> None:
        pass

    async def send(self, topic: str, value: bytes, **kw: Any) -> asyncio.Future[Any]:
        self.sent.append(Sent(topic, value))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(type("Metadata", (), {"offset": len(self.sent) - 1})())
        return done

    async def send_and_wait(self, topic: str, value: bytes, **kw: Any) -> Any:
        return await (await self.send(topic, value, **kw))


class FakeAdmin:
    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Sent]]:
    records: list[Sent] = []
    monkeypatch.setattr(registry_module, "RegistryClient", FakeRegistry)
    monkeypatch.setattr(clients, "producer", lambda *a, **kw: FakeProducer(records))
    monkeypatch.setattr(pauses_module, "admin_client", lambda *a, **kw: FakeAdmin())

    async def no_topics(*args: Any, **kw: Any) -> None:
        return None

    monkeypatch.setattr(pauses_module, "ensure_topics", no_topics)
    forget_prepared()
    yield records
    forget_prepared()


def _settings(tmp_path: Path) -> Settings:
    settings = Settings(wire="registry", schema_registry_url=URL, keys_dir=tmp_path / "keys")
    mark_reached(settings.bootstrap_servers)  # no first-contact probe of a broker
    return settings


def _registry_framed(value: bytes, name: str, topic: str) -> bool:
    subject = registry_module.subject_name(topic, name)
    ids = [i for (s, _), i in FakeRegistry.ids.items() if s == subject]
    return value[:1] == b"\x00" and int.from_bytes(value[1:5], "big") in ids


async def test_the_recorders_first_pause_is_registry_framed(
    sent: list[Sent], tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    write_keypair(settings.keys_dir, "k1")
    issuer = TokenIssuer(Keyring.from_directory(settings.keys_dir), issuer=settings.issuer,
                         audience=settings.audience)  # fmt: skip
    recorder = PauseRecorder(settings, issuer)
    # As `turnlog pause` does: the checks first (no I/O), then the write; no start before.
    recorder.prepare(sample_checkpoint("thread-1"), request_json=REQUEST)
    recorded = await recorder.record(sample_checkpoint("thread-1"), request_json=REQUEST)
    await recorder.close()
    ((pause,),) = [[s for s in sent if s.topic == recorder.topics.pauses]]
    assert pause.value[:2] != b"\xc3\x01", "a single-object pause under TURNLOG_WIRE=registry"
    assert _registry_framed(pause.value, "PauseRecorded", recorder.topics.pauses)
    assert codec.decode(pause.value) == recorded.pause


async def test_the_publishers_first_answer_is_registry_framed(
    sent: list[Sent], tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    publisher = AnswerPublisher(settings, None)
    answer = publisher.build(
        "not.a.token", {"answers": [{"selections": ["eu"], "other": None}]},
        **axes(sample_checkpoint("thread-1")), answer_id="a-1",
    )  # fmt: skip
    await publisher.publish_unchecked(answer)
    await publisher.stop()
    (record,) = sent
    assert _registry_framed(record.value, "AnswerSubmitted", publisher.topics.answers)
