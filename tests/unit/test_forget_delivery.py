"""``forget`` fails loudly when a tombstone is not delivered, instead of dropping the futures."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from turnlog.errors import DeliveryFailed
from turnlog.kafka import clients
from turnlog.kafka.topics import TopicSet
from turnlog.producers import forget as forget_module
from turnlog.producers.forget import forget_thread
from turnlog.settings import Settings

SETTINGS = Settings(bootstrap_servers="127.0.0.1:1", topic_prefix="f.", state_dir=Path("unused"))
TOPICS = TopicSet.from_settings(SETTINGS)
KEYS = {
    TOPICS.pauses: {b"t\x00cp-1", b"t\x00cp-2"},
    TOPICS.answers: {b"t\x00a-1"},
    TOPICS.consumptions: {b"t\x00tok-1"},
}


class FakeProducer:
    made: list[FakeProducer] = []
    failing: dict[str, BaseException] = {}
    raising: dict[str, BaseException] = {}

    def __init__(self, **kwargs: Any) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.stopped = False
        type(self).made.append(self)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def flush(self) -> None:
        pass

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2}

    async def send(self, topic: str, value: None, *, key: bytes, partition: int) -> Any:
        assert value is None
        if topic in self.raising:
            raise self.raising[topic]
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if topic in self.failing:
            future.set_exception(self.failing[topic])
        else:
            self.sent.append((topic, key))
            future.set_result(object())
        return future


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeProducer]:
    class Fake(FakeProducer):
        made: list[FakeProducer] = []
        failing: dict[str, BaseException] = {}
        raising: dict[str, BaseException] = {}

    async def thread_keys(settings: Settings, topics: TopicSet, thread: str) -> Any:
        return {topic: set(keys) for topic, keys in KEYS.items()}

    monkeypatch.setattr(clients, "AIOKafkaProducer", Fake)

    async def no_notifier(settings: Settings, thread: str) -> None:
        return None  # no notifier ran: no topic of undelivered notices

    monkeypatch.setattr(forget_module, "thread_keys", thread_keys)
    monkeypatch.setattr(forget_module.undelivered, "of_thread", no_notifier)
    return Fake


async def test_every_tombstone_delivered_is_counted(fake: type[FakeProducer]) -> None:
    counts = await forget_thread(SETTINGS, TOPICS, "t")
    assert counts == {TOPICS.pauses: 2, TOPICS.answers: 1, TOPICS.consumptions: 1}
    assert len(fake.made[0].sent) == 4 and fake.made[0].stopped


async def test_an_undelivered_tombstone_fails_naming_how_many(fake: type[FakeProducer]) -> None:
    fake.failing = {TOPICS.pauses: MessageSizeTooLargeError()}
    with pytest.raises(DeliveryFailed) as failed:
        await forget_thread(SETTINGS, TOPICS, "t")
    assert failed.value.failed == 2 and failed.value.total == 4
    assert str(failed.value).startswith("2 of 4 tombstones")
    assert "MessageSizeTooLargeError" in str(failed.value)
    assert fake.made[0].stopped
    assert {topic for topic, _ in fake.made[0].sent} == {TOPICS.answers, TOPICS.consumptions}


async def test_a_send_that_raises_counts_as_undelivered_and_the_rest_are_still_sent(
    fake: type[FakeProducer],
) -> None:
    fake.raising = {TOPICS.answers: KafkaTimeoutError()}
    with pytest.raises(DeliveryFailed) as failed:
        await forget_thread(SETTINGS, TOPICS, "t")
    assert (failed.value.failed, failed.value.total) == (1, 4)
    assert len(fake.made[0].sent) == 3
