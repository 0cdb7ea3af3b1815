"""The checkpoint driver as processes sharing a state directory need it (issue 28): readiness
opens no store, the first read opens the first store no other process holds, and this
process's own writes are still read back from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.errors import StoreError
from turnlog.projections.service import LazyStoreDriver
from turnlog.projections.store import Store


class Writer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def ensure_ready(self) -> None:
        self.calls.append("ready")

    async def flush(self) -> None:
        self.calls.append("flush")

    async def close(self) -> None:
        self.calls.append("close")


class StoreReads:
    """A store driver over a real Store, as KafkaCheckpointDriver opens it (no Kafka)."""

    def __init__(self, path: Path, *, fail_start: list[bool]) -> None:
        self.path = path
        self.fail_start = fail_start
        self.store: Store | None = None
        self.written: dict[str, tuple[int, int]] = {}

    async def ensure_ready(self) -> None:
        self.store = Store.open(self.path)
        if self.fail_start and self.fail_start.pop(0):
            raise ConnectionError("broker down")

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def wrote(self, thread_id: str, partition: int, offset: int) -> None:
        self.written[thread_id] = (partition, offset)

    async def latest(self, thread_id: str) -> TurnCheckpoint | None:
        return TurnCheckpoint(thread_id=thread_id, checkpoint_id=self.path.name)

    async def list_checkpoints(self, thread_id: str) -> list[TurnCheckpoint]:
        return []


def _driver(
    tmp_path: Path, *, stores: int = 4, fail_start: list[bool] | None = None
) -> tuple[LazyStoreDriver, Writer, list[StoreReads]]:
    writer, made = Writer(), []
    failures = fail_start if fail_start is not None else []

    def reads(path: Path) -> StoreReads:
        made.append(StoreReads(path, fail_start=failures))
        return made[-1]

    return LazyStoreDriver(writer, reads, tmp_path / "checkpoints", stores=stores), writer, made


async def test_readiness_starts_the_writer_and_opens_no_store(tmp_path: Path) -> None:
    driver, writer, made = _driver(tmp_path)
    await driver.ensure_ready()
    await driver.flush()
    assert writer.calls == ["ready", "flush"] and made == []
    assert not (tmp_path / "checkpoints").exists()
    await driver.close()
    assert writer.calls[-1] == "close"


async def test_the_first_read_takes_the_first_free_store_and_keeps_own_writes(
    tmp_path: Path,
) -> None:
    driver, writer, made = _driver(tmp_path)
    driver.wrote("t", 1, 41)  # a pause before any read
    with Store.open(tmp_path / "checkpoints"):  # another reader holds the first
        latest = await driver.latest("t")
        assert latest is not None and latest.checkpoint_id == "checkpoints-2"
        assert driver.store_dir == tmp_path / "checkpoints-2"
        assert made[-1].written == {"t": (1, 41)}
        driver.wrote("t", 1, 42)  # and after it
        assert made[-1].written == {"t": (1, 42)}
        assert made[0].store is None  # the refused try left nothing open
    await driver.close()
    assert made[-1].store is None and writer.calls == ["close"]
    assert driver.store_dir is None


async def test_every_store_held_is_one_error_naming_the_owners(tmp_path: Path) -> None:
    driver, _, _ = _driver(tmp_path, stores=2)
    held = [Store.open(tmp_path / "checkpoints"), Store.open(tmp_path / "checkpoints-2")]
    try:
        with pytest.raises(StoreError, match=r"every checkpoint store .* is open read-write") as e:
            await driver.latest("t")
        assert str(e.value).count("this process") == 2
    finally:
        for store in held:
            store.close()
        await driver.close()


async def test_a_failed_start_is_released_and_retried_by_the_next_read(tmp_path: Path) -> None:
    driver, _, made = _driver(tmp_path, fail_start=[True])
    with pytest.raises(ConnectionError):
        await driver.latest("t")
    assert made[0].store is None
    latest = await driver.latest("t")  # the same first store: it was let go
    assert latest is not None and latest.checkpoint_id == "checkpoints"
    await driver.close()
