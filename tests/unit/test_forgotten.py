"""A forgotten thread without a broker: the worker's rule (``forgotten``, the answer's record
tombstoned, its text echoed nowhere; an answers tombstone catches the pauses up first), the
store's marker and its bound, and a store's files left without the thread's text."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from pathlib import Path

from tests.unit.test_handler import HOME, Harness, Rec, rejection
from tests.unit.test_resume import NOW, PAUSE, make_answer, make_checkpoint, make_pause
from turnlog.contracts.events import TokenConsumed
from turnlog.kafka.partitioning import answer_key, consumption_key, pause_key
from turnlog.kafka.topics import TopicSet
from turnlog.projections import forgotten, layout
from turnlog.projections.applier import StoreApplier
from turnlog.projections.store import Store
from turnlog.settings import Settings
from turnlog.wire.codec import encode

TOPICS = TopicSet.from_settings(Settings(topic_prefix="t."))
DAY_MS = 24 * 3600 * 1000


class ForgettingView(Harness().view.__class__):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.gone: set[str] = set()

    def forgotten(self, thread_id: str, now_ms: int) -> bool:
        return thread_id in self.gone


def _forgetting() -> tuple[Harness, ForgettingView]:
    h = Harness()
    view = ForgettingView()
    view.pauses[PAUSE.token_id] = PAUSE
    h.view = view
    h.handler.view = view
    return h, view


# -- the worker's rule --------------------------------------------------------------------------


async def test_an_answer_to_a_forgotten_thread_is_refused_and_its_record_tombstoned() -> None:
    h, view = _forgetting()
    view.pauses.clear()
    view.applied[HOME] = 18  # caught up past the token's pause: the forget's tombstones applied
    view.gone.add("thread-1")
    secret = f"SECRET{uuid.uuid4().hex}"
    answer = make_answer(response_json=f'{{"answers": [{{"other": "{secret}"}}]}}')
    handled = await h.answer(answer)
    assert handled.refusal is not None and handled.refusal.reason == "forgotten"
    assert handled.refusal.step == 5
    [rejected, tombstone] = handled.outputs
    assert tombstone == (TOPICS.answers, answer_key("thread-1", answer.answer_id), None)
    assert rejected[0] == TOPICS.rejections and secret.encode() not in (rejected[2] or b"")
    assert not handled.resumed


async def test_a_forgotten_thread_is_refused_whatever_its_token_says() -> None:
    h, view = _forgetting()
    view.gone.add("thread-1")
    view.pauses.clear()
    handled = await h.answer(make_answer(token="not.a.token"))
    assert handled.refusal is not None and handled.refusal.reason == "forgotten"
    assert handled.outputs[-1][2] is None


async def test_a_thread_not_forgotten_is_refused_as_before_with_nothing_tombstoned() -> None:
    h, view = _forgetting()
    view.pauses.clear()
    view.applied[HOME] = 18
    handled = await h.answer(make_answer())
    assert rejection(handled).reason == "no_recorded_turn_state"


async def test_an_answers_tombstone_catches_the_pauses_up_before_the_answers_after_it() -> None:
    """The race with forget: the store still holds the pause when the forget mark arrives, and
    the catch-up it triggers is what removes it before the answer behind it is handled."""
    h, view = _forgetting()

    async def catch_up(partition: int) -> None:
        h.caught_up.append(partition)
        view.pauses.clear()  # the pauses tombstones, applied
        view.applied[HOME] = 18
        view.gone.add("thread-1")

    h.handler.catch_up = catch_up
    answer = make_answer()
    mark = Rec(TOPICS.answers, HOME, 6, answer_key("thread-1", ""), None)
    record = Rec(TOPICS.answers, HOME, 7, answer_key("thread-1", answer.answer_id), encode(answer))
    first, second = await h.handler.handle_batch([mark, record], {}, NOW)
    assert first.outputs == [] and h.caught_up == [HOME]
    assert second.refusal is not None and second.refusal.reason == "forgotten"


# -- the store's marker ----------------------------------------------------------------------


@dataclasses.dataclass
class TRec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _pause_value(thread: str, marker: str, token: str) -> bytes:
    cp = make_checkpoint(thread_id=thread, prompt=f"Continue {marker}-prompt")
    return encode(make_pause(cp, token_id=token))


def test_the_marker_lives_until_a_day_past_the_later_of_forget_and_deadline(
    tmp_path: Path,
) -> None:
    pause = make_pause(make_checkpoint(thread_id="gone"), token_id="tok-gone")
    deadline = _ms(pause.expires_at)
    forgot_at = deadline - 1000  # forgotten while the pause was still open
    with Store.open(tmp_path / "db") as store:
        apply = StoreApplier(store, TOPICS).apply_now
        apply([TRec(TOPICS.pauses, 0, 0, pause_key("gone", "cp-1"), encode(pause), forgot_at)])
        assert not store.forgotten("gone", forgot_at)  # a thread with a pause is not forgotten
        key = pause_key("gone", pause.checkpoint.checkpoint_id)
        apply([TRec(TOPICS.pauses, 0, 1, key, None, forgot_at)])
        assert store.pause_for_token("tok-gone") is None
        assert store.forgotten("gone", forgot_at + 1)
        bound = deadline + forgotten.KEEP_MS
        assert store.forgotten("gone", bound - 1)
        assert not store.forgotten("gone", bound)  # the bound: past it, a token refuses
        assert not store.forgotten("kept", forgot_at + 1)

        # A later forget drops the markers past their bound: they stay a window's worth.
        later = bound + 1
        apply([TRec(TOPICS.pauses, 0, 2, pause_key("other", "cp-1"), None, later)])
        markers = store._scan(layout.META, *forgotten.marker_range())
        assert [k for k, _ in markers] == [forgotten.marker_key("other")]
        assert store.forgotten("other", later) and not store.forgotten("gone", forgot_at + 1)
        assert b"gone" not in b"".join(k for k, _ in markers)  # the key names no thread

        # Paused again after its forget: no longer forgotten.
        again = _pause_value("other", "new", "tok-new")
        apply([TRec(TOPICS.pauses, 0, 3, pause_key("other", "cp-9"), again, later)])
        assert not store.forgotten("other", later + 1)


async def test_a_store_keeps_no_byte_of_a_forgotten_thread_in_its_files(tmp_path: Path) -> None:
    """The WAL and the table files: the thread's text was in them; after the tombstones are
    applied (as a worker applies them: the compaction on a thread beside the event loop),
    with the store still open, no file holds it."""
    gone, kept = f"GONE{uuid.uuid4().hex}", f"KEPT{uuid.uuid4().hex}"
    path = tmp_path / "db"
    now = _ms(datetime.now(UTC))
    with Store.open(path) as store:
        applier = StoreApplier(store, TOPICS, scrub_forgotten=True)  # as the worker's
        records = []
        for n, (thread, marker) in enumerate((("t-gone", gone), ("t-kept", kept))):
            token = f"tok-{thread}"
            value = _pause_value(thread, marker, token)
            records.append(TRec(TOPICS.pauses, 0, n, pause_key(thread, "cp-1"), value, now))
            held = TokenConsumed(
                event_id=f"e-{n}", occurred_at=NOW, package_version="0", token_id=token,
                answer_id="a", thread_id=thread, checkpoint_id="cp-1", outcome="held",
                response_json=f'{{"other": "{marker}-held-answer"}}',
            )  # fmt: skip
            key = consumption_key(thread, token)
            records.append(TRec(TOPICS.consumptions, 0, n, key, encode(held), now))
        applier.apply_now(records)
        assert any(f.suffix == ".log" for f in path.iterdir() if _holding_file(f, gone.encode()))
        store.scrub({})  # the text in table files too, not only in the write-ahead log
        assert _holding(path, gone.encode()) and _holding(path, kept.encode())

        await applier.apply([TRec(TOPICS.pauses, 0, 5, pause_key("t-gone", "cp-1"), None, now)])
        assert store.forgotten("t-gone", now + 1) and store.latest("t-kept") is not None
        assert store.ledger("tok-t-gone") is None  # the held answer's text went with its row
        assert _holding(path, gone.encode()) == []
        assert _holding(path, kept.encode())  # the other thread untouched
    with Store.open(path) as reopened:  # and nothing of it comes back from a log on reopen
        assert reopened.latest("t-gone") is None and reopened.latest("t-kept") is not None
    assert _holding(path, gone.encode()) == []


def _holding(path: Path, marker: bytes) -> list[str]:
    return sorted(f.name for f in path.iterdir() if _holding_file(f, marker))


def _holding_file(path: Path, marker: bytes) -> bool:
    return path.is_file() and marker in path.read_bytes()


def test_one_checkpoint_tombstoned_leaves_the_thread_and_its_ledger(tmp_path: Path) -> None:
    """A tombstone of one of a thread's checkpoints drops that one; the thread is forgotten only
    once none is left (``forget`` tombstones each), its ledger rows going with the last."""
    now = _ms(datetime.now(UTC))
    with Store.open(tmp_path / "db") as store:
        apply = StoreApplier(store, TOPICS).apply_now
        first = make_pause(make_checkpoint(thread_id="t", checkpoint_id="cp-1"), token_id="k1")
        second = make_pause(make_checkpoint(thread_id="t", checkpoint_id="cp-2"), token_id="k2")
        spent = TokenConsumed(
            event_id="e", occurred_at=NOW, package_version="0", token_id="k2", answer_id="a",
            thread_id="t", checkpoint_id="cp-2", outcome="held", response_json="{}",
        )  # fmt: skip
        apply(
            [
                TRec(TOPICS.pauses, 0, 0, pause_key("t", "cp-1"), encode(first), now),
                TRec(TOPICS.pauses, 0, 1, pause_key("t", "cp-2"), encode(second), now),
                TRec(TOPICS.consumptions, 0, 0, consumption_key("t", "k2"), encode(spent), now),
            ]
        )
        apply([TRec(TOPICS.pauses, 0, 2, pause_key("t", "cp-1"), None, now)])
        assert store.pause_for_token("k1") is None and store.pause_for_token("k2") is not None
        assert store.ledger("k2") is not None and not store.forgotten("t", now + 1)
        apply([TRec(TOPICS.pauses, 0, 3, pause_key("t", "cp-2"), None, now)])
        assert store.ledger("k2") is None and store.forgotten("t", now + 1)


def test_a_secondary_following_a_projection_sees_a_forget(tmp_path: Path) -> None:
    """The inbox follows the projector's store as a RocksDB secondary, and the projector scrubs
    its files after a forget as the worker does: after the forced flush and compaction a running
    secondary no longer saw the writer's changes (the forgotten pause stayed on the inbox's list)
    until it opened the store again -- which it now does when the writer says it scrubbed. It
    goes on seeing what the writer writes after that, and the writer's files hold no byte of
    the forgotten thread."""
    path = tmp_path / "db"
    now = _ms(datetime.now(UTC))
    with Store.open(path) as store:
        apply = StoreApplier(store, TOPICS, scrub_forgotten=True).apply_now  # the projector's
        value = _pause_value("t-gone", "MARK", "tok-t-gone")
        apply([TRec(TOPICS.pauses, 0, 0, pause_key("t-gone", "cp-1"), value, now)])
        follower = Store.open_secondary(path, tmp_path / "follower")
        try:
            follower.catch_up()
            assert follower.pending_count(0) == 1
            apply([TRec(TOPICS.pauses, 0, 1, pause_key("t-gone", "cp-1"), None, now)])
            follower.catch_up()
            assert follower.pending_count(0) == 0
            assert not [f for f in path.iterdir() if f.is_file() and b"MARK" in f.read_bytes()]
            later = _pause_value("t-later", "LATER", "tok-t-later")
            apply([TRec(TOPICS.pauses, 0, 2, pause_key("t-later", "cp-1"), later, now)])
            follower.catch_up()
            assert follower.pending_count(0) == 1
        finally:
            follower.close()
