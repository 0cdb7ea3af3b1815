"""Acceptance tests of the resume worker (issue 6), against the real broker.

What is proven here: a retried answer resumes once; competing answers from several processes
resume once and the rest are refused as already consumed; every refusal of the resume contract
that can arrive through Kafka is written by name and leaves the token spendable; poison on the
answers topic is refused and does not stop the worker; a pause whose window closes is expired
with an event; an answer published the moment its pause returns never loses the race with it;
and the resumed history on the wire is what seed 003 says, read by a plain Avro library.

The refusal cases share one deployment and one running worker (a worker start costs seconds, and
each case only reads its own thread's events); every other test has its own topics and group.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from unittest import mock

import avro.io
import avro.schema
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, Deployment, axes, sample_checkpoint
from tests.integration.worker_proc import Proc, common_options, spawn
from tests.integration.worker_support import (
    Follower,
    committed_events,
    keyed_deployment,
    of_type,
    running_worker,
    wait_owned,
)
from tests.kafka_helpers import eventually, wait_until_consumed
from turnlog.clock import utc_now
from turnlog.consumers.worker import ResumeWorker
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    PauseExpired,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.messages import NOT_DISPATCHED
from turnlog.contracts.refusals import RefusalReason
from turnlog.kafka.partitioning import answer_key
from turnlog.producers import pauses as pauses_module
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.tokens import Keyring, PauseClaims, TokenIssuer, generate_ed25519
from turnlog.wire.codec import encode, schema_for

# -- duplicates -------------------------------------------------------------------------------


async def test_same_answer_published_five_times_resumes_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    cp = sample_checkpoint("dup-thread")
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST)
    async with (
        running_worker(dep, tmp_path / "worker") as worker,
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        # Three at once (likely one batch: seen through the transaction's pending writes), then
        # two after the resume committed (seen through the store's ledger).
        await asyncio.gather(
            *(publisher.publish(pause.token, ANSWER, **axes(cp), answer_id="a-1") for _ in range(3))
        )

        async def resumed() -> list[TurnResumed]:
            return of_type(await committed_events(bootstrap, dep.topics.resumed), TurnResumed)

        await eventually(resumed)
        for _ in range(2):
            await publisher.publish(pause.token, ANSWER, **axes(cp), answer_id="a-1")
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
        duplicates = worker.stats.duplicates
    consumed = of_type(await committed_events(bootstrap, dep.topics.consumptions), TokenConsumed)
    turns = of_type(await committed_events(bootstrap, dep.topics.resumed), TurnResumed)
    rejected = await committed_events(bootstrap, dep.topics.rejections)
    assert [(c.token_id, c.answer_id, c.outcome) for c in consumed] == [
        (pause.token_id, "a-1", "resumed")
    ]
    assert [(t.token_id, t.answer_id) for t in turns] == [(pause.token_id, "a-1")]
    assert rejected == []
    assert duplicates == 4  # all five were processed; four produced nothing


async def test_five_answers_from_five_processes_resume_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, keys = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    cp = sample_checkpoint("race-five")
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        pause = await recorder.record(cp, request_json=REQUEST)
    go = tmp_path / "go"
    options = common_options(bootstrap, names.prefix, names.app, keys, 6)
    procs: list[Proc] = []
    async with running_worker(dep, tmp_path / "worker") as worker:
        await wait_owned([worker], 6)
        try:
            for i in range(5):
                response = {"answers": [{"selections": ["eu"], "other": f"choice-{i}"}]}
                procs.append(
                    spawn(
                        "publish",
                        tmp_path / f"publisher-{i}.log",
                        *options,
                        "--token",
                        pause.token,
                        "--axes",
                        json.dumps(axes(cp)),
                        "--response",
                        json.dumps(response),
                        "--answer-id",
                        f"answer-{i}",
                        "--ready",
                        str(tmp_path / f"ready-{i}"),
                        "--go",
                        str(go),
                    )
                )

            async def ready() -> bool:
                dead = [p for p in procs if not p.alive() and p.popen.returncode != 0]
                if dead:
                    raise AssertionError("\n".join(p.tail() for p in dead))
                return all((tmp_path / f"ready-{i}").exists() for i in range(5))

            await eventually(ready, timeout=60)
            go.touch()  # all five publish now
            codes = [await p.wait(timeout=60) for p in procs]
            assert codes == [0] * 5, "\n".join(p.tail() for p in procs)
        finally:
            for p in procs:
                p.kill()
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
    consumed = of_type(await committed_events(bootstrap, dep.topics.consumptions), TokenConsumed)
    turns = of_type(await committed_events(bootstrap, dep.topics.resumed), TurnResumed)
    rejected = of_type(await committed_events(bootstrap, dep.topics.rejections), AnswerRejected)
    assert len(consumed) == 1 and len(turns) == 1
    winner = consumed[0].answer_id
    assert turns[0].answer_id == winner and consumed[0].token_id == pause.token_id
    assert sorted(r.answer_id for r in rejected) == sorted(
        f"answer-{i}" for i in range(5) if f"answer-{i}" != winner
    )
    assert {(r.reason, r.step, r.token_id) for r in rejected} == {
        ("already_consumed", 5, pause.token_id)
    }


# -- refusals through Kafka -------------------------------------------------------------------


@dataclass
class Bench:
    """One deployment with a running worker, shared by the refusal and poison cases."""

    dep: Deployment
    worker: ResumeWorker
    recorder: PauseRecorder
    publisher: AnswerPublisher
    follower: Follower
    bootstrap: str

    def forge(
        self, pause: RecordedPause, *, issuer: TokenIssuer | None = None, **changes: object
    ) -> str:
        """A token for ``pause`` with some claims changed, signed by the deployment's key (or
        by ``issuer``)."""
        claims = PauseClaims.for_pause(
            pause.pause, pause_partition=pause.partition, pause_offset=pause.offset
        )
        return (issuer or self.dep.issuer).issue(dataclasses.replace(claims, **changes))

    def answer(
        self,
        pause: RecordedPause,
        *,
        token: str | None = None,
        response: object = ANSWER,
        **axis: str | None,
    ) -> AnswerSubmitted:
        stated: dict[str, str | None] = {**axes(pause.pause.checkpoint), **axis}
        return self.publisher.build(token or pause.token, response, **stated)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def bench(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bench]:
    root = tmp_path_factory.mktemp("bench")
    tag = uuid.uuid4().hex[:10]
    dep, _ = keyed_deployment(bootstrap, f"t{tag}.", f"app{tag}", root)
    async with PauseRecorder(dep.settings, dep.issuer) as recorder:
        follower = Follower(bootstrap, dep.topics)
        await follower.start()
        try:
            async with (
                running_worker(dep, root / "worker") as worker,
                AnswerPublisher(dep.settings, dep.verifier) as publisher,
            ):
                await wait_owned([worker], dep.settings.partitions)
                yield Bench(dep, worker, recorder, publisher, follower, bootstrap)
        finally:
            await follower.stop()


def _grafted_signature(b: Bench, p: RecordedPause) -> AnswerSubmitted:
    header, payload, _ = p.token.split(".")
    other_signature = b.forge(p, run_id="another-run").split(".")[2]
    return b.answer(p, token=f"{header}.{payload}.{other_signature}")


def _window(start: timedelta, end: timedelta) -> Callable[[Bench, RecordedPause], AnswerSubmitted]:
    def build(b: Bench, p: RecordedPause) -> AnswerSubmitted:
        now = utc_now()
        token = b.forge(p, issued_at=now + start, not_before=now + start, expires_at=now + end)
        return b.answer(p, token=token)

    return build


def _other_key(b: Bench, p: RecordedPause) -> AnswerSubmitted:
    private_pem, _ = generate_ed25519("stranger")
    settings = b.dep.settings
    stranger = TokenIssuer(
        Keyring.ed25519("stranger", private_pem), issuer=settings.issuer, audience=settings.audience
    )
    return b.answer(p, token=b.forge(p, issuer=stranger))


def _issued(
    issuer: str | None = None, audience: str | None = None
) -> Callable[[Bench, RecordedPause], AnswerSubmitted]:
    def build(b: Bench, p: RecordedPause) -> AnswerSubmitted:
        settings = b.dep.settings
        other = TokenIssuer(
            b.dep.keyring,
            issuer=issuer or settings.issuer,
            audience=audience or settings.audience,
        )
        return b.answer(p, token=b.forge(p, issuer=other))

    return build


def _no_asking_round(thread_id: str) -> TurnCheckpoint:
    """A checkpoint whose messages hold no assistant tool calls: nothing to answer."""
    cp = sample_checkpoint(thread_id)
    return dataclasses.replace(cp, messages=cp.messages[:2])


@dataclass(frozen=True)
class Case:
    reason: str
    build: Callable[[Bench, RecordedPause], AnswerSubmitted]
    checkpoint: Callable[[str], TurnCheckpoint] = sample_checkpoint
    resumable: bool = True  # whether the genuine answer can resume the pause afterwards


CASES: dict[str, Case] = {
    "axis_missing_scope": Case("axis_missing_scope", lambda b, p: b.answer(p, scope_hash=None)),
    "axis_missing_session": Case("axis_missing_session", lambda b, p: b.answer(p, session_id=None)),
    "axis_missing_run": Case("axis_missing_run", lambda b, p: b.answer(p, run_id=None)),
    "axis_missing_call": Case("axis_missing_call", lambda b, p: b.answer(p, call_id="")),
    "token_invalid-signature": Case("token_invalid", _grafted_signature),
    "token_invalid-garbage": Case("token_invalid", lambda b, p: b.answer(p, token="not.a.jwt")),
    "token_expired": Case("token_expired", _window(-timedelta(hours=2), -timedelta(hours=1))),
    "token_not_yet_valid": Case(
        "token_not_yet_valid", _window(timedelta(hours=1), timedelta(hours=2))
    ),
    "token_unknown_key": Case("token_unknown_key", _other_key),
    "token_wrong_issuer": Case("token_wrong_issuer", _issued(issuer="someone-else")),
    "token_wrong_audience": Case("token_wrong_audience", _issued(audience="someone-else")),
    "scope_mismatch": Case("scope_mismatch", lambda b, p: b.answer(p, scope_hash="tenant-b")),
    "session_mismatch": Case(
        "session_mismatch", lambda b, p: b.answer(p, session_id="another-session")
    ),
    "run_mismatch": Case("run_mismatch", lambda b, p: b.answer(p, run_id="another-run")),
    "call_mismatch": Case("call_mismatch", lambda b, p: b.answer(p, call_id="call-2")),
    "thread_mismatch": Case(
        "thread_mismatch",
        lambda b, p: dataclasses.replace(b.answer(p), thread_id=f"{p.thread_id}-other"),
    ),
    "request_hash_mismatch": Case(
        "request_hash_mismatch",
        lambda b, p: b.answer(
            p, token=b.forge(p, request_hash=hashlib.sha256(b'{"other":1}').hexdigest())
        ),
    ),
    "interaction_unknown": Case(
        "interaction_unknown",
        lambda b, p: b.answer(p, token=b.forge(p, interaction="no_such_interaction")),
    ),
    "response_invalid-schema": Case(
        "response_invalid",
        lambda b, p: b.answer(p, response={"answers": [{"selections": "eu", "other": None}]}),
    ),
    "response_invalid-json": Case("response_invalid", lambda b, p: b.answer(p, response="{nope")),
    "response_mismatch": Case(
        "response_mismatch",
        lambda b, p: b.answer(p, response={"answers": [{"selections": ["mars"], "other": None}]}),
    ),
    "no_recorded_turn_state": Case(
        "no_recorded_turn_state",
        # A well-signed token for a pause that was never recorded (its locator points at the
        # real pause's partition and offset, so the worker catches up before refusing).
        lambda b, p: b.answer(
            p, token=b.forge(p, token_id=uuid.uuid4().hex, checkpoint_id="cp-never-recorded")
        ),
    ),
    "checkpoint_mismatch": Case(
        "checkpoint_mismatch",
        lambda b, p: b.answer(p, token=b.forge(p, interrupt_id="int-of-another-pause")),
    ),
    "asking_round_missing": Case(
        "asking_round_missing",
        lambda b, p: b.answer(p),
        checkpoint=_no_asking_round,
        resumable=False,
    ),
}

#: Proven by other tests of this module (poison, competing answers, expiry), of
#: test_worker_hostile.py (misrouted, too large), of test_approvals.py (an approval replayed
#: onto other arguments: approval_mismatch), of test_cli_loop.py (a token whose pause a newer
#: one replaced: pause_superseded) and, for a failure no rule names -- which no record sent on
#: purpose can cause -- by tests/unit/test_handler.py.
ELSEWHERE = {
    "pause_superseded",
    "answer_undecodable",
    "already_consumed",
    "pause_expired",
    "misrouted",
    "answer_too_large",
    "answer_unprocessable",
    "approval_mismatch",
    "forgotten",  # tests/integration/test_forget_answer.py
    # a claim's refusals (step 8, no answer's): tests/integration/test_continuation.py
    "not_resumed",
    "already_continued",
    "claim_not_held",
}


def test_every_refusal_name_is_covered() -> None:
    assert {c.reason for c in CASES.values()} | ELSEWHERE == {r.value for r in RefusalReason}


@pytest.mark.parametrize("case_id", list(CASES))
async def test_refusal_is_written_by_name_and_leaves_the_pause_resumable(
    bench: Bench, case_id: str
) -> None:
    case = CASES[case_id]
    cp = case.checkpoint(f"refuse-{case_id}-{uuid.uuid4().hex[:6]}")
    with contextlib.ExitStack() as stack:
        if not case.resumable:
            # The recorder refuses such a pause itself; the worker must still refuse answers to
            # one written by a client that skips the check.
            stack.enter_context(mock.patch.object(pauses_module, "check_asking_round"))
        pause = await bench.recorder.record(cp, request_json=REQUEST)
    bad = case.build(bench, pause)
    await bench.publisher.publish_unchecked(bad)

    rejected = await bench.follower.wait_for(lambda: bench.follower.rejections(bad.answer_id))
    assert [(r.reason, r.step) for r in rejected] == [
        (case.reason, RefusalReason(case.reason).step)
    ], rejected[0].detail
    # The rejection and any consumption of this answer would share one transaction: none.
    assert bench.follower.consumed(pause.token_id) == []

    good = await bench.publisher.publish(pause.token, ANSWER, **axes(cp))
    if case.resumable:
        turns = await bench.follower.wait_for(lambda: bench.follower.resumed(pause.token_id))
        assert [t.answer_id for t in turns] == [good.answer_id]
        consumed = bench.follower.consumed(pause.token_id)
        assert [(c.answer_id, c.outcome) for c in consumed] == [(good.answer_id, "resumed")]
    else:
        # The recorded turn itself cannot be continued: refused again, still never spent.
        again = await bench.follower.wait_for(lambda: bench.follower.rejections(good.answer_id))
        assert [r.reason for r in again] == [case.reason]
        assert bench.follower.consumed(pause.token_id) == []


# -- poison -----------------------------------------------------------------------------------


async def test_poison_is_refused_by_name_and_the_worker_keeps_going(bench: Bench) -> None:
    cp = sample_checkpoint(f"poison-{uuid.uuid4().hex[:6]}")
    pause = await bench.recorder.record(cp, request_json=REQUEST)
    good = bench.publisher.build(pause.token, ANSWER, **axes(cp))
    body = encode(good)[10:]
    random_bytes = b"\x01" + os.urandom(63)  # neither C3 01 (single-object) nor 00 (registry)
    unknown_fingerprint = b"\xc3\x01" + os.urandom(8) + body
    not_an_answer = encode(pause.pause)  # a valid record of the wrong type
    partition = pause.partition
    producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap, acks="all")
    await producer.start()
    try:
        sent = {}
        for name, value in (
            ("random", random_bytes),
            ("fingerprint", unknown_fingerprint),
            ("wrong_type", not_an_answer),
        ):
            meta = await producer.send_and_wait(
                bench.dep.topics.answers,
                value,
                key=answer_key(cp.thread_id, f"poison-{name}"),
                partition=partition,
            )
            sent[name] = f"{bench.dep.topics.answers}:{partition}:{meta.offset}"
    finally:
        await producer.stop()
    await bench.publisher.publish_unchecked(good)  # behind the poison, on the same partition

    turns = await bench.follower.wait_for(lambda: bench.follower.resumed(pause.token_id))
    assert [t.answer_id for t in turns] == [good.answer_id]
    found = {name: bench.follower.rejections(answer_id) for name, answer_id in sent.items()}
    assert {name: [(r.reason, r.thread_id) for r in rs] for name, rs in found.items()} == {
        name: [("answer_undecodable", cp.thread_id)] for name in sent
    }
    assert found["random"][0].detail.startswith("not_single_object")
    assert found["fingerprint"][0].detail.startswith("unknown_fingerprint")
    assert found["wrong_type"][0].detail.startswith("unexpected_type")


# -- expiry -----------------------------------------------------------------------------------


async def test_a_closed_window_expires_the_pause_with_an_event(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """The owner expires a pause at its ``expires_at``; the verifier accepts a token up to
    ``exp + leeway``. An answer arriving in between passes step 1 and is refused at step 5 by the
    ledger's "expired" entry: ``pause_expired``. (After ``exp + leeway`` the earlier step wins and
    the refusal is ``token_expired`` -- the refusal cases prove that one.) The leeway is made
    wide here so that the answer lands in between however slow the machine."""
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path, leeway_seconds=60)
    cp = sample_checkpoint("expiring")
    async with (
        PauseRecorder(dep.settings, dep.issuer) as recorder,
        running_worker(dep, tmp_path / "worker", expiry_interval=0.2) as worker,
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        # Recorded after the worker restored its partitions: it must learn of the pause anyway.
        await wait_owned([worker], dep.settings.partitions)
        pause = await recorder.record(cp, request_json=REQUEST, ttl=timedelta(seconds=2))
        follower = Follower(bootstrap, dep.topics)
        await follower.start()
        try:
            expired = await follower.wait_for(lambda: follower.expired(pause.token_id), 20)
            consumed = follower.consumed(pause.token_id)
            assert [(c.outcome, c.answer_id) for c in consumed] == [("expired", "")]
            late = await publisher.publish(pause.token, ANSWER, **axes(cp))
            refused = await follower.wait_for(lambda: follower.rejections(late.answer_id))
        finally:
            await follower.stop()
    assert [(e.thread_id, e.checkpoint_id, e.expires_at) for e in expired] == [
        (cp.thread_id, cp.checkpoint_id, pause.pause.expires_at)
    ]
    assert [(r.reason, r.step) for r in refused] == [("pause_expired", 5)]
    events = await committed_events(bootstrap, dep.topics.resumed)
    assert of_type(events, TurnResumed) == []
    assert len(of_type(events, PauseExpired)) == 1


# -- the race between a pause and its answer --------------------------------------------------


async def test_an_answer_right_behind_its_pause_is_never_refused_for_a_missing_checkpoint(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path)
    threads, rounds = 10, 10
    recorders = [PauseRecorder(dep.settings, dep.issuer) for _ in range(threads)]
    await recorders[0].ensure_ready()  # creates the topics
    async with (
        # No expiry pass: its own catch-up would hide whether the answer path catches up.
        running_worker(dep, tmp_path / "worker", expiry_interval=3600) as worker,
        AnswerPublisher(dep.settings, dep.verifier) as publisher,
    ):
        await wait_owned([worker], dep.settings.partitions)
        await asyncio.gather(*(r.ensure_ready() for r in recorders))
        restored_before = worker.stats.restored_records

        async def pause_then_answer(i: int) -> None:
            for j in range(rounds):
                cp = sample_checkpoint(f"race-{i}-{j}")
                pause = await recorders[i].record(cp, request_json=REQUEST)
                await publisher.publish(pause.token, ANSWER, **axes(cp))

        try:
            await asyncio.gather(*(pause_then_answer(i) for i in range(threads)))
        finally:
            for r in recorders:
                await r.close()
        await wait_until_consumed(bootstrap, dep.settings.application_id, dep.topics.answers)
        caught_up = worker.stats.restored_records - restored_before
    rejected = of_type(await committed_events(bootstrap, dep.topics.rejections), AnswerRejected)
    turns = of_type(await committed_events(bootstrap, dep.topics.resumed), TurnResumed)
    assert [(r.reason, r.detail) for r in rejected] == []
    assert len({t.thread_id for t in turns}) == len(turns) == threads * rounds
    # The worker restored before any of these pauses existed: it resumed them by catching up.
    assert caught_up >= threads * rounds


# -- the rehydrated history on the wire -------------------------------------------------------


async def test_resumed_history_read_by_a_plain_avro_reader(bench: Bench) -> None:
    cp = sample_checkpoint(f"rehydrate-{uuid.uuid4().hex[:6]}", reserved=4)
    response = {"answers": [{"selections": ["eu", "us"], "other": "prefer Frankfurt"}]}
    pause = await bench.recorder.record(cp, request_json=REQUEST)
    sent = await bench.publisher.publish(pause.token, response, **axes(cp))
    await bench.follower.wait_for(lambda: bench.follower.resumed(pause.token_id))
    [record] = [
        r
        for r in bench.follower.raw
        if r.topic == bench.dep.topics.resumed and r.key == cp.thread_id.encode()
    ]
    value = record.value

    # Apache Avro, not turnlog's codec: header, fingerprint and body as any reader sees them.
    schema = avro.schema.parse(json.dumps(schema_for("TurnResumed")))
    assert value[:2] == b"\xc3\x01"
    # avro-python keeps {"type":"long"} for a logical-typed long in its canonical form; the
    # specification ([PRIMITIVES], [STRIP]) and Java reduce it to "long", and that is the form
    # every other reader fingerprints. Same known deviation as goavro#174 and AVRO-4004.
    canonical = schema.canonical_form.replace('{"type":"long"}', '"long"')
    assert value[2:10] == _crc64_avro(canonical.encode())
    body = io.BytesIO(value[10:])
    datum = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(body))
    assert body.tell() == len(value) - 10

    def tool(call_id: str, name: str, content: str) -> dict[str, object]:
        return {
            "role": "tool",
            "content": content,
            "tool_calls": [],
            "tool_call_id": call_id,
            "name": name,
        }

    expected = [dict(m) for m in cp.messages] + [
        tool(
            "call-1",
            "ask_user",
            'The person answered.\nanswer 1: selected "eu", "us"; wrote "prefer Frankfurt"',
        ),
        tool("call-2", "search", NOT_DISPATCHED),
        tool("call-3", "search", NOT_DISPATCHED),
        tool("call-4", "search", NOT_DISPATCHED),
    ]
    assert datum["history"] == expected
    assert datum["history"][2]["tool_calls"] == [
        {
            "id": "call-1",
            "name": "ask_user",
            "arguments": json.dumps(json.loads(REQUEST), separators=(",", ":"), sort_keys=True),
        },
        {"id": "call-2", "name": "search", "arguments": '{"q":2}'},
        {"id": "call-3", "name": "search", "arguments": '{"q":3}'},
        {"id": "call-4", "name": "search", "arguments": '{"q":4}'},
    ]
    assert {k: datum[k] for k in ("token_id", "answer_id", "thread_id", "tool_call_id")} == {
        "token_id": pause.token_id,
        "answer_id": sent.answer_id,
        "thread_id": cp.thread_id,
        "tool_call_id": "call-1",
    }
    assert json.loads(datum["response_json"]) == response
    assert datum["answered"]["selected_labels"] == ["eu", "us"]
    assert datum["answered"]["has_other"] is True


def _crc64_avro(data: bytes) -> bytes:
    """The Avro specification's CRC-64-AVRO fingerprint, little-endian as single-object encoding
    writes it -- written out here so that the check does not reuse the codec's own."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp.to_bytes(8, "little")
