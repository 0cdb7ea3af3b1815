"""A broker that was never reached is not an outage (issue 27): the CLI and the library.

Before, ``turnlog status`` (and ``pause``, ``answer``, ``topics``, ``worker``, ``project``, and
the library's first call) pointed at a closed port or a name that does not resolve said nothing
for the whole five-minute outage budget. Now the first-contact budget
(``TURNLOG_CONNECT_TIMEOUT``, 3 s here) ends it: exit 4 with one error line naming the address,
what a plain connection found and a hint that fits the address; the library raises
``BrokerUnavailable`` (``never_reached``). Every run here has the outage budget at 300 s, so a
verb that still waited it out fails on its subprocess timeout, never by a sleep.

A service is the exception (issue 39): ``worker`` and ``project``, and the library's
``run_worker``, are started by a supervisor, possibly while their broker is down, and wait a
never-reached address out under the outage budget (``TURNLOG_BROKER_TIMEOUT``, 6 s in their
tests here), saying so in their line.

A malformed address is refused before anything is tried (exit 2, naming the setting), and
aiokafka's own lines stay off a person's terminal unless ``--log-level debug`` asks for them.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import pty
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import free_ports
from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, axes, sample_checkpoint
from tests.integration.cli_support import EXIT_BROKER, EXIT_USAGE, Cli, Ran, cli_env, local_token
from turnlog import Turnlog
from turnlog.errors import BrokerUnavailable
from turnlog.settings import Settings
from turnlog.tokens import write_keypair

CONNECT_TIMEOUT = 3.0
OUTAGE_BUDGET = "300"
#: Process start, the last attempt just past the budget, a loaded 2-core machine: far below the
#: 300 s outage budget a verb would wait if it took the address for a broker in an outage.
BOUND = CONNECT_TIMEOUT + 17.0
#: A service's budget in its tests: the outage one, longer than the connect one it no longer has.
SERVICE_BUDGET = 6.0
SERVICE_BOUND = SERVICE_BUDGET + 17.0
UNRESOLVABLE = "no-such-host.invalid:9092"


def closed_address() -> str:
    """``127.0.0.1:<port>`` below the ephemeral range where a connection is refused now."""
    port = free_ports(1)
    with socket.socket() as probe:
        probe.settimeout(2)
        assert probe.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED
    return f"127.0.0.1:{port}"


def _address(kind: str) -> str:
    if kind == "closed-port":
        return closed_address()
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(UNRESOLVABLE.rsplit(":", 1)[0], 9092)
    return UNRESOLVABLE


@pytest.fixture(params=["closed-port", "unresolvable"])
def address(request: pytest.FixtureRequest) -> str:
    return _address(str(request.param))


@pytest.fixture
def offline(address: str, names: Names, tmp_path: Path) -> Cli:
    write_keypair(tmp_path / "keys", "k1")
    env = cli_env(address, names.prefix, names.app, tmp_path)
    env.update(TURNLOG_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT), TURNLOG_BROKER_TIMEOUT=OUTAGE_BUDGET)
    return Cli(env)


def _verb(name: str, tmp_path: Path) -> tuple[str, ...]:
    if name == "pause":
        checkpoint = tmp_path / "checkpoint.json"
        checkpoint.write_text(sample_checkpoint("first-contact").encode())
        return ("pause", str(checkpoint), "--request", REQUEST)
    if name == "answer":
        token, stated = local_token(tmp_path / "keys", "first-contact")
        return ("answer", token, "--response", json.dumps(ANSWER), *stated)
    if name == "topics":
        return ("topics", "ensure")
    return (name,)


def _check_gave_up(ran: Ran, address: str, *, long_running: bool) -> str:
    """The one error line, after the first-contact budget and well before the outage one (a
    service's: after its outage budget, :data:`SERVICE_BUDGET`)."""
    budget, bound, setting = (
        (SERVICE_BUDGET, SERVICE_BOUND, "TURNLOG_BROKER_TIMEOUT")
        if long_running
        else (CONNECT_TIMEOUT, BOUND, "TURNLOG_CONNECT_TIMEOUT")
    )
    assert ran.returncode == EXIT_BROKER, (ran.args, ran.returncode, ran.stderr)
    assert budget <= ran.seconds < bound, (ran.args, ran.seconds)
    assert "Traceback" not in ran.stderr and "aiokafka" not in ran.stderr, ran.stderr
    errors = [line for line in ran.lines if line.startswith("error:")]
    assert len(errors) == 1 and ran.lines[-1] == errors[0], ran.lines
    error = errors[0]
    assert error.startswith(f"error: Kafka at {address} is not reachable:"), error
    assert f"never reached in {budget:.0f}s ({setting}={budget:g})" in error, error
    if address == UNRESOLVABLE:
        assert f"{address}: the name does not resolve" in error, error
        assert "check the address" in error and "turnlog broker up" not in error, error
    else:
        assert f"{address}: connection refused" in error, error
        assert error.endswith("start one with `turnlog broker up`"), error
    others = ran.lines[:-1]
    if not long_running:
        assert others == [], others  # a one-shot verb's failure is one line
    else:
        # A long-running verb shows the line a component logs when the broker is away (and the
        # projector its start line); nothing else.
        notices = [line for line in others if "never reached yet" in line]
        assert len(notices) == 1 and address in notices[0], others
        assert f"up to {budget:g}s ({setting})" in notices[0], notices
        assert "waits it out as an outage, not ready meanwhile" in notices[0], notices
        assert all("never reached yet" in line or line.startswith("projecting") for line in others)
    return error


@pytest.mark.parametrize("verb", ["status", "pause", "answer", "topics"])
def test_a_never_reached_address_is_exit_4_with_one_line_in_the_connect_budget(
    offline: Cli, address: str, tmp_path: Path, verb: str
) -> None:
    ran = offline(*_verb(verb, tmp_path), check=None, timeout=BOUND + 30)
    _check_gave_up(ran, address, long_running=False)


@pytest.mark.parametrize("verb", ["worker", "project"])
def test_a_service_waits_a_never_reached_address_out_for_the_outage_budget(
    offline: Cli, address: str, tmp_path: Path, verb: str
) -> None:
    service = offline.with_env(TURNLOG_BROKER_TIMEOUT=f"{SERVICE_BUDGET:g}")
    ran = service(*_verb(verb, tmp_path), check=None, timeout=SERVICE_BOUND + 30)
    _check_gave_up(ran, address, long_running=True)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("http://127.0.0.1:9092", "has a scheme"),
        ("127.0.0.1", "has no port"),
        ("localhost:", "has no port"),
        (":9092", "has no host"),
        ("127.0.0.1:nine", "is not a number"),
        ("127.0.0.1:65536", "is not in 1-65535"),
    ],
)
def test_a_malformed_address_is_refused_at_once_naming_the_setting(
    offline: Cli, value: str, why: str
) -> None:
    for verb in ("status", "worker"):
        by_env = offline.with_env(TURNLOG_BOOTSTRAP_SERVERS=value)(verb, check=EXIT_USAGE)
        by_option = offline("--bootstrap-servers", value, verb, check=EXIT_USAGE)
        for ran, named in (
            (by_env, "TURNLOG_BOOTSTRAP_SERVERS"),
            (by_option, "--bootstrap-servers"),
        ):
            [line] = ran.lines
            assert line.startswith(f"error: {named}={value!r}:") and why in line, line
            assert ran.seconds < 15, ran.seconds  # refused, not tried


def test_aiokafkas_lines_are_shown_only_when_debug_asks(offline: Cli, address: str) -> None:
    # Before: --log-level info (and json) set aiokafka to WARNING, and a 30-second outage wrote
    # thousands of its ERROR lines beside turnlog's two.
    service = offline.with_env(TURNLOG_BROKER_TIMEOUT=f"{SERVICE_BUDGET:g}")
    info = service("worker", "--log-level", "info", check=None, timeout=SERVICE_BOUND + 30)
    _check_gave_up(info, address, long_running=True)
    debug = service("worker", "--log-level", "debug", check=None, timeout=SERVICE_BOUND + 30)
    assert debug.returncode == EXIT_BROKER
    assert any(" aiokafka" in line for line in debug.lines), debug.lines[:5]


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_a_person_at_a_terminal_sees_the_first_line_at_once(offline: Cli, address: str) -> None:
    """A one-shot verb's stderr on a terminal: the line when the first contact fails comes at
    once, seconds before the error line -- not at the end, and not after 300 s of silence."""
    leader, follower = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnlog", "status"],
        env={**offline.env, "COLUMNS": "2000"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    seen: list[tuple[float, str]] = []

    def read() -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the process closed its end
                break
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            now = time.monotonic() - started
            seen.extend((now, _ANSI.sub("", ln.decode().strip())) for ln in lines if ln.strip())
        if pending.strip():
            seen.append((time.monotonic() - started, _ANSI.sub("", pending.decode().strip())))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.wait(timeout=BOUND + 30) == EXIT_BROKER
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        os.close(leader)
    texts = [text for _, text in seen]
    assert len(seen) == 2, texts
    (noticed, notice), (ended, error) = seen
    assert "never reached yet" in notice and address in notice, notice
    assert error.startswith("error: Kafka at"), error
    assert ended - noticed >= CONNECT_TIMEOUT - 1.0, (noticed, ended)


# -- the library ---------------------------------------------------------------------------------


def _settings(address: str, tmp_path: Path) -> Settings:
    write_keypair(tmp_path / "keys", "k1")
    return Settings(
        bootstrap_servers=address,
        state_dir=tmp_path / "state",
        keys_dir=tmp_path / "keys",
        connect_timeout_seconds=CONNECT_TIMEOUT,
        broker_timeout_seconds=float(OUTAGE_BUDGET),
    )


async def _pause(tl: Turnlog, tmp_path: Path) -> Any:
    return await tl.pause(sample_checkpoint("first-contact"), request=REQUEST)


async def _answer(tl: Turnlog, tmp_path: Path) -> Any:
    token, _ = local_token(tmp_path / "keys", "first-contact")
    stated = axes(sample_checkpoint("first-contact"))
    return await tl.answer(token, ANSWER, **stated)  # type: ignore[arg-type]


async def _run_worker(tl: Turnlog, tmp_path: Path) -> Any:
    return await tl.run_worker()


CALLS: dict[str, Callable[[Turnlog, Path], Coroutine[Any, Any, Any]]] = {
    "pause": _pause,
    "answer": _answer,
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_the_librarys_first_call_is_broker_unavailable_in_the_connect_budget(
    address: str, tmp_path: Path, call: str
) -> None:
    tl = Turnlog(_settings(address, tmp_path))
    started = time.monotonic()
    try:
        with pytest.raises(BrokerUnavailable) as gave_up:
            await asyncio.wait_for(CALLS[call](tl, tmp_path), BOUND)
    finally:
        await tl.close()
    took = time.monotonic() - started
    assert CONNECT_TIMEOUT <= took < BOUND, took
    assert gave_up.value.never_reached, gave_up.value
    assert address in str(gave_up.value) and "TURNLOG_CONNECT_TIMEOUT" in str(gave_up.value)


async def test_the_librarys_worker_waits_a_never_reached_address_out_for_the_outage_budget(
    address: str, tmp_path: Path
) -> None:
    """``run_worker`` is a service: the outage budget, not the first call's connect budget."""
    settings = _settings(address, tmp_path).with_(broker_timeout_seconds=SERVICE_BUDGET)
    tl = Turnlog(settings)
    started = time.monotonic()
    try:
        with pytest.raises(BrokerUnavailable) as gave_up:
            await asyncio.wait_for(_run_worker(tl, tmp_path), SERVICE_BOUND)
    finally:
        await tl.close()
    took = time.monotonic() - started
    assert SERVICE_BUDGET <= took < SERVICE_BOUND, took
    assert gave_up.value.never_reached, gave_up.value
    assert address in str(gave_up.value) and "TURNLOG_BROKER_TIMEOUT" in str(gave_up.value)
