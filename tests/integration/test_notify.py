"""``turnlog notify`` against the real broker and a local receiver: each event's notice once
across a SIGKILL of the notifier process, a failing receiver retried then reported, a slow one
cut off without holding another webhook back, signatures checked with the recipe the docs
page shows, a reminder once before its deadline across restarts."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import random
import re
import signal
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.cli_support import Cli, Spawned, cli_env
from tests.integration.notify_support import Hit, Receiver, until
from tests.integration.test_api import api_settings
from turnlog import Paused, Settings, Turnlog
from turnlog.notify import payload, undelivered
from turnlog.notify.backoff import Backoff
from turnlog.notify.config import NotifyConfig, Sink
from turnlog.notify.notifier import Notifier

ROOT = Path(__file__).resolve().parents[2]
SECRET = "notify-test-secret-0123456789"


def _settings(bootstrap: str, names: Names, root: Path) -> Settings:
    return api_settings(bootstrap, names, root).with_(partitions=3)


def _config(*sinks: Sink, **changes: object) -> NotifyConfig:
    base = NotifyConfig(
        sinks=sinks,
        secrets=(SECRET.encode(),),
        inbox_url="https://inbox.example",
        timeout_seconds=2.0,
        backoff=Backoff(base_seconds=0.05, cap_seconds=0.2, horizon=timedelta(hours=1)),
    )
    return NotifyConfig(**{**{f: getattr(base, f) for f in base.__slots__}, **changes})


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(slow_seconds=3.0)
    try:
        yield made
    finally:
        made.close()


@asynccontextmanager
async def running(notifier: Notifier) -> AsyncIterator[Notifier]:
    async with notifier:
        task = asyncio.create_task(notifier.run())
        try:
            yield notifier
        finally:
            notifier.request_stop()
            await asyncio.wait_for(task, 30)


def _recipe() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "recipe", ROOT / "docs" / "snippets" / "verify_notice_signature.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _pause(tl: Turnlog, thread: str, ttl: float | None = None) -> Paused:
    return await tl.pause(sample_checkpoint(thread), request=REQUEST, ttl=ttl)


@pytest.mark.timeout(240)
async def test_each_event_is_notified_once_across_a_kill_of_the_notifier(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    settings = _settings(bootstrap, names, tmp_path)
    cli = Cli({**cli_env(bootstrap, names.prefix, names.app, tmp_path), "TURNLOG_PARTITIONS": "3"})
    args = ("notify", "--url", receiver.url("/paced"), "--inbox-url", "https://inbox.example")
    cli = cli.with_env(TURNLOG_NOTIFY_SECRET=SECRET)
    first = Spawned(cli, *args)
    try:
        await asyncio.to_thread(first.wait_for_line, "Ctrl-C stops", 90)
        expected: set[tuple[str, str]] = set()

        async def kill_midway() -> None:
            # The notifier posts one notice per 0.3 s: killed after three, while the events
            # are still being written, so some come while it is down.
            await until(lambda: len(receiver.hits()) >= 3, "three notices before the kill", 60)
            first.proc.send_signal(signal.SIGKILL)

        killer = asyncio.create_task(kill_midway())
        async with Turnlog(settings) as tl:
            worker = asyncio.create_task(tl.run_worker())
            paused = [await _pause(tl, f"kill-{i}") for i in range(6)]
            expected |= {(payload.RECORDED, p.token_id) for p in paused}
            for p in paused[:3]:
                sent = await tl.answer(p.token, ANSWER, **p.axes)
                assert (await tl.outcome(sent.answer_id, timeout=60)).accepted
                expected.add((payload.RESUMED, p.token_id))
            spent = paused[0]
            again = await tl.answer(spent.token, ANSWER, **spent.axes)
            assert not (await tl.outcome(again.answer_id, timeout=60)).accepted
            expected.add((payload.REFUSED, spent.token_id))
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        await killer
        code, _ = first.finish(timeout=30)
        assert code == -signal.SIGKILL
        before = {h.key for h in receiver.hits()}
        assert len(before) < len(expected), "the kill came after everything: nothing to resume"

        second = Spawned(cli, *args)
        try:
            await asyncio.to_thread(second.wait_for_line, "Ctrl-C stops", 90)

            def kinds() -> set[tuple[str, str]]:
                return {(h.data["kind"], h.data["token_id"]) for h in receiver.hits()}

            await until(lambda: kinds() >= expected, "every event's notice", 90)
            # Nothing more comes: the notifier is caught up (a fresh pause is its next notice).
            async with Turnlog(settings) as tl:
                marker = await _pause(tl, "kill-marker")
            await until(
                lambda: any(h.data["token_id"] == marker.token_id for h in receiver.hits()),
                "the marker's notice",
            )
            second.proc.send_signal(signal.SIGTERM)
            code, _ = second.finish(timeout=30)
            assert code == 0
        finally:
            if second.proc.poll() is None:
                second.proc.kill()
    finally:
        if first.proc.poll() is None:
            first.proc.kill()

    hits = [h for h in receiver.hits() if h.data["token_id"] != marker.token_id]
    assert {(h.data["kind"], h.data["token_id"]) for h in hits} == expected
    by_key = Counter(h.key for h in hits)
    assert len(by_key) == len(expected)  # one idempotency key per event
    # What the docs promise: a repeat only of the one notice in flight at the kill, same body.
    repeats = [key for key, n in by_key.items() if n > 1]
    assert len(repeats) <= 1 and all(by_key[k] == 2 for k in repeats), by_key
    for key in repeats:
        assert len({h.body for h in hits if h.key == key}) == 1
        assert key in before
    assert all(h.key == h.data["event_id"] for h in hits)


@pytest.mark.timeout(120)
async def test_a_failing_receiver_is_retried_then_dead_lettered_and_holds_nobody_back(
    bootstrap: str,
    names: Names,
    tmp_path: Path,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = _settings(bootstrap, names, tmp_path)
    registry = CollectorRegistry()
    backoff = Backoff(base_seconds=0.1, cap_seconds=0.4, horizon=timedelta(seconds=2))
    config = _config(Sink(receiver.url("/fail")), Sink(receiver.url("/ok")), backoff=backoff)
    caplog.set_level(logging.WARNING, logger="turnlog.notify")
    async with (
        running(Notifier(settings, config, registry=registry)),
        Turnlog(settings) as tl,
    ):
        first = await _pause(tl, "fail-1")
        second = await _pause(tl, "fail-2")
        await until(lambda: len(receiver.hits("/ok")) == 2, "both notices at the good webhook")
        await until(lambda: _dead(registry) == 2, "both notices dead-lettered past the horizon", 20)
        told = await undelivered.summary(settings)

    failing = receiver.hits("/fail")
    assert {h.data["token_id"] for h in failing} == {first.token_id, second.token_id}
    assert len(failing) >= 4  # tried again and again for the two seconds of the horizon
    for token in (first.token_id, second.token_id):
        tries = [h for h in failing if h.data["token_id"] == token]
        assert len({h.key for h in tries}) == 1  # one idempotency key per notice
        gaps = [b.at - a.at for a, b in itertools.pairwise(tries)]
        assert all(gap >= 0.045 for gap in gaps), gaps  # backed off: at least half of 0.1 s
    reported = [r.getMessage() for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert len(reported) == 2 and "not taken within 0:00:02 (last: HTTP 500)" in reported[0]
    assert receiver.url("/fail") not in reported[0]  # scheme and host only
    assert told is not None and (told.waiting, told.dead) == (0, 2)
    sample = registry.get_sample_value
    labels = {"kind": payload.RECORDED}
    assert sample("turnlog_notify_notices_total", {**labels, "outcome": "delivered"}) == 2
    assert sample("turnlog_notify_notices_total", {**labels, "outcome": "waiting"}) == 2
    assert sample("turnlog_notify_waiting") == 0


def _dead(registry: CollectorRegistry) -> float:
    labels = {"kind": payload.RECORDED, "outcome": "dead"}
    return registry.get_sample_value("turnlog_notify_notices_total", labels) or 0


@pytest.mark.timeout(120)
async def test_a_slow_receiver_is_cut_off_at_the_timeout(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    settings = _settings(bootstrap, names, tmp_path)
    registry = CollectorRegistry()
    config = _config(
        Sink(receiver.url("/slow")),
        Sink(receiver.url("/ok")),
        timeout_seconds=0.5,
        backoff=Backoff(base_seconds=0.05, cap_seconds=0.2, horizon=timedelta(hours=1)),
    )
    async with (
        running(Notifier(settings, config, registry=registry)),
        Turnlog(settings) as tl,
    ):
        await _pause(tl, "slow-1")
        await _pause(tl, "slow-2")
        await until(lambda: len(receiver.hits("/ok")) == 2, "both notices at the good webhook")
        ok = receiver.hits("/ok")
        # The slow webhook's 3-second answers are not waited for: tried again and again.
        await until(lambda: len(receiver.hits("/slow")) >= 4, "attempts cut off", 20)
        slow = receiver.hits("/slow")
        waiting = registry.get_sample_value("turnlog_notify_waiting")
    assert ok[1].at < slow[-1].at  # the good webhook was not held behind the slow one
    for a, b in itertools.pairwise(slow):
        assert b.at - a.at < 2.0  # each attempt cut off at 0.5 s, far before its 3 s answer
    assert waiting == 2  # both kept for the slow webhook


@pytest.mark.timeout(120)
async def test_signatures_verify_with_the_documented_recipe(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    recipe = _recipe()
    settings = _settings(bootstrap, names, tmp_path)
    config = _config(Sink(receiver.url("/ok")), Sink(receiver.url("/slack"), slack=True))
    async with running(Notifier(settings, config)), Turnlog(settings) as tl:
        paused = await _pause(tl, "signed-1")
        await until(lambda: len(receiver.hits()) == 2, "the notice at both webhooks")
    plain, slack = receiver.hits("/ok")[0], receiver.hits("/slack")[0]
    for hit in (plain, slack):
        header = hit.headers["turnlog-signature"]
        assert recipe.verify_turnlog_signature(SECRET.encode(), header, hit.body)
        assert not recipe.verify_turnlog_signature(SECRET.encode(), header, hit.body + b" ")
        assert not recipe.verify_turnlog_signature(b"not-the-secret-at-all", header, hit.body)
        assert paused.token.encode() not in hit.body
    assert plain.data["link"] == f"https://inbox.example/pause/{paused.token_id}"
    assert plain.data["pause_event_id"] == paused.pause.event_id == plain.key
    assert list(slack.data) == ["text"] and "Which region?" in slack.data["text"]


@pytest.mark.timeout(120)
async def test_a_reminder_is_sent_once_before_the_deadline_across_restarts(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    settings = _settings(bootstrap, names, tmp_path)
    config = _config(Sink(receiver.url("/ok")), remind_before=timedelta(seconds=6))
    loop = asyncio.get_running_loop()

    def of(kind: str) -> list[Hit]:
        return [h for h in receiver.hits() if h.data["kind"] == kind]

    async with Turnlog(settings) as tl:
        async with running(Notifier(settings, config)):
            paused = await _pause(tl, "remind-1", ttl=10)
            await until(lambda: of(payload.RECORDED), "the recorded notice")
        deadline = paused.pause.expires_at.timestamp()
        stopped_at = loop.time()
        # The first notifier stopped before the reminder's moment: the next one owes it from
        # the pause's deadline, replayed from the log.
        assert not of(payload.REMINDER)
        async with running(Notifier(settings, config)):
            (reminder,) = await until(lambda: of(payload.REMINDER), "the reminder", 15)
        assert loop.time() - stopped_at < 9
        assert reminder.at < deadline
        assert reminder.data["token_id"] == paused.token_id
        # A third notifier, after the reminder's moment and with the pause still open, sends
        # no second one; it does tell of the expiry.
        worker = asyncio.create_task(tl.run_worker())
        async with running(Notifier(settings, config)):
            await until(lambda: of(payload.EXPIRED), "the expiry notice", 30)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert len(of(payload.REMINDER)) == 1
    assert [h.data["kind"] for h in receiver.hits()] == [
        payload.RECORDED,
        payload.REMINDER,
        payload.EXPIRED,
    ]
    assert re.fullmatch("[0-9a-f]{32}", reminder.key)


@pytest.mark.timeout(60)
def test_an_unreachable_broker_is_one_line_and_exit_4(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    # A service waits out a broker down at its start for the outage budget (--broker-timeout).
    env = cli_env("127.0.0.1:1", names.prefix, names.app, tmp_path)
    ran = Cli({**env, "TURNLOG_NOTIFY_SECRET": SECRET})(
        "notify", "--url", "http://127.0.0.1:9/x", "--broker-timeout", "3", check=4
    )
    errors = [line for line in ran.lines if line.startswith("error: ")]
    assert len(errors) == 1 and "not reachable" in errors[0], ran.lines
    assert "Traceback" not in ran.stderr


@pytest.mark.timeout(60)
async def test_a_group_committed_beyond_the_log_is_refused_by_name(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    """The topics were made anew under the group: its offsets belong to another log, and
    reading on from them would notify nothing until the new log grew past them."""
    from aiokafka import TopicPartition

    from turnlog.errors import TopicMismatch
    from turnlog.kafka import clients

    settings = _settings(bootstrap, names, tmp_path)
    config = _config(Sink(receiver.url("/ok")))
    async with Notifier(settings, config):
        pass  # the group's first start: it commits the topics' ends
    tp = TopicPartition(f"{names.prefix}pauses", 0)
    consumer = clients.consumer(
        bootstrap, group_id=config.group_id(names.app, config.sinks[0]), enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: 1_000_000})
    finally:
        await consumer.stop()
    with pytest.raises(TopicMismatch, match="beyond its end 0"):
        async with Notifier(settings, config):
            pass


@pytest.mark.timeout(120)
async def test_a_held_call_of_a_group_is_not_reminded_of_while_its_sibling_is(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    """A pause of two calls, the first answered (held until the second is): only the call still
    waiting on a person is owed its reminder -- by a notifier that was running when the held
    answer was consumed, not only by one replaying the log afterwards."""
    from tests.integration.worker_support import Follower
    from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approve
    from turnlog.contracts.group import CallToPause
    from turnlog.kafka.topics import TopicSet

    settings = _settings(bootstrap, names, tmp_path)
    config = _config(Sink(receiver.url("/ok")), remind_before=timedelta(seconds=4))

    def of(kind: str) -> list[Hit]:
        return [h for h in receiver.hits() if h.data["kind"] == kind]

    follower = Follower(bootstrap, TopicSet.from_settings(settings))
    cp = sample_checkpoint(f"held-{names.app}")
    try:
        async with Turnlog(settings) as tl, running(Notifier(settings, config)):
            await follower.start()  # the notifier made the topics
            worker = asyncio.create_task(tl.run_worker())
            try:
                question, approval = await tl.pause_calls(  # in the order of the calls
                    cp,
                    [
                        CallToPause(
                            "call-2", APPROVE_TOOL_CALL, approval_request("search", {"q": 2})
                        ),
                        CallToPause("call-1"),
                    ],
                    ttl=10,
                )
                await until(lambda: len(of(payload.RECORDED)) == 2, "both recorded notices")
                await tl.answer(approval.token, approve("search", {"q": 2}), **approval.axes)
                [held] = await follower.wait_for(lambda: follower.consumed(approval.token_id))
                assert held.outcome == "held"
                # The held answer was consumed before the reminders' moment (6 s after the
                # pause), so the notifier knew of it when they fell due.
                due = approval.pause.expires_at.timestamp() - 4
                assert time.time() < due - 0.5, "the held answer came too late to tell"
                # The question's window closes unanswered: both reminders, had they been owed,
                # were due before its expiry notice.
                await until(lambda: len(of(payload.EXPIRED)) == 2, "the expiry notices", 30)
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
    finally:
        await follower.stop()
    assert [r.data["token_id"] for r in of(payload.REMINDER)] == [question.token_id]
    # The pause expired: both calls hear of it -- the held one too, whose answer is moot now.
    expired = of(payload.EXPIRED)
    assert {e.data["token_id"] for e in expired} == {question.token_id, approval.token_id}
    assert len({e.key for e in expired}) == 2


def _free_port() -> int:
    """A port below Linux's ephemeral range (a client's own socket may take one inside it while
    the receiver is down), free when asked."""
    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port")


async def _waiting(settings: Settings, count: int) -> None:
    """Poll the undelivered topic until ``count`` notices wait on it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        told = await undelivered.summary(settings)
        if told is not None and told.waiting >= count:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not {count} notices waiting within 60s: {told}")
        await asyncio.sleep(0.2)


@pytest.mark.timeout(240)
async def test_a_receiver_outage_loses_no_notice_across_a_kill_and_keeps_each_pause_in_order(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """The webhook's port is closed (connection refused, the case that spent the old five
    attempts in 7.5 s) while a pause is resumed and another expires; the notifier is SIGKILLed
    in the outage and started again; the receiver comes back after the old schedule would have
    given up: every notice arrives once, recorded before its pause's closing notice."""
    settings = _settings(bootstrap, names, tmp_path)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/hook"
    cli = Cli({**cli_env(bootstrap, names.prefix, names.app, tmp_path), "TURNLOG_PARTITIONS": "3"})
    cli = cli.with_env(TURNLOG_NOTIFY_SECRET=SECRET)
    args = ("notify", "--url", url, "--retry-base", "0.2s", "--retry-cap", "1s")
    first = Spawned(cli, *args)
    receiver: Receiver | None = None
    second: Spawned | None = None
    try:
        await asyncio.to_thread(first.wait_for_line, "Ctrl-C stops", 90)
        async with Turnlog(settings) as tl:
            worker = asyncio.create_task(tl.run_worker())
            try:
                answered = await _pause(tl, "outage-answered")
                expiring = await _pause(tl, "outage-expiring", ttl=2)
                outage_began = time.time()
                sent = await tl.answer(answered.token, ANSWER, **answered.axes)
                assert (await tl.outcome(sent.answer_id, timeout=60)).accepted
                # Both recorded notices, the resume and the expiry: all kept on the log.
                await _waiting(settings, 4)
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
        first.proc.send_signal(signal.SIGKILL)
        assert first.finish(timeout=30)[0] == -signal.SIGKILL

        second = Spawned(cli, *args)
        await asyncio.to_thread(second.wait_for_line, "Ctrl-C stops", 90)
        await asyncio.to_thread(second.wait_for_line, "is not taking notices", 30)
        status = await asyncio.to_thread(cli, "status")
        assert "notices not yet taken by a webhook: 4, the oldest for " in status.stdout
        # The outage itself (the scenario, not a wait for a condition): past the 7.5 s in which
        # the old default of five attempts gave a refused connection up.
        await asyncio.sleep(max(0.0, outage_began + 9 - time.time()))
        receiver = Receiver(port=port)
        back = time.time()
        expected = {
            (payload.RECORDED, answered.token_id),
            (payload.RESUMED, answered.token_id),
            (payload.RECORDED, expiring.token_id),
            (payload.EXPIRED, expiring.token_id),
        }
        got = receiver

        def kinds() -> set[tuple[str, str]]:
            return {(h.data["kind"], h.data["token_id"]) for h in got.hits()}

        await until(lambda: kinds() >= expected, "every notice once the receiver is back", 60)
        delivered_after = receiver.hits()[-1].at - back
        await _until_drained(settings)
        second.proc.send_signal(signal.SIGTERM)
        assert second.finish(timeout=30)[0] == 0
    finally:
        for spawned in (first, second):
            if spawned is not None and spawned.proc.poll() is None:
                spawned.proc.kill()
        if receiver is not None:
            receiver.close()

    hits = receiver.hits()
    assert len(hits) == 4 and len({h.key for h in hits}) == 4, [h.data["kind"] for h in hits]
    for token in (answered.token_id, expiring.token_id):
        told = [h.data["kind"] for h in hits if h.data["token_id"] == token]
        assert told[0] == payload.RECORDED, told  # the pause's own notice first
    assert delivered_after < 5, delivered_after  # the cap is 1 s: taken as soon as it is back
    signature = _recipe()
    for hit in hits:
        assert signature.verify_turnlog_signature(
            SECRET.encode("utf-8"), hit.headers["turnlog-signature"], hit.body
        )


async def _until_drained(settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        told = await undelivered.summary(settings)
        if told is not None and told.waiting == 0:
            return
        if loop.time() > deadline:
            raise AssertionError(f"notices still waiting on the log: {told}")
        await asyncio.sleep(0.2)


@pytest.mark.timeout(120)
def test_no_log_line_at_debug_holds_a_secret_of_the_webhook_url(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    """A Slack-like webhook with its secret path, a token in its query and a password in its
    user part, and one whose port is closed (its failure's text logged too): the notifier at
    DEBUG -- httpx's and httpcore's loggers included -- never writes any of them."""
    secrets = ("SLACKSECRETPATH", "QUERYSECRET", "hunter2", "DOWNSECRETPATH")
    good = receiver.url("/services/T000/B000/SLACKSECRETPATH?token=QUERYSECRET").replace(
        "http://", "http://bot:hunter2@"
    )
    down = f"http://127.0.0.1:{_free_port()}/services/T1/B1/DOWNSECRETPATH"
    cli = Cli({**cli_env(bootstrap, names.prefix, names.app, tmp_path), "TURNLOG_PARTITIONS": "3"})
    cli = cli.with_env(TURNLOG_NOTIFY_SECRET=SECRET)
    spawned = Spawned(
        cli, "notify", "--log-level", "debug", "--url", good, "--slack-url", down,
        "--retry-base", "0.1s", "--retry-cap", "0.5s",
    )  # fmt: skip
    stopped = False
    try:
        spawned.wait_for_line("Ctrl-C stops", 90)
        asyncio.run(_pause_once(_settings(bootstrap, names, tmp_path)))
        for needle in ("delivered to http://127.0.0.1", "is not taking notices"):
            if not any(needle in line for line in spawned.seen):  # the two lanes' in any order
                spawned.wait_for_line(needle, 60)
        spawned.proc.send_signal(signal.SIGTERM)
        stopped = True
    finally:
        if not stopped:
            spawned.proc.kill()
        code, _ = spawned.finish(timeout=30)
    assert code == 0
    lines = spawned.seen
    assert any(line.startswith("DEBUG") or " DEBUG " in line for line in lines), lines[:5]
    assert len(receiver.hits()) == 1
    leaked = [line for line in lines if any(s in line for s in secrets)]
    assert leaked == []


async def _pause_once(settings: Settings) -> None:
    async with Turnlog(settings) as tl:
        await _pause(tl, "debug-logs")


@pytest.mark.timeout(120)
async def test_each_call_of_a_group_answered_one_by_one_hears_its_resume(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    """A pause of two calls, answered one at a time: one resume, told to each call."""
    from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approve
    from turnlog.contracts.group import CallToPause

    settings = _settings(bootstrap, names, tmp_path)
    config = _config(Sink(receiver.url("/ok")))

    def of(kind: str) -> list[Hit]:
        return [h for h in receiver.hits() if h.data["kind"] == kind]

    async with Turnlog(settings) as tl, running(Notifier(settings, config)):
        worker = asyncio.create_task(tl.run_worker())
        try:
            question, approval = await tl.pause_calls(
                sample_checkpoint(f"group-{names.app}"),
                [
                    CallToPause("call-2", APPROVE_TOOL_CALL, approval_request("search", {"q": 2})),
                    CallToPause("call-1"),
                ],
            )
            await until(lambda: len(of(payload.RECORDED)) == 2, "both recorded notices")
            held = await tl.answer(approval.token, approve("search", {"q": 2}), **approval.axes)
            await tl.outcome(held.answer_id, timeout=60)
            last = await tl.answer(question.token, ANSWER, **question.axes)
            assert (await tl.outcome(last.answer_id, timeout=60)).accepted
            await until(lambda: len(of(payload.RESUMED)) == 2, "a resume for each call", 30)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
    resumed = of(payload.RESUMED)
    assert {h.data["token_id"] for h in resumed} == {question.token_id, approval.token_id}
    assert len({h.key for h in resumed}) == 2  # each with its own id
    assert all(re.fullmatch("[0-9a-f]{32}", h.key) for h in resumed)
    for hit in resumed:  # each after its own call's recorded notice
        [recorded] = [h for h in of(payload.RECORDED) if h.data["token_id"] == hit.data["token_id"]]
        assert recorded.at <= hit.at


@pytest.mark.timeout(120)
async def test_after_a_restart_an_expiry_is_told_after_its_pauses_recorded_notice(
    bootstrap: str, names: Names, tmp_path: Path, receiver: Receiver
) -> None:
    """Pauses recorded and expired while the notifier is stopped: at its start it reads pauses
    and resumed side by side, and each expiry still comes after its pause's recorded notice."""
    settings = _settings(bootstrap, names, tmp_path)
    config = _config(Sink(receiver.url("/ok")))
    async with running(Notifier(settings, config)):
        pass  # the group's first start: it begins at the topics' ends, committed
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        try:
            paused = [await _pause(tl, f"restart-{i}", ttl=1) for i in range(6)]
            await _all_expired(bootstrap, settings, {p.token_id for p in paused})
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
    async with running(Notifier(settings, config)):
        await until(lambda: len(receiver.hits()) == 12, "a recorded and an expired notice each")
    for p in paused:
        told = [h.data["kind"] for h in receiver.hits() if h.data["token_id"] == p.token_id]
        assert told == [payload.RECORDED, payload.EXPIRED], told


async def _all_expired(bootstrap: str, settings: Settings, tokens: set[str]) -> None:
    """Poll the resumed topic until every one of ``tokens`` has its ``PauseExpired``."""
    from tests.kafka_helpers import read_to_end
    from turnlog.contracts.events import PauseExpired
    from turnlog.kafka.topics import TopicSet
    from turnlog.wire.codec import decode

    topic = TopicSet.from_settings(settings).resumed
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        records = await read_to_end(bootstrap, topic)
        found = {e.token_id for r in records if isinstance(e := decode(r.value), PauseExpired)}
        if tokens <= found:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not expired within 60s: {tokens - found}")
        await asyncio.sleep(0.3)
