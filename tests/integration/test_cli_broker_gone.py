"""``turnlog tail`` and ``turnlog project`` when their broker goes away under them (issue 37,
item 5): each says so once -- one line when it went, then, past ``TURNLOG_BROKER_TIMEOUT``,
its one error line and exit 4 -- and nothing else about it; a tail that never reached its
broker likewise (``test_first_contact.py`` holds project and the other verbs to it).

Before, ``tail`` said nothing at all: aiokafka retries inside ``getmany``, which returned
nothing, so a tail whose broker stopped waited out its idle time (an hour by default) in
silence. Both verbs run as a person runs them, in a subprocess, against a broker of this test's
own that is stopped for good once each is following.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from tests.brokers import OwnBroker
from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.cli_support import EXIT_BROKER, Cli, Spawned, cli_env
from tests.integration.test_first_contact import closed_address
from turnlog.clock import utc_now
from turnlog.contracts.events import TurnResumed
from turnlog.wire.codec import encode

pytest_plugins = ["tests.brokers"]

BUDGET = 4  # TURNLOG_BROKER_TIMEOUT, seconds


async def _resumed_record(bootstrap: str, topic: str, thread: str) -> None:
    """One ``TurnResumed`` on the resumed topic, for tail to print."""
    cp = sample_checkpoint(thread)
    turn = TurnResumed(
        event_id="e-1", occurred_at=utc_now(), package_version="test", token_id="k",
        answer_id="a", run_id=cp.run_id, session_id=cp.session_id, thread_id=thread,
        checkpoint_id=cp.checkpoint_id, interrupt_id="", tool_call_id="call-1", name="ask_user",
        prompt="", response_json="{}", history=tuple(cp.messages),
    )  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, encode(turn), key=thread.encode())
    finally:
        await producer.stop()


def _ended(verb: Spawned) -> tuple[int, list[str], float]:
    started = time.monotonic()
    code, _ = verb.finish(timeout=BUDGET + 60)
    return code, verb.seen, time.monotonic() - started


async def test_tail_and_project_say_once_that_their_broker_went_then_exit_4(
    own_broker: OwnBroker, names: Names, tmp_path: Path
) -> None:
    env = cli_env(own_broker.bootstrap, names.prefix, names.app, tmp_path)
    cli = Cli({**env, "TURNLOG_BROKER_TIMEOUT": str(BUDGET)})
    await asyncio.to_thread(cli, "topics", "ensure")
    await _resumed_record(own_broker.bootstrap, f"{names.prefix}resumed", "gone-1")

    tail = Spawned(cli, "tail", "resumed", "--from-beginning")
    project = Spawned(cli, "project")
    try:
        assert tail.proc.stdout is not None
        line = await asyncio.to_thread(tail.proc.stdout.readline)
        assert line.startswith("resumed thread gone-1"), line
        await asyncio.to_thread(project.wait_for_line, "caught up")
        await own_broker.stop()
        (tail_code, tail_lines, tail_took), (project_code, project_lines, _) = await asyncio.gather(
            asyncio.to_thread(_ended, tail), asyncio.to_thread(_ended, project)
        )
    finally:
        for verb in (tail, project):
            if verb.proc.poll() is None:
                verb.proc.kill()
    for code, lines, who in (
        (tail_code, tail_lines, "tail"),
        (project_code, project_lines, "projector"),
    ):
        assert code == EXIT_BROKER, (who, code, lines)
        errors = [x for x in lines if x.startswith("error:")]
        assert len(errors) == 1 and lines[-1] == errors[0], lines
        assert f"Kafka at {own_broker.bootstrap} is not reachable: {who}:" in errors[0], errors
        assert f"budget {BUDGET}s, TURNLOG_BROKER_TIMEOUT" in errors[0], errors
        went = [x for x in lines if "broker unreachable" in x]
        assert len(went) == 1 and f"{who}: broker unreachable" in went[0], lines
        assert "Traceback" not in "\n".join(lines), lines
    assert tail_took < BUDGET + 30, tail_took


def test_tail_at_a_never_reached_address_says_it_once_then_its_error_line(
    names: Names, tmp_path: Path
) -> None:
    address = closed_address()
    env = cli_env(address, names.prefix, names.app, tmp_path)
    cli = Cli({**env, "TURNLOG_CONNECT_TIMEOUT": "2", "TURNLOG_BROKER_TIMEOUT": "60"})
    ran = cli("tail", "resumed", check=EXIT_BROKER, timeout=60)
    # One line when the wait begins (a long-running verb's), then the error line, nothing else.
    assert len(ran.lines) == 2, ran.lines
    assert f"tail (Kafka at {address}): broker unreachable, never reached yet" in ran.lines[0]
    assert ran.lines[1].startswith(f"error: Kafka at {address} is not reachable: tail"), ran.lines
    assert "never reached in 2s (TURNLOG_CONNECT_TIMEOUT=2)" in ran.lines[1], ran.lines
    assert ran.seconds < 30, ran.seconds
