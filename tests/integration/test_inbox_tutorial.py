"""The inbox tutorial (``docs/tutorials/inbox.md``), run as it stands against the real broker.

Three parts, each compared with the page:

- the demo block: ``turnlog inbox --demo`` prints the lines the page shows, then Ctrl-C stops it
  (exit 0); it runs in the foreground, so it is started here rather than in a shell;
- the deployment block: run in one bash in a fresh directory with the test's own topic prefix,
  application id, state and keys, every line compared (the README tour's rules and
  placeholders, plus ``<tag>`` and ``<token>``); the page's port is swapped for a free one;
- the Python block: executed, and its ``serve_inbox`` serves a pause to the hook's viewer.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests import transcripts
from tests.conftest import Names
from tests.deployment import REQUEST, sample_checkpoint
from tests.transcripts import PLACEHOLDERS, Step, environment, steps_of
from turnlog import Settings, Turnlog, write_keypair
from turnlog.projections.projector import CheckpointProjector
from turnlog.projections.store import Store

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "inbox.md"
PORT = "8765"
OURS = {**PLACEHOLDERS, "<tag>": r"[0-9a-f]{6}", "<token>": r"[A-Za-z0-9_-]+\.[A-Za-z0-9_.-]+"}


def matches(expected: str, actual: str) -> bool:
    return transcripts.matches(expected, actual, OURS)


def blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def test_the_page_has_the_three_parts() -> None:
    assert len(blocks("console")) == 2 and len(blocks("python")) == 1
    demo = steps_of(blocks("console")[0])
    assert [s.bare for s in demo] == ["turnlog inbox --demo"]
    assert not matches("log in with this link: <token>", "log in with this link: x")


@pytest.mark.timeout(180)
def test_the_demo_prints_what_the_page_shows(bootstrap: str, names: Names) -> None:
    (step,) = steps_of(blocks("console")[0])
    port = free_port()
    env = environment(bootstrap, names)
    proc = subprocess.Popen(
        [*step.bare.split(), "--port", port],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    printed: list[str] = []
    try:
        for want in step.expected:
            line = proc.stdout.readline().rstrip("\n")
            printed.append(line)
            shown = want.replace(PORT, port)
            assert matches(shown, line), f"{shown!r} != {line!r}\n" + "\n".join(printed)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, rest
        assert rest == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(300)
def test_the_deployment_block_prints_what_the_page_shows(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    port = free_port()
    steps = [
        Step(s.command.replace(PORT, port), [e.replace(PORT, port) for e in s.expected])
        for s in steps_of(blocks("console")[1])
    ]
    transcript = transcripts.run(steps, tmp_path, environment(bootstrap, names), names, bootstrap)
    ran = transcripts.check(steps, transcript, "the inbox tutorial", OURS)
    assert ran >= 12


async def test_the_python_serves_the_hook_s_viewer(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    namespace: dict[str, object] = {}
    exec(compile(blocks("python")[0], str(PAGE), "exec"), namespace)  # the page's own code
    write_keypair(tmp_path / "keys", "k1")
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=names.prefix,
        application_id=names.app,
        state_dir=tmp_path / "state",
        keys_dir=tmp_path / "keys",
        partitions=2,
    )
    async with Turnlog(settings) as tl:
        await tl.pause(sample_checkpoint("tutorial-thread"), request=REQUEST)
        with Store.open(settings.state_dir / "projection") as store:
            async with CheckpointProjector(settings.connection, store, tl.topics) as projector:
                await projector.catch_up()
    stop = asyncio.Event()
    port = int(free_port())
    serving = asyncio.create_task(namespace["serve_inbox"](settings, stop, port))  # type: ignore[operator]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while True:
                try:
                    page = await http.get("/", headers={"Authorization": "Bearer session-of-alice"})
                    break
                except httpx.ConnectError:
                    assert not serving.done(), serving
                    assert loop.time() < deadline, "the inbox never served"
                    await asyncio.sleep(0.1)
            assert page.status_code == 200
            assert "1 waiting" in page.text and "tutorial-thread" in page.text
            stranger = await http.get("/", headers={"Authorization": "Bearer someone-else"})
            assert stranger.status_code == 303
    finally:
        stop.set()
        await serving
