"""A pause read again from the store with the hint its skim left is the pause skimmed afresh.

The resume worker reads every answered pause from its own store. The store kept, beside each
pause, where the skim at the door found its messages (``messages_hint``), so the resume reads the
scalars and steps over the messages instead of walking them again. The law: with the store's own
hint, with a wrong one, or with none, ``read_stored`` gives what ``skim_pause`` gives -- the same
fields, or the same refusal.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.test_handler_bytes import Rec
from tests.unit.test_skim import _PAUSE, any_pause
from turnlog.contracts.events import PauseRecorded
from turnlog.errors import DecodeError
from turnlog.kafka.partitioning import pause_key
from turnlog.kafka.topics import TopicSet
from turnlog.projections.applier import StoreApplier
from turnlog.projections.store import Store
from turnlog.settings import Settings
from turnlog.wire import codec
from turnlog.wire.skim import StoredPause, messages_hint, read_stored, skim_pause

TOPICS = TopicSet.from_settings(Settings(topic_prefix="t."))


def _outcome(stored: StoredPause | bytes) -> object:
    try:
        return read_stored(stored)
    except DecodeError as refused:
        return ("refused", refused.reason, refused.detail)


def _skimmed(value: bytes) -> object:
    try:
        return skim_pause(value)
    except DecodeError as refused:
        return ("refused", refused.reason, refused.detail)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(tmp_path / "db")
    yield opened  # type: ignore[misc]
    opened.close()


def _hinted(pause: PauseRecorded) -> tuple[bytes, tuple[int, ...]]:
    """The pause's bytes and the hint its skim leaves (examples without messages are skipped)."""
    value = codec.encode(pause)
    hint = messages_hint(skim_pause(value).checkpoint)
    assume(hint is not None)
    assert hint is not None
    return value, hint


def _storable(pause: PauseRecorded) -> PauseRecorded:
    """The pause with what the store's own rules require: a thread id, a sequence and a
    deadline it can index (the skim's law covers every other value)."""
    sequence = abs(pause.checkpoint.sequence) % 2**63
    cp = dataclasses.replace(pause.checkpoint, thread_id="thread-1", sequence=sequence)
    expires_at = max(pause.expires_at, datetime(1970, 1, 2, tzinfo=UTC))
    return dataclasses.replace(pause, checkpoint=cp, expires_at=expires_at)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(any_pause.map(_storable))
def test_a_pause_read_back_with_the_stores_hint_is_the_pause_skimmed(
    store: Store, pause: PauseRecorded
) -> None:
    value = codec.encode(pause)
    cp = pause.checkpoint
    applier = StoreApplier(store, TOPICS, messages_hints=True)
    applier.apply_now([Rec(TOPICS.pauses, 0, 0, pause_key(cp.thread_id, cp.checkpoint_id), value)])
    assert applier.stats.applied == 1
    (stored,) = store.pause_values([pause.token_id])
    assert stored is not None and stored.value == value
    # Every pause with messages leaves a hint (one block: every writer's way); none without.
    assert (stored.hint is not None) == bool(cp.messages)
    assert stored.hint == messages_hint(skim_pause(value).checkpoint)
    assert read_stored(stored) == skim_pause(value) == read_stored(value)


@settings(max_examples=300, deadline=None)
@given(any_pause, st.data())
def test_a_hint_that_does_not_fit_reads_as_the_skim_does(
    pause: PauseRecorded, data: st.DataObject
) -> None:
    value, hint = _hinted(pause)
    at, length, count, check, *starts = hint
    wrong = data.draw(
        st.one_of(
            st.tuples(st.integers(-3, len(value) + 3), st.just(length), st.just(count)).map(
                lambda t: (*t, check, *starts)
            ),
            st.tuples(st.just(at), st.integers(-3, len(value) + 3), st.just(count)).map(
                lambda t: (*t, check, *starts)
            ),
            st.tuples(st.just(at), st.just(length), st.integers(-1, count + 3)).map(
                lambda t: (*t, check, *starts)
            ),
            st.lists(st.integers(-2, len(value) + 2), max_size=count + 4).map(tuple),
            # Near misses: the items cut at a message boundary (whose first byte, the role of a
            # system message, is a zero like the terminator), or shifted by a byte or two.
            st.sampled_from([*starts[1:], length - 1, length + 1, length + 2]).map(
                lambda n: (at, n, count, check, *starts)
            ),
            st.sampled_from([at - 2, at - 1, at + 1, at + 2]).map(
                lambda a: (a, length, count, check, *starts)
            ),
            st.just((at, length, count, check ^ 1, *starts)),  # another CRC
            st.integers(0, count - 1).map(  # one start moved: the CRC covers the starts too
                lambda i: (at, length, count, check, *starts[:i], starts[i] + 1, *starts[i + 1 :])
            ),
            st.sampled_from([count - 1, count + 1]).map(
                lambda c: (at, length, c, check, *starts[:c], *([0] * (c - len(starts))))
            ),
        )
    )
    assume(tuple(wrong) != hint)
    assert _outcome(StoredPause(value, tuple(wrong))) == _skimmed(value)


@settings(max_examples=300, deadline=None)
@given(any_pause, st.data())
def test_scalars_that_changed_under_their_hint_read_as_the_skim_does(
    pause: PauseRecorded, data: st.DataObject
) -> None:
    # Any byte outside the messages: the scalars are read and checked as the skim reads them.
    # (The messages themselves are not walked again: the store took them after the full walk at
    # its door, and a hint describes only the value written beside it in the same batch.)
    value, hint = _hinted(pause)
    at, length = hint[0], hint[1]
    where = data.draw(st.one_of(st.integers(0, at - 1), st.integers(at + length, len(value) - 1)))
    flip = data.draw(st.integers(1, 255))
    flipped = value[:where] + bytes([value[where] ^ flip]) + value[where + 1 :]
    assert _outcome(StoredPause(flipped, hint)) == _skimmed(flipped)


def test_a_pause_without_messages_leaves_no_hint() -> None:
    pause = _PAUSE
    empty = dataclasses.replace(
        pause, checkpoint=dataclasses.replace(pause.checkpoint, messages=())
    )
    assert messages_hint(skim_pause(codec.encode(empty)).checkpoint) is None


def test_the_hints_are_the_workers_cache_and_leave_the_digest_alone(tmp_path: Path) -> None:
    # The worker's store keeps hints, a rebuilt projection does not; both hold the same data.
    value = codec.encode(_PAUSE)
    cp = _PAUSE.checkpoint
    record = Rec(TOPICS.pauses, 0, 0, pause_key(cp.thread_id, cp.checkpoint_id), value)
    digests, hints = [], []
    for keep in (True, False):
        with Store.open(tmp_path / f"db-{keep}") as store:
            StoreApplier(store, TOPICS, messages_hints=keep).apply_now([record])
            (stored,) = store.pause_values([_PAUSE.token_id])
            assert stored is not None and read_stored(stored) == skim_pause(value)
            hints.append(stored.hint)
            digests.append(store.digest())
    assert hints[0] is not None and hints[1] is None
    assert digests[0] == digests[1]
