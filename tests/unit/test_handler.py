"""The worker's per-answer rules without a broker: routing by the record, nothing unverified
reaching the broker, bounded outputs, and no record that can make the handler raise."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_resume import (
    INTERACTIONS,
    NOW,
    PAUSE,
    RESPONSE,
    VERIFIER,
    make_answer,
    token_for,
)
from turnlog.consumers.handler import DETAIL_CHARS, AnswerHandler, Handled, clip
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.ledger import LedgerEntry
from turnlog.kafka.partitioning import answer_key, murmur2, partition_for
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings
from turnlog.wire.codec import decode, encode

PARTITIONS = 6
HOME = partition_for("thread-1", PARTITIONS)


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class FakeView:
    def __init__(self) -> None:
        self.pauses: dict[str, PauseRecorded] = {}
        self.ledgers: dict[str, LedgerEntry] = {}
        self.applied: dict[int, int] = {}
        self.broken = False

    def pause(self, token_id: str) -> PauseRecorded | None:
        if self.broken:
            raise RuntimeError("a bug in the store")
        return self.pauses.get(token_id)

    def ledger(self, token_id: str) -> LedgerEntry | None:
        return self.ledgers.get(token_id)

    def pauses_applied(self, partition: int) -> int | None:
        return self.applied.get(partition)


class Harness:
    def __init__(
        self, *, max_record_bytes: int = 1_000_000, marker_wait_seconds: float = 3.0
    ) -> None:
        self.view = FakeView()
        self.view.pauses[PAUSE.token_id] = PAUSE
        self.caught_up: list[int] = []
        self.catch_up_error: Exception | None = None
        self.topics = _topics()
        self.handler = AnswerHandler(
            topics=self.topics,
            partitions=PARTITIONS,
            verifier=VERIFIER,
            interactions=INTERACTIONS,
            view=self.view,
            catch_up=self._catch_up,
            max_record_bytes=max_record_bytes,
            marker_wait_seconds=marker_wait_seconds,
        )

    async def _catch_up(self, partition: int) -> None:
        self.caught_up.append(partition)
        if self.catch_up_error is not None:
            raise self.catch_up_error

    async def handle(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int = HOME,
        pending: dict[str, LedgerEntry] | None = None,
    ) -> Handled:
        record = Rec(self.topics.answers, partition, 7, key, value)
        return await self.handler.handle(record, {} if pending is None else pending, NOW)

    async def answer(self, answer: AnswerSubmitted, **kw: Any) -> Handled:
        kw.setdefault("key", answer_key(answer.thread_id, answer.answer_id))
        return await self.handle(encode(answer), **kw)


def _topics() -> TopicSet:
    return TopicSet.from_settings(Settings(topic_prefix="t."))


def rejection(handled: Handled) -> AnswerRejected:
    assert handled.refusal is not None, handled
    [(topic, _, value)] = handled.outputs
    assert topic.endswith("rejections")
    event = decode(value, AnswerRejected)
    assert event.reason == handled.refusal.reason.value
    return event


def forged(payload: dict[str, Any] | str, header: dict[str, Any] | None = None) -> str:
    """An unsigned token with any header and payload (the signature is junk)."""

    def part(obj: dict[str, Any] | str) -> str:
        raw = obj if isinstance(obj, str) else json.dumps(obj)
        return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode().rstrip("=")

    return f"{part(header or {'alg': 'EdDSA', 'kid': 'k1'})}.{part(payload)}.c2lnbmF0dXJl"


# -- the happy path and replays ---------------------------------------------------------------


async def test_a_valid_answer_writes_the_consumption_and_the_resumed_turn() -> None:
    h = Harness()
    pending: dict[str, LedgerEntry] = {}
    handled = await h.answer(make_answer(), pending=pending)
    assert handled.resumed and handled.refusal is None
    [(t1, _, v1), (t2, k2, v2)] = handled.outputs
    assert (t1, t2) == (h.topics.consumptions, h.topics.resumed)
    assert decode(v1, TokenConsumed).token_id == PAUSE.token_id
    assert decode(v2, TurnResumed).answer_id == "ans-1" and k2 == b"thread-1"
    assert pending == {PAUSE.token_id: LedgerEntry("resumed", "ans-1", "thread-1")}
    assert h.caught_up == []


async def test_a_retry_inside_the_transaction_and_after_it_writes_nothing() -> None:
    h = Harness()
    pending: dict[str, LedgerEntry] = {}
    await h.answer(make_answer(), pending=pending)
    again = await h.answer(make_answer(), pending=pending)
    assert again.duplicate and again.outputs == []
    h.view.ledgers[PAUSE.token_id] = LedgerEntry("resumed", "ans-1")
    assert (await h.answer(make_answer())).duplicate
    other = rejection(await h.answer(make_answer(answer_id="ans-2")))
    assert other.reason == "already_consumed"


async def test_a_refusal_names_the_answer_token_and_thread_it_refused() -> None:
    handled = await Harness().answer(make_answer(scope_hash="tenant-b"))
    event = rejection(handled)
    assert (event.reason, event.step) == ("scope_mismatch", 2)
    assert (event.answer_id, event.token_id, event.thread_id) == ("ans-1", "tok-1", "thread-1")
    assert handled.refusal is not None and event.detail == handled.refusal.detail
    assert handled.outputs[0][1] == b"thread-1"  # keyed by thread, like every thread record


async def test_an_undecodable_record_is_named_by_its_place() -> None:
    event = rejection(await Harness().handle(b"\x00junk", key=b"thread-1\x00a", partition=2))
    assert (event.reason, event.step, event.token_id) == ("answer_undecodable", 1, None)
    assert (event.answer_id, event.thread_id) == ("t.answers:2:7", "thread-1")


async def test_a_tombstone_is_nothing() -> None:
    assert await Harness().handle(None, key=b"thread-1\x00ans-1") == Handled()


# -- routing by the record ----------------------------------------------------------------------


async def test_an_answer_on_another_partition_is_refused_as_misrouted() -> None:
    h = Harness()
    wrong = (HOME + 1) % PARTITIONS
    event = rejection(await h.answer(make_answer(), partition=wrong))
    assert event.reason == "misrouted" and event.step == 1
    assert f"maps to partition {HOME} of {PARTITIONS}" in event.detail
    assert f"on partition {wrong}" in event.detail
    assert h.caught_up == []


async def test_kafkas_default_partitioner_on_the_composite_key_is_caught() -> None:
    """The likeliest mistake of a Java or Go client: hashing the whole key."""
    answer = make_answer()
    key = answer_key(answer.thread_id, answer.answer_id)
    by_key = (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
    handled = await Harness().answer(answer, key=key, partition=by_key)
    if by_key == HOME:  # the two hashes may agree for this one key: then it is routed right
        assert handled.resumed
    else:
        assert rejection(handled).reason == "misrouted"


@pytest.mark.parametrize(
    "key",
    [
        b"other-thread\x00ans-1",  # another thread than the value
        b"thread-1\x00ans-other",  # another answer than the value
        b"thread-1",  # not composite
        None,
        b"\xff\xfe\x00ans-1",  # not UTF-8
    ],
)
async def test_a_key_that_does_not_name_the_value_is_refused(key: bytes | None) -> None:
    event = rejection(await Harness().answer(make_answer(), key=key))
    assert event.reason == "misrouted" and "key" in event.detail


# -- nothing unverified reaches the broker ------------------------------------------------------


@pytest.mark.parametrize(
    "locator",
    [
        {"pause_partition": -1, "pause_offset": 0},
        {"pause_partition": 999, "pause_offset": 0},
        {"pause_partition": "2", "pause_offset": "x"},
        {"pause_partition": 2**70, "pause_offset": -(2**70)},
        {"pause_partition": None, "pause_offset": [1, 2]},
        {"pause_partition": True, "pause_offset": 1.5},
    ],
)
async def test_forged_locators_never_trigger_a_catch_up(locator: dict[str, Any]) -> None:
    h = Harness()
    payload = {"jti": "forged", "thread_id": "thread-1", **locator}
    event = rejection(await h.answer(make_answer(token=forged(payload))))
    assert event.reason == "token_invalid"
    assert h.caught_up == []


async def test_a_verified_token_missing_its_pause_catches_up_only_the_records_partition() -> None:
    h = Harness(marker_wait_seconds=0.2)
    h.view.pauses.clear()
    h.view.applied[HOME] = 3  # below the token's pause_offset (17): the answer may have overtaken
    event = rejection(await h.answer(make_answer()))
    assert event.reason == "no_recorded_turn_state"
    # Read again, with backoff, while the pause stays invisible: then refused, by the rule.
    assert len(h.caught_up) > 1 and set(h.caught_up) == {HOME}


async def test_a_pause_whose_commit_marker_lands_after_a_catch_up_is_still_found() -> None:
    """The recorder's commit returned; the broker writes the pause's marker a moment later, so
    the first catch-up stops short of it. The answer waits for it instead of being refused."""
    h = Harness()
    pause = h.view.pauses.pop(PAUSE.token_id)
    h.view.applied[HOME] = 17  # the stable end is the pause's own offset: not visible yet

    async def marker_lands_on_the_third_read(partition: int) -> None:
        h.caught_up.append(partition)
        if len(h.caught_up) == 3:
            h.view.pauses[pause.token_id] = pause
            h.view.applied[HOME] = 18

    h.handler.catch_up = marker_lands_on_the_third_read
    handled = await h.answer(make_answer())
    assert handled.resumed, handled.refusal
    assert h.caught_up == [HOME, HOME, HOME]


async def test_a_verified_token_already_caught_up_past_its_pause_is_not_read_again() -> None:
    h = Harness()
    h.view.pauses.clear()
    h.view.applied[HOME] = 18
    assert rejection(await h.answer(make_answer())).reason == "no_recorded_turn_state"
    assert h.caught_up == []


async def test_a_failing_catch_up_is_the_workers_failure_not_the_answers() -> None:
    h = Harness()
    h.view.pauses.clear()
    h.catch_up_error = KafkaConnectionError("broker gone")
    with pytest.raises(KafkaConnectionError):
        await h.answer(make_answer())


# -- hostile values never raise, and every output fits ------------------------------------------


async def test_a_lone_surrogate_in_the_token_id_is_refused_and_writable() -> None:
    token = forged('{"jti": "\\ud800", "thread_id": "thread-1"}')
    event = rejection(await Harness().answer(make_answer(token=token)))
    assert event.reason == "token_invalid"


async def test_a_signed_claim_holding_a_lone_surrogate_is_refused() -> None:
    token = token_for(PAUSE, run_id="run-\ud800")
    event = rejection(await Harness().answer(make_answer(token=token)))
    assert event.reason == "token_invalid" and "run_id" in event.detail


@pytest.mark.parametrize("where", ["payload", "header"])
async def test_json_nested_fifty_thousand_deep_is_refused(where: str) -> None:
    deep = "[" * 50_000
    token = forged(deep) if where == "payload" else forged({"jti": "x"}, header=None)
    if where == "header":
        head = base64.urlsafe_b64encode(deep.encode()).decode().rstrip("=")
        token = f"{head}.{token.split('.')[1]}.c2ln"
    event = rejection(await Harness().answer(make_answer(token=token)))
    assert event.reason == "token_invalid"


async def test_a_response_nested_too_deep_is_refused() -> None:
    event = rejection(await Harness().answer(make_answer(response_json="[" * 50_000)))
    assert event.reason == "response_invalid"


async def test_huge_unsigned_fields_make_a_small_rejection() -> None:
    h = Harness()
    huge_thread = "t" * 530_000
    token = forged(
        {"jti": "j" * 600_000, "thread_id": huge_thread}, {"alg": "EdDSA", "kid": "k" * 1_000_000}
    )
    answer = make_answer(token=token, thread_id=huge_thread, answer_id="a" * 100_000)
    key = answer_key(answer.thread_id, answer.answer_id)
    handled = await h.answer(answer, key=key, partition=partition_for(huge_thread, PARTITIONS))
    event = rejection(handled)
    assert event.reason == "token_unknown_key"
    [(_, out_key, value)] = handled.outputs
    assert len(out_key) + len(value) < 10_000
    assert len(event.detail) <= DETAIL_CHARS + 40


async def test_a_resumed_turn_over_the_record_limit_is_refused_as_too_large() -> None:
    h = Harness(max_record_bytes=1_000_000)
    text = "x" * 600_000
    response = json.dumps({"answers": [{"selections": [], "other": text}]})
    pending: dict[str, LedgerEntry] = {}
    event = rejection(await h.answer(make_answer(response_json=response), pending=pending))
    assert event.reason == "answer_too_large" and event.step == 4
    assert "1000000" in event.detail
    assert pending == {}  # the token stays spendable
    assert (await h.answer(make_answer(answer_id="ans-2", response_json=RESPONSE))).resumed


async def test_a_bug_while_handling_one_record_becomes_a_named_refusal() -> None:
    h = Harness()
    h.view.broken = True
    event = rejection(await h.answer(make_answer()))
    assert event.reason == "answer_unprocessable"
    assert event.detail.startswith("RuntimeError while handling it")
    assert "a bug in the store" not in event.detail  # its words stay in the log


@settings(max_examples=150, deadline=None)
@given(
    value=st.binary(max_size=300),
    key=st.one_of(st.none(), st.binary(max_size=40)),
    partition=st.integers(0, PARTITIONS - 1),
)
async def test_random_records_are_refused_never_raised(
    value: bytes, key: bytes | None, partition: int
) -> None:
    handled = await Harness().handle(value, key=key, partition=partition)
    assert handled.refusal is not None and not handled.resumed
    rejection(handled)


@settings(max_examples=150, deadline=None)
@given(
    payload=st.dictionaries(
        st.sampled_from(["jti", "thread_id", "pause_partition", "pause_offset", "kid", "exp"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(),
            st.text(max_size=20),
            st.lists(st.integers(), max_size=3),
        ),
    ),
)
async def test_tokens_with_claims_of_any_type_are_refused_without_a_catch_up(
    payload: dict[str, Any],
) -> None:
    h = Harness()
    handled = await h.answer(make_answer(token=forged(payload)))
    assert rejection(handled).step in (1, 2)
    assert h.caught_up == []


def test_clip_bounds_length_and_makes_text_encodable() -> None:
    assert clip("abc", 10) == "abc"
    assert clip(None, 3) == ""
    clipped = clip("\ud800" + "y" * 50, 10)
    clipped.encode("utf-8")
    assert clipped.startswith("\\ud800") and "characters" in clipped


class SupersedingView(FakeView):
    """A view that knows which pause each thread's checkpoint holds now."""

    def __init__(self) -> None:
        super().__init__()
        self.holds: dict[tuple[str, str], str] = {}

    def superseding(self, thread_id: str, checkpoint_id: str, token_id: str) -> str | None:
        newer = self.holds.get((thread_id, checkpoint_id))
        return newer if newer is not None and newer != token_id else None


async def test_a_token_whose_pause_a_newer_pause_replaced_is_refused_as_superseded() -> None:
    h = Harness()
    view = SupersedingView()
    view.applied[HOME] = 18
    h.view = view
    h.handler.view = view
    # The checkpoint holds a newer pause: the token's own was replaced, not never recorded.
    view.holds[("thread-1", PAUSE.checkpoint.checkpoint_id)] = "tok-2"
    event = rejection(await h.answer(make_answer()))
    assert (event.reason, event.step) == ("pause_superseded", 5)
    assert "tok-2" in event.detail and "answer the newer one" in event.detail
    # Nothing at the checkpoint (or only the token's own): nothing on record, as before.
    view.holds[("thread-1", PAUSE.checkpoint.checkpoint_id)] = PAUSE.token_id
    assert rejection(await h.answer(make_answer())).reason == "no_recorded_turn_state"
    view.holds.clear()
    assert rejection(await h.answer(make_answer())).reason == "no_recorded_turn_state"
