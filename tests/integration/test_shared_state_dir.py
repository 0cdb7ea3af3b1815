"""Several processes on one machine with one set of settings (issue 28): one
``TURNLOG_STATE_DIR``, one keys dir, one bootstrap -- one container running several web workers.

Pausing and answering are writing records, so any number of agent processes pause, read their
checkpoints, answer and wait for outcomes side by side. What does hold a store read-write --
a resume worker -- is refused beside another one on the same directory, in one line that names
the process holding it; and the quick start's in-process worker that cannot start says so
instead of dying unseen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.cli_support import EXIT_FAILURE, Cli, Spawned, cli_env
from tests.integration.worker_support import KID
from tests.kafka_helpers import eventually
from turnlog import Settings, Turnlog, write_keypair
from turnlog.errors import StoreError
from turnlog.kafka.topics import TopicSet, admin_client, ensure_topics

REPO = Path(__file__).resolve().parents[2]
AGENTS = 3


def shared_env(bootstrap: str, names: Names, root: Path) -> dict[str, str]:
    """The one set of settings every process of the deployment is started with."""
    write_keypair(root / "keys", KID)
    return {**cli_env(bootstrap, names.prefix, names.app, root), "PYTHONPATH": str(REPO)}


def settings_of(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


async def _create_topics(settings: Settings) -> None:
    admin = admin_client(settings)
    await admin.start()
    try:
        await ensure_topics(admin, TopicSet.from_settings(settings))
    finally:
        await admin.close()


class Agent:
    """One agent process and the JSON lines it printed."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path, go: Path) -> None:
        self.proc, self.log, self.go = proc, log, go

    async def line(self, event: str, timeout: float = 120) -> dict[str, Any]:
        if self.proc.stdout is None:
            raise AssertionError("no stdout")
        try:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {event!r} line in {timeout:.0f}s\n{self.tail()}") from None
        if not raw:
            code = await self.proc.wait()
            raise AssertionError(f"agent exited {code} before {event!r}:\n{self.tail()}")
        found: dict[str, Any] = json.loads(raw)
        assert found["event"] == event, (found, self.tail())
        return found

    def tell(self, task: dict[str, Any]) -> None:
        partial = self.go.with_suffix(".partial")
        partial.write_text(json.dumps(task))
        partial.rename(self.go)  # whole or absent: the agent polls for the name

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


async def _spawn_agent(env: dict[str, str], thread: str, root: Path) -> Agent:
    log = root / f"{thread}.log"
    go = root / f"{thread}.go.json"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.agent_proc",
            "--thread",
            thread,
            "--go",
            str(go),
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    return Agent(proc, log, go)


async def test_agent_processes_on_one_state_dir_all_pause_answer_and_resume(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    env = shared_env(bootstrap, names, tmp_path)
    settings = settings_of(env)
    await _create_topics(settings)
    threads = [f"shared-{i}" for i in range(AGENTS)]
    agents = [await _spawn_agent(env, thread, tmp_path) for thread in threads]
    try:
        # Every agent paused and read its checkpoint back, all of them open at once.
        paused = [await agent.line("paused") for agent in agents]
        assert [p["thread"] for p in paused] == threads
        assert [p["latest"] for p in paused] == ["cp-1"] * AGENTS
        assert all(agent.proc.returncode is None for agent in agents)

        # A worker on the same settings -- the same state directory -- resumes them all; each
        # agent answers the next one's pause (any process may answer any token).
        async with Turnlog(settings) as tl:
            worker = asyncio.create_task(tl.run_worker())
            for i, agent in enumerate(agents):
                other = paused[(i + 1) % AGENTS]
                agent.tell(
                    {"thread": other["thread"], "token": other["token"], "axes": other["axes"]}
                )
            answered = [await agent.line("answered") for agent in agents]
            codes = [await asyncio.wait_for(agent.proc.wait(), 60) for agent in agents]
            assert not worker.done(), worker
        assert codes == [0] * AGENTS, [agent.tail() for agent in agents]
        assert [a["accepted"] for a in answered] == [True] * AGENTS, answered
        assert sorted(a["resumed_thread"] for a in answered) == threads
        # Each reading process projected into a checkpoint store of its own; only the worker
        # used `worker/`, and nobody's `pause` needed any of them.
        stores = sorted(p.name for p in settings.state_dir.iterdir())
        assert stores == ["checkpoints", "checkpoints-2", "checkpoints-3", "worker"]
    finally:
        for agent in agents:
            if agent.proc.returncode is None:
                agent.proc.kill()
                await agent.proc.wait()


@pytest.fixture
def running_worker(bootstrap: str, names: Names, tmp_path: Path) -> Any:
    """``turnlog worker`` on the shared settings, holding ``<state>/worker`` read-write."""
    env = shared_env(bootstrap, names, tmp_path)
    Cli(env)("topics", "ensure")
    first = Spawned(Cli(env), "worker")
    try:
        first.wait_for_line("Ctrl-C stops")  # printed once its store is open
        yield env, first
    finally:
        first.proc.terminate()
        first.finish(timeout=60)


def test_a_second_worker_on_one_state_dir_is_one_line_naming_the_owner(
    running_worker: tuple[dict[str, str], Spawned],
) -> None:
    env, first = running_worker
    second = Cli(env)("worker", check=EXIT_FAILURE, timeout=60)
    assert len(second.lines) == 1, second.stderr
    line = second.lines[0]
    assert line.startswith("error: StoreLocked: ")  # a StoreError
    assert str(Path(env["TURNLOG_STATE_DIR"]) / "worker") in line
    assert f"by pid {first.proc.pid} on " in line and "(turnlog worker)" in line, line
    assert first.proc.poll() is None  # the owner keeps running, untouched


async def test_the_quick_start_worker_that_cannot_start_is_reported(
    running_worker: tuple[dict[str, str], Spawned], caplog: pytest.LogCaptureFixture
) -> None:
    env, first = running_worker
    settings = settings_of(env)
    with caplog.at_level(logging.ERROR, logger="turnlog"):
        async with Turnlog(settings) as tl:
            worker = asyncio.create_task(tl.run_worker())  # as README's quick start does
            paused = await tl.pause(sample_checkpoint("qs-beside"), request=REQUEST)

            async def died() -> bool:
                return worker.done()

            await eventually(died, timeout=30, interval=0.02)
            # The next call says why this object's worker is gone, naming the owner...
            with pytest.raises(
                StoreError, match=f"already open read-write by pid {first.proc.pid} "
            ):
                await tl.answer(paused.token, ANSWER, **paused.axes)
            # ...once: the object goes on working (the `turnlog worker` beside it resumes).
            sent = await tl.answer(paused.token, ANSWER, **paused.axes)
            assert (await tl.outcome(sent.answer_id, timeout=60)).accepted
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert f"pid {first.proc.pid} " in errors[0].getMessage()
    assert isinstance(worker.exception(), StoreError)


async def test_a_failed_worker_nobody_called_after_is_raised_by_close(
    running_worker: tuple[dict[str, str], Spawned],
) -> None:
    env, first = running_worker
    tl = Turnlog(settings_of(env))
    worker = asyncio.create_task(tl.run_worker())

    async def died() -> bool:
        return worker.done()

    await eventually(died, timeout=30, interval=0.02)
    with pytest.raises(StoreError, match=f"pid {first.proc.pid} "):
        await tl.close()
    await tl.close()  # reported once; closing again is quiet
    assert isinstance(worker.exception(), StoreError)
