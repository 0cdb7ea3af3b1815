"""The worker's handler reads pauses skimmed (messages still encoded) and many at once; what it
writes and refuses is what the decoding path writes and refuses, record for record."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.test_approvals import ARGS, approval_pause
from tests.unit.test_resume import (
    INTERACTIONS,
    ISSUER,
    NOW,
    PAUSE,
    VERIFIER,
    make_answer,
    make_checkpoint,
    make_pause,
    token_for,
)
from turnlog.consumers.handler import AnswerHandler, BatchStoreView, Handled
from turnlog.contracts.approvals import approve, edit, reject
from turnlog.contracts.events import AnswerRejected, AnswerSubmitted, PauseRecorded, TurnResumed
from turnlog.contracts.ledger import LedgerEntry
from turnlog.kafka.partitioning import answer_key, partition_for
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings
from turnlog.tokens import PauseClaims
from turnlog.wire.codec import decode, encode
from turnlog.wire.skim import SkimmedPause, skim_pause

PARTITIONS = 6
TOPICS = TopicSet.from_settings(Settings(topic_prefix="t."))


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class DecodedView:
    """Pauses as decoded values, one read per question (the path the handler tests hold)."""

    def __init__(self, pauses: Sequence[PauseRecorded], ledgers: dict[str, LedgerEntry]) -> None:
        self.pauses = {p.token_id: p for p in pauses}
        self.ledger_rows = ledgers

    def pause(self, token_id: str) -> PauseRecorded | None:
        return self.pauses.get(token_id)

    def ledger(self, token_id: str) -> LedgerEntry | None:
        return self.ledger_rows.get(token_id)

    def pauses_applied(self, partition: int) -> int | None:
        return 10**9


class SkimmedView:
    """The worker's shape: stored bytes, skimmed on read, and batch reads."""

    def __init__(self, pauses: Sequence[PauseRecorded], ledgers: dict[str, LedgerEntry]) -> None:
        self.values = {p.token_id: encode(p) for p in pauses}
        self.ledger_rows = ledgers
        self.calls: list[str] = []

    def pause(self, token_id: str) -> SkimmedPause | None:
        self.calls.append("pause")
        value = self.values.get(token_id)
        return None if value is None else skim_pause(value)

    def ledger(self, token_id: str) -> LedgerEntry | None:
        self.calls.append("ledger")
        return self.ledger_rows.get(token_id)

    def ledgers(self, token_ids: Sequence[str]) -> list[LedgerEntry | None]:
        self.calls.append("ledgers")
        return [self.ledger_rows.get(t) for t in token_ids]

    def pause_values(self, token_ids: Sequence[str]) -> list[bytes | None]:
        self.calls.append("pause_values")
        return [self.values.get(t) for t in token_ids]

    def pauses_applied(self, partition: int) -> int | None:
        return 10**9


async def _nothing(partition: int) -> None:
    return None


def handler(view: Any) -> AnswerHandler:
    return AnswerHandler(
        topics=TOPICS,
        partitions=PARTITIONS,
        verifier=VERIFIER,
        interactions=INTERACTIONS,
        view=view,
        catch_up=_nothing,
        max_record_bytes=1_000_000,
    )


def record(answer: AnswerSubmitted, offset: int = 7) -> Rec:
    return Rec(
        TOPICS.answers,
        partition_for(answer.thread_id, PARTITIONS),
        offset,
        answer_key(answer.thread_id, answer.answer_id),
        encode(answer),
    )


def comparable(handled: Handled) -> Any:
    """The outputs with the per-event random ids blanked: everything else must be equal."""
    found = []
    for topic, key, value in handled.outputs:
        event = decode(value)
        found.append((topic, key, dataclasses.replace(event, event_id="")))
    return (found, handled.resumed, handled.duplicate, handled.refusal)


def _approval(response: dict[str, Any]) -> tuple[PauseRecorded, AnswerSubmitted]:
    pause = approval_pause()
    token = ISSUER.issue(PauseClaims.for_pause(pause))
    return pause, make_answer(token=token, response_json=json.dumps(response))


def _case(pause: PauseRecorded, **answer: Any) -> tuple[PauseRecorded, AnswerSubmitted]:
    return pause, make_answer(token=token_for(pause), **answer)


NO_ROUND = make_pause(
    make_checkpoint(messages=({"role": "user", "content": "hi"},)), token_id="tok-nr"
)
ANSWERED = make_pause(
    make_checkpoint(
        messages=(
            *make_checkpoint().messages,
            {"role": "tool", "content": "done", "tool_call_id": "call-1", "name": "ask_user"},
        )
    ),
    token_id="tok-done",
)
CASES = {
    "ask_user": (PAUSE, make_answer()),
    "approve": _approval(approve("deploy", ARGS)),
    "edit": _approval(edit("deploy", ARGS, {"service": "billing", "region": "us"})),
    "reject": _approval(reject("deploy", ARGS, "not now")),
    "request_hash_mismatch": _case(dataclasses.replace(PAUSE, request_json='{"other": 1}')),
    "asking_round_missing": _case(NO_ROUND),
    "asking_round_missing-closed": _case(ANSWERED),
    "checkpoint_mismatch": (
        dataclasses.replace(PAUSE, checkpoint=make_checkpoint(run_id="run-2")),
        make_answer(),
    ),
    "scope_mismatch": (PAUSE, make_answer(scope_hash="tenant-b")),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_the_skimmed_path_writes_and_refuses_as_the_decoded_one(case: str) -> None:
    pause, answer = CASES[case]
    decoded = await handler(DecodedView([pause], {})).handle(record(answer), {}, NOW)
    skimmed = await handler(SkimmedView([pause], {})).handle(record(answer), {}, NOW)
    assert comparable(skimmed) == comparable(decoded)
    if case in ("ask_user", "approve", "edit", "reject"):
        assert skimmed.resumed, skimmed.refusal
        [_, (_, _, value)] = skimmed.outputs
        assert decode(value, TurnResumed).history  # a real history, checked equal above
    else:
        [(_, _, value)] = skimmed.outputs
        assert case.startswith(decode(value, AnswerRejected).reason)


async def test_a_batch_reads_the_store_once_and_sees_its_own_spends() -> None:
    other = make_pause(make_checkpoint(thread_id="thread-1", checkpoint_id="cp-2"), token_id="t2")
    spent = make_pause(make_checkpoint(checkpoint_id="cp-3"), token_id="t3")
    view = SkimmedView([PAUSE, other, spent], {"t3": LedgerEntry("resumed", "ans-0")})
    answers = [
        make_answer(),
        make_answer(answer_id="ans-2"),  # the same token again, in the same transaction
        make_answer(answer_id="ans-3", token=token_for(other)),
        make_answer(answer_id="ans-0", token=token_for(spent)),  # a retry of a spent one
    ]
    pending: dict[str, LedgerEntry] = {}
    handled = await handler(view).handle_batch(
        [record(a, i) for i, a in enumerate(answers)], pending, NOW
    )
    assert view.calls == ["ledgers", "pause_values"]
    assert [h.resumed for h in handled] == [True, False, True, False]
    assert handled[1].refusal is not None and handled[1].refusal.reason == "already_consumed"
    assert handled[3].duplicate
    assert set(pending) == {PAUSE.token_id, "t2"}


async def test_after_a_catch_up_the_batch_reads_the_store_again() -> None:
    view = SkimmedView([], {})

    applied = [0]

    async def catch_up(partition: int) -> None:
        view.values[PAUSE.token_id] = encode(PAUSE)  # the pause arrives with the catch-up
        applied[0] = 10**6  # and the store's offset moves past it

    caught = AnswerHandler(
        topics=TOPICS,
        partitions=PARTITIONS,
        verifier=VERIFIER,
        interactions=INTERACTIONS,
        view=view,
        catch_up=catch_up,
        max_record_bytes=1_000_000,
    )
    view.pauses_applied = lambda partition: applied[0]  # type: ignore[method-assign]
    [handled] = await caught.handle_batch([record(make_answer())], {}, NOW)
    assert handled.resumed, handled.refusal
    assert view.calls == ["ledgers", "pause_values", "pause"]


def test_the_worker_view_shape_is_a_batch_view() -> None:
    assert isinstance(SkimmedView([], {}), BatchStoreView)
    assert not isinstance(DecodedView([], {}), BatchStoreView)


async def test_signatures_checked_on_threads_decide_as_checked_inline() -> None:
    """A batch big enough for the verification threads: every outcome -- resumed, refused at
    step 1 for each reason, a retry recognised without signature work -- as when inline."""
    spent = make_pause(make_checkpoint(checkpoint_id="cp-3"), token_id="t3")
    tampered = make_answer().token[:-4] + "AAAA"
    answers = [
        make_answer(),
        make_answer(answer_id="ans-2"),  # the same token again in the transaction
        make_answer(answer_id="ans-3", token=tampered),
        make_answer(answer_id="ans-4", token="not.a.token"),
        make_answer(answer_id="ans-0", token=token_for(spent)),  # a retry of a spent one
        make_answer(answer_id="ans-5", token=token_for(PAUSE, token_id="other")),
        make_answer(answer_id="ans-6", scope_hash="tenant-b"),
        *(make_answer(answer_id=f"ans-x{i}", token=tampered) for i in range(6)),
    ]
    records = [record(a, i) for i, a in enumerate(answers)]
    outcomes = []
    for threads in (1, 2):
        view = SkimmedView([PAUSE, spent], {"t3": LedgerEntry("resumed", "ans-0")})
        checks = AnswerHandler(
            topics=TOPICS,
            partitions=PARTITIONS,
            verifier=VERIFIER,
            interactions=INTERACTIONS,
            view=view,
            catch_up=_nothing,
            max_record_bytes=1_000_000,
            verify_threads=threads,
        )
        try:
            handled = await checks.handle_batch(records, {}, NOW)
        finally:
            checks.close()
        outcomes.append([comparable(h) for h in handled])
    assert outcomes[0] == outcomes[1]
    reasons = [o[3].reason.value if o[3] else ("dup" if o[2] else "ok") for o in outcomes[1]]
    assert reasons[:7] == [
        "ok",
        "already_consumed",
        "token_invalid",
        "token_invalid",
        "dup",
        "no_recorded_turn_state",
        "scope_mismatch",
    ]


async def test_batches_begun_together_decide_as_one_after_another() -> None:
    """The worker begins every partition's batch of a round -- their signature checks sent to
    the threads -- before it finishes the first. Finished in order, they decide exactly as when
    each batch is handled alone, one after another."""
    tampered = make_answer().token[:-4] + "AAAA"
    first = [make_answer(answer_id=f"a-{i}") for i in range(9)]  # one resumes, eight repeat
    second = [
        *(make_answer(answer_id=f"b-{i}", token=tampered) for i in range(8)),
        make_answer(answer_id="b-ok", token=token_for(PAUSE, token_id="other")),
    ]
    batches = [
        [record(a, i) for i, a in enumerate(first)],
        [record(a, 100 + i) for i, a in enumerate(second)],
    ]

    def handler() -> AnswerHandler:
        return AnswerHandler(
            topics=TOPICS,
            partitions=PARTITIONS,
            verifier=VERIFIER,
            interactions=INTERACTIONS,
            view=SkimmedView([PAUSE], {}),
            catch_up=_nothing,
            max_record_bytes=1_000_000,
            verify_threads=2,
        )

    alone = handler()
    try:
        expected = [
            [comparable(h) for h in await alone.handle_batch(batch, {}, NOW)] for batch in batches
        ]
    finally:
        alone.close()
    together = handler()
    try:
        pendings: list[dict[str, LedgerEntry]] = [{}, {}]
        started = [
            together.start_batch(batch, pending, NOW)
            for batch, pending in zip(batches, pendings, strict=True)
        ]
        assert all(s.checks is not None for s in started)  # both went to the threads
        found = [
            [comparable(h) for h in await together.finish_batch(s, pending, NOW)]
            for s, pending in zip(started, pendings, strict=True)
        ]
    finally:
        together.close()
    assert found == expected
    assert [o[3].reason.value if o[3] else "ok" for o in found[0]][:2] == ["ok", "already_consumed"]
    assert {o[3].reason.value for o in found[1][:8] if o[3]} == {"token_invalid"}
