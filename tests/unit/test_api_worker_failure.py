"""A ``Turnlog`` worker that cannot start (its store is held) is never a silent death: one ERROR
line, the error to whoever awaits it, and -- for a task nothing awaits, as in the quick start --
the error again from the object's next call or its close, once. No broker is needed: the store
is refused before any Kafka client starts."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from turnlog import Refused, Settings, Turnlog, write_keypair
from turnlog.projections.store import Store, StoreLocked

ANSWER = {"answers": [{"selections": ["eu"], "other": None}]}
AXES = {"scope_hash": "s", "session_id": "s", "run_id": "r", "call_id": "c"}


def _settings(root: Path) -> Settings:
    write_keypair(root / "keys", "unit")
    return Settings(
        bootstrap_servers="127.0.0.1:1",  # never contacted
        state_dir=root / "state",
        keys_dir=root / "keys",
    )


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_worker_task_nothing_awaits_is_raised_by_the_next_call_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    with Store.open(settings.state_dir / "worker"), caplog.at_level(logging.ERROR):
        tl = Turnlog(settings)
        task = asyncio.create_task(tl.run_worker())
        await asyncio.wait([task], timeout=30)
        assert task.done()
        with pytest.raises(StoreLocked, match=rf"this process \(pid {os.getpid()}\)"):
            await tl.answer("not-a-token", ANSWER, **AXES)  # the worker's error comes first
        with pytest.raises(Refused):  # once: the object goes on with its own work
            await tl.answer("not-a-token", ANSWER, **AXES)
        await tl.close()  # already reported: quiet
    assert isinstance(task.exception(), StoreLocked)
    assert len(_errors(caplog)) == 1 and "resume worker" in _errors(caplog)[0]


async def test_a_worker_awaited_inline_raises_to_its_caller_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    with Store.open(settings.state_dir / "worker"), caplog.at_level(logging.ERROR):
        async with Turnlog(settings) as tl:
            with pytest.raises(StoreLocked):
                await tl.run_worker()
            with pytest.raises(Refused):  # the caller has it already: not raised again
                await tl.answer("not-a-token", ANSWER, **AXES)
    assert len(_errors(caplog)) == 1


async def test_a_block_leaving_with_its_own_error_keeps_it(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with Store.open(settings.state_dir / "worker"):
        with pytest.raises(KeyError, match="the block's own"):
            async with Turnlog(settings) as tl:
                task = asyncio.create_task(tl.run_worker())
                await asyncio.wait([task], timeout=30)
                raise KeyError("the block's own")
        assert isinstance(task.exception(), StoreLocked)


async def test_a_worker_task_is_raised_by_close_when_no_call_came(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with Store.open(settings.state_dir / "worker"):
        tl = Turnlog(settings)
        task = asyncio.create_task(tl.run_worker())
        await asyncio.wait([task], timeout=30)
        with pytest.raises(StoreLocked):
            await tl.close()
        await tl.close()
    assert isinstance(task.exception(), StoreLocked)


@pytest.mark.parametrize("standby", [-1, 9, True, 1.5, "1"])
async def test_a_standby_count_out_of_range_is_refused_before_anything_starts(
    tmp_path: Path, standby: object
) -> None:
    async with Turnlog(_settings(tmp_path)) as tl:
        with pytest.raises(ValueError, match="standby must be a whole number 0-8"):
            await tl.run_worker(standby=standby)  # type: ignore[arg-type]
        assert not (tmp_path / "state" / "worker").exists()  # no store opened
