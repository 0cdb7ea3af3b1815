"""The continuation of one thread (issue 28): ``Turnlog.resumed_turn`` reads its thread's turn and
takes nothing from anyone else -- no group, no commit -- so another thread's turn, pending on the
same partition, is still delivered afterwards to the group's reader; many continuations wait side
by side in one process; and one that finds nothing says so by name when its time is up. It then
claims the turn (continued once: ``test_continuation.py``); ``peek_resumed_turn`` is the look
that repeats."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.test_api import _group_offsets, api_settings
from turnlog import (
    AlreadyContinued,
    Paused,
    PauseExpired,
    ResumedTurnTimeout,
    Turnlog,
    TurnlogError,
    TurnResumed,
)
from turnlog.clock import utc_now
from turnlog.kafka.partitioning import partition_for

PARTITIONS = 2  # api_settings' count: threads below are picked by where they land


def _threads_on(partition: int, count: int, tag: str) -> list[str]:
    """``count`` thread ids that land on ``partition``: two threads sharing one is the case a
    reader of the thread's partition must tell apart."""
    candidates = (f"{tag}-{i}" for i in itertools.count())
    picked = (t for t in candidates if partition_for(t, PARTITIONS) == partition)
    return list(itertools.islice(picked, count))


async def _pause_and_resume(tl: Turnlog, thread: str, checkpoint_id: str = "cp-1") -> Paused:
    paused = await tl.pause(sample_checkpoint(thread, checkpoint_id=checkpoint_id), request=REQUEST)
    sent = await tl.answer(paused.token, ANSWER, **paused.axes)
    outcome = await tl.outcome(sent.answer_id, timeout=45)
    assert outcome.accepted, outcome.reason
    return paused


async def _group_turns(tl: Turnlog, wanted: set[str], timeout: float) -> list[TurnResumed]:
    """What the default agents group is handed, until every thread of ``wanted`` was seen."""
    seen: list[TurnResumed] = []
    async with tl.resumed() as turns:
        async with asyncio.timeout(timeout):
            async for turn in turns:
                assert isinstance(turn, TurnResumed)
                seen.append(turn)
                if wanted <= {t.thread_id for t in seen}:
                    await turns.commit()
                    break
    return seen


async def test_a_thread_continuation_beside_another_threads_pending_turn_leaves_it_delivered(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    a, b = _threads_on(0, 2, "shared")  # one partition: the reader must filter by thread
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused_a = await _pause_and_resume(tl, a)
        paused_b = await _pause_and_resume(tl, b)

        turn = await tl.resumed_turn(a, timeout=30)
        assert isinstance(turn, TurnResumed)
        assert (turn.thread_id, turn.token_id) == (a, paused_a.token_id)
        # No group, no commit: the agents group has no offsets for anyone yet.
        assert await _group_offsets(bootstrap, f"{names.app}.agents") == {}

        # B's turn -- and A's, which a read never takes -- reach the group's plain reader.
        delivered = await _group_turns(tl, {a, b}, timeout=30)
    assert worker.exception() is None  # close() stopped the worker; it never failed
    by_thread = {t.thread_id: t.token_id for t in delivered}
    assert by_thread == {a: paused_a.token_id, b: paused_b.token_id}


async def test_continuations_of_several_threads_wait_side_by_side_in_one_process(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    threads = _threads_on(0, 2, "side") + _threads_on(1, 2, "side")
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        # Waiting before any of them is even paused: each call finds its turn as it arrives.
        waits = [asyncio.create_task(tl.resumed_turn(t, timeout=90)) for t in threads]
        paused = [await _pause_and_resume(tl, t) for t in reversed(threads)]
        turns = await asyncio.gather(*waits)
    assert worker.exception() is None  # close() stopped the worker; it never failed
    tokens = {p.thread_id: p.token_id for p in paused}
    assert [(t.thread_id, t.token_id) for t in turns] == [(t, tokens[t]) for t in threads]


async def test_a_token_or_checkpoint_selects_the_turn_of_one_pause_and_a_read_repeats(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    (thread,) = _threads_on(1, 1, "twice")
    # No clock leeway: `since` is then exactly the records' time (one machine, one clock).
    settings = dataclasses.replace(api_settings(bootstrap, names, tmp_path), token_leeway_seconds=0)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        first = await _pause_and_resume(tl, thread, "cp-1")
        second = await _pause_and_resume(tl, thread, "cp-2")
        after_both = utc_now()

        newest = await tl.peek_resumed_turn(thread, timeout=30)
        again = await tl.peek_resumed_turn(thread, timeout=30)  # a look, not a take: the same turn
        of_first = await tl.peek_resumed_turn(thread, token_id=first.token_id, timeout=30)
        by_checkpoint = await tl.peek_resumed_turn(thread, checkpoint_id="cp-1", timeout=30)
        from_its_pause = await tl.peek_resumed_turn(
            thread, token_id=first.token_id, since=first.pause.occurred_at, timeout=30
        )
        claimed = await tl.resumed_turn(thread, token_id=first.token_id, timeout=30)
        with pytest.raises(AlreadyContinued):  # resumed_turn continues: once
            await tl.resumed_turn(thread, token_id=first.token_id, timeout=30)
        with pytest.raises(ResumedTurnTimeout):  # both turns were written before `since`
            await tl.peek_resumed_turn(thread, token_id=first.token_id, since=after_both, timeout=2)
    assert worker.exception() is None  # close() stopped the worker; it never failed
    assert isinstance(newest, TurnResumed) and newest.token_id == second.token_id
    assert again == newest
    assert isinstance(of_first, TurnResumed) and of_first.token_id == first.token_id
    assert by_checkpoint == of_first == from_its_pause == claimed


async def test_a_continuation_that_finds_no_turn_raises_its_named_timeout(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await _pause_and_resume(tl, "answered-thread")
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(ResumedTurnTimeout, match=r"'quiet-thread'.*within 2s") as quiet:
            await tl.resumed_turn("quiet-thread", timeout=2)
        took = loop.time() - began
        # Another token of a thread that has a turn: that turn is not the one asked for.
        with pytest.raises(ResumedTurnTimeout, match="token 'not-this-one'"):
            await tl.resumed_turn(paused.thread_id, token_id="not-this-one", timeout=2)
    assert worker.exception() is None  # close() stopped the worker; it never failed
    assert isinstance(quiet.value, TimeoutError) and isinstance(quiet.value, TurnlogError)
    assert 2 <= took < 10


async def test_an_expired_pause_is_the_threads_outcome_when_asked_for(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = dataclasses.replace(api_settings(bootstrap, names, tmp_path), token_leeway_seconds=0)
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await tl.pause(sample_checkpoint("expiring"), request=REQUEST, ttl=1)
        expired = await tl.resumed_turn(
            "expiring", token_id=paused.token_id, include_expired=True, timeout=60
        )
        with pytest.raises(ResumedTurnTimeout, match="its pause expired unanswered"):
            await tl.resumed_turn("expiring", token_id=paused.token_id, timeout=2)
    assert worker.exception() is None  # close() stopped the worker; it never failed
    assert isinstance(expired, PauseExpired) and expired.token_id == paused.token_id


# -- a closed Turnlog ---------------------------------------------------------------------------


async def test_a_closed_turnlog_refuses_every_call_by_name_and_opens_nothing(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    tl = Turnlog(settings)
    paused = await tl.pause(sample_checkpoint("closing"), request=REQUEST)
    await tl.close()
    calls = {
        "pause": lambda: tl.pause(
            sample_checkpoint("closing", checkpoint_id="cp-2"), request=REQUEST
        ),
        "answer": lambda: tl.answer(paused.token, ANSWER, **paused.axes),
        "outcome": lambda: tl.outcome("some-answer", timeout=1),
        "resumed_turn": lambda: tl.resumed_turn("closing", timeout=1),
        "run_worker": lambda: tl.run_worker(),
    }
    for name, call in calls.items():
        with pytest.raises(TurnlogError, match="this Turnlog is closed") as closed:
            await call()
        assert name in str(closed.value)
    with pytest.raises(TurnlogError, match="this Turnlog is closed"):
        tl.resumed()
    with pytest.raises(TurnlogError, match="this Turnlog is closed"):
        tl.checkpoints  # noqa: B018
    await tl.close()  # still idempotent


async def test_a_resumed_loop_ends_when_its_turnlog_closes(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    tl = Turnlog(settings)
    turns = tl.resumed()
    await turns.start()
    seen: list[object] = []

    async def loop() -> str:
        async for turn in turns:
            seen.append(turn)
        return "ended"

    running = asyncio.create_task(loop())
    await asyncio.sleep(0)  # let the loop begin (a yield, not a wait: it may be anywhere)
    await tl.close()
    assert await asyncio.wait_for(running, 15) == "ended"
    # A stopped iterator handed out before the close ends at once too, never reconnecting.
    assert [turn async for turn in turns] == []
    assert seen == []


async def test_a_continuation_waiting_when_its_turnlog_closes_is_told_so(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    tl = Turnlog(settings)
    waiting = asyncio.create_task(tl.resumed_turn("never-paused", timeout=60))
    await asyncio.sleep(0)  # one step of the task: the call registers its read, then awaits it
    assert tl._continuations, "the call had not begun: close() would refuse it, not end it"
    await tl.close()
    with pytest.raises(TurnlogError, match="this Turnlog is closed"):
        await asyncio.wait_for(waiting, 15)
