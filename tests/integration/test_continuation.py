"""The continuation claim on the real broker (issue 37, item 1): a resumed turn is continued once.

Reading a resumed turn is no permission to continue it; claiming it is, and the worker that owns
the thread's partition decides claims in its transaction against the token ledger. Each
``Turnlog`` below has clients of its own, as a process does: from Kafka's side, three of them
are three processes. What is checked: three claims at once give one winner and two named
refusals (who holds it); a claim whose holder never said done is refused until it is explicitly
retaken, and a finished one never is; a group's turn is claimed through any call's token, once;
``resumed_turn`` claims and ``peek_resumed_turn`` only reads; a forged token, a token of another
thread, a turn not resumed, and "done" from a non-holder are refused by name -- the worker's
refusals checked by writing the claims directly, past the client's own checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.test_api import api_settings
from turnlog import (
    APPROVE_TOOL_CALL,
    AlreadyContinued,
    CallToPause,
    Continuation,
    ContinuationRefused,
    Turnlog,
    TurnResumed,
    approval_request,
    approve,
    write_keypair,
)
from turnlog.audit import Auditor
from turnlog.contracts.events import TokenConsumed
from turnlog.kafka.partitioning import partition_for
from turnlog.kafka.reader import LogReader, Record
from turnlog.tokens import Keyring, TokenIssuer
from turnlog.wire.codec import decode


async def _resumed(tl: Turnlog, thread: str) -> str:
    paused = await tl.pause(sample_checkpoint(thread), request=REQUEST)
    sent = await tl.answer(paused.token, ANSWER, **paused.axes)
    assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
    return paused.token


async def _claim_outcome(tl: Turnlog, token: str) -> Continuation | AlreadyContinued:
    try:
        return await tl.continue_turn(token, timeout=45)
    except AlreadyContinued as refused:
        return refused


async def test_one_of_three_claims_at_once_continues_the_turn_and_the_others_are_told_who(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    thread = f"claim-{names.app}"
    async with Turnlog(settings) as tl, Turnlog(settings) as b, Turnlog(settings) as c:
        worker = asyncio.create_task(tl.run_worker())
        token = await _resumed(tl, thread)
        outcomes = await asyncio.gather(*(_claim_outcome(x, token) for x in (tl, b, c)))
        won = [o for o in outcomes if isinstance(o, Continuation)]
        lost = [o for o in outcomes if isinstance(o, AlreadyContinued)]
        assert len(won) == 1 and len(lost) == 2, outcomes
        winner = won[0]
        assert isinstance(winner.turn, TurnResumed) and winner.turn.thread_id == thread
        assert winner.idempotency_key == f"{winner.turn.token_id}:call-1"
        for refused in lost:
            assert refused.refusal.reason == "already_continued"
            assert (refused.claimant, refused.claim_id) == (winner.claimant, winner.claim_id)
            assert not refused.finished
            assert "continued by" in str(refused) and winner.claimant in str(refused)

        # Its holder "dies" before done: the claim stays taken until retaken explicitly.
        with pytest.raises(AlreadyContinued):
            await b.continue_turn(token, timeout=30)
        retaken = await b.continue_turn(token, timeout=30, retake=True, claimant="rescuer")
        assert retaken.retaken and retaken.claimant == "rescuer"
        assert retaken.claim_id != winner.claim_id
        # The old holder wakes up and says done: it no longer holds the claim.
        with pytest.raises(ContinuationRefused) as not_held:
            await winner.done()
        assert not_held.value.refusal.reason == "claim_not_held"
        assert "rescuer" in str(not_held.value)
        await retaken.done()
        await retaken.done()  # idempotent
        # Finished: never again, not even by an explicit retake.
        for again in (False, True):
            with pytest.raises(AlreadyContinued) as finished:
                await c.continue_turn(token, timeout=30, retake=again)
            assert finished.value.finished and finished.value.claimant == "rescuer"
        # resumed_turn claims too; peek_resumed_turn only reads, as often as asked.
        with pytest.raises(AlreadyContinued):
            await c.resumed_turn(thread, timeout=30)
        assert (await c.peek_resumed_turn(thread, timeout=30)).thread_id == thread
        assert (await c.peek_resumed_turn(thread, timeout=30)).thread_id == thread
        # The audit judges the claims from the log: each decided once, one holder at a time.
        async with Auditor(settings, settle_seconds=0.5, timeout=60) as auditor:
            report = await auditor.audit()
    assert worker.done() and worker.exception() is None
    assert report.holds, [v.line() for v in report.violations]
    # Ten requests (a finish counts apart from its claim); all but the winner's claim, the
    # retake and the retaken claim's finish refused.
    assert (report.claims_judged, report.claims_refused, report.resumed) == (10, 7, 1)


async def test_a_groups_turn_is_claimed_once_through_any_calls_token_and_the_rest_is_refused(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    thread = f"claim-group-{names.app}"
    async with Turnlog(settings) as tl, Turnlog(settings) as other:
        worker = asyncio.create_task(tl.run_worker())
        question, search = await tl.pause_calls(
            sample_checkpoint(thread),
            [
                CallToPause("call-2", APPROVE_TOOL_CALL, approval_request("search", {"q": 2})),
                CallToPause("call-1"),
            ],
        )
        # Not resumed yet (nothing answered): the worker refuses the claim by name.
        with pytest.raises(ContinuationRefused) as early:
            await tl._claim(thread, question.token_id, question.token, "claim", None, 45)
        assert early.value.refusal.reason == "not_resumed"
        sent = await tl.answer(search.token, approve("search", {"q": 2}), **search.axes)
        held_outcome = await tl.outcome(sent.answer_id, timeout=45)  # held: the group waits
        assert held_outcome.resumed is None
        with pytest.raises(ContinuationRefused) as held:
            await tl._claim(thread, search.token_id, search.token, "claim", None, 45)
        assert held.value.refusal.reason == "not_resumed"
        assert "held" in str(held.value) and "call-1" in str(held.value)
        last = await tl.answer(question.token, ANSWER, **question.axes)
        assert (await tl.outcome(last.answer_id, timeout=45)).accepted

        # The first call's token finds the group's turn (resumed by the second call's answer).
        async with tl.continue_turn(search.token, timeout=45) as won:
            assert [a["tool_call_id"] for a in won.turn.answers] == ["call-1", "call-2"]
            assert won.key_for("call-2") == f"{search.token_id}:call-2"
            assert won.key_for("call-1") == f"{question.token_id}:call-1"
        assert won.finished
        with pytest.raises(AlreadyContinued) as lost:
            await other.continue_turn(question.token, timeout=45)
        assert lost.value.finished and lost.value.claim_id == won.claim_id
    assert worker.done() and worker.exception() is None


async def test_a_turn_a_loop_delivers_is_claimed_as_it_is_and_a_redelivery_is_refused(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    thread = f"claim-loop-{names.app}"
    async with Turnlog(settings) as tl, Turnlog(settings) as again:
        worker = asyncio.create_task(tl.run_worker())
        await _resumed(tl, thread)
        turn = await tl.peek_resumed_turn(thread, timeout=45)  # as a loop hands it over
        async with tl.continue_turn(turn, timeout=45) as won:
            assert won.turn is turn and won.token_id == turn.token_id
        with pytest.raises(AlreadyContinued) as redelivered:
            await again.continue_turn(turn, timeout=45)
        assert redelivered.value.finished and redelivered.value.claimant == won.claimant
    assert worker.done() and worker.exception() is None


async def test_forged_foreign_and_misnamed_claims_are_refused_by_name_by_the_worker(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    thread = f"claim-refused-{names.app}"
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        token = await _resumed(tl, thread)
        other_token = await _resumed(tl, f"{thread}-other")
        token_id = tl._claims_of(token).token_id

        # A token signed by a key this deployment does not hold: the client refuses it first...
        write_keypair(tmp_path / "rogue", "rogue")
        rogue = TokenIssuer(
            Keyring.from_directory(tmp_path / "rogue"),
            issuer=settings.issuer,
            audience=settings.audience,
        )
        forged = rogue.issue(tl._claims_of(token))
        with pytest.raises(ContinuationRefused) as client_side:
            await tl.continue_turn(forged, timeout=30)
        assert client_side.value.refusal.reason == "token_unknown_key"
        # ... and the worker too, when a claim carrying it is written past the client.
        with pytest.raises(ContinuationRefused) as worker_side:
            await tl._claim(thread, token_id, forged, "claim", None, 45)
        assert worker_side.value.refusal.reason == "token_unknown_key"
        # Another thread's (genuine) token does not claim this thread's turn.
        with pytest.raises(ContinuationRefused) as foreign:
            await tl._claim(thread, token_id, other_token, "claim", None, 45)
        assert foreign.value.refusal.reason == "thread_mismatch"
        # A token id this thread never paused with.
        with pytest.raises(ContinuationRefused) as unknown:
            await tl._claim(thread, "no-such-token", "", "claim", None, 45)
        assert unknown.value.refusal.reason == "not_resumed"
        # None of that took the turn: the rightful claim still wins, once.
        async with tl.continue_turn(token, timeout=45) as won:
            assert won.turn.thread_id == thread
        row = await _ledger_row(tl, thread, won)
        assert (row.claim_id, row.claim_state, row.outcome) == (won.claim_id, "finished", "resumed")
    assert worker.done() and worker.exception() is None


async def _ledger_row(tl: Turnlog, thread: str, won: Continuation) -> TokenConsumed:
    """The token's last ledger record on the consumptions topic (the fact compaction keeps)."""
    reader = LogReader(tl.settings.connection, client_id="test-claim-row")
    await reader.start()
    try:
        p = partition_for(thread, 2)
        tp = TopicPartition(tl.topics.consumptions, p)
        await reader.assign({tp: None})
        values: list[bytes] = []

        async def keep(records: Sequence[Record]) -> None:
            values.extend(r.value for r in records if r.value is not None)

        await reader.read_to_end(keep, timeout=30)
    finally:
        await reader.stop()
    rows = [r for r in map(decode, values) if isinstance(r, TokenConsumed)]
    rows = [r for r in rows if r.token_id == won.token_id]
    assert rows and all(r.thread_id == thread for r in rows)
    return rows[-1]
