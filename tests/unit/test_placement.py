"""The worker group's placement: owners balanced and sticky, standbys on other members, warm
copies preferred at a takeover, and members' user data read defensively."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from hypothesis import given
from hypothesis import strategies as st

from turnlog.consumers.placement import (
    Holding,
    assignor_for,
    decode_standby,
    encode_standby,
    place,
)


def _members(*names: str, standbys: int = 0) -> dict[str, Holding]:
    return {n: Holding(standbys=standbys) for n in names}


def test_owners_are_balanced_like_round_robin() -> None:
    placed = place(range(24), _members("a", "b", "c"))
    assert sorted(len(s.active) for s in placed.values()) == [8, 8, 8]
    assert sorted(p for s in placed.values() for p in s.active) == list(range(24))
    assert all(not s.standby for s in placed.values())  # none asked for


def test_an_owner_keeps_what_it_owned() -> None:
    first = place(range(12), _members("a", "b"))
    holdings = {m: Holding(owned=frozenset(s.active)) for m, s in first.items()}
    again = place(range(12), {**holdings, "c": Holding()})
    # c joins: it gets four, each of a and b gives up two and keeps the rest.
    assert len(again["c"].active) == 4
    for m in ("a", "b"):
        assert set(again[m].active) <= set(first[m].active)
        assert len(again[m].active) == 4


def test_a_standby_never_sits_on_its_owner_and_they_spread() -> None:
    placed = place(range(24), _members("a", "b", "c", standbys=1))
    for m, share in placed.items():
        assert not set(share.active) & set(share.standby), m
    standby = [p for s in placed.values() for p in s.standby]
    assert sorted(standby) == list(range(24))  # one copy of each
    assert sorted(len(s.standby) for s in placed.values()) == [8, 8, 8]


def test_copies_are_capped_at_the_other_members() -> None:
    placed = place(range(6), _members("a", "b", standbys=3))
    assert placed["a"].standby == placed["b"].active
    assert placed["b"].standby == placed["a"].active


def test_a_member_that_asks_for_no_standbys_keeps_none() -> None:
    members = {"a": Holding(standbys=1), "b": Holding(standbys=1), "old": Holding()}
    placed = place(range(12), members)
    assert placed["old"].standby == []
    assert len(placed["old"].active) == 4
    # a's and b's partitions each have their copy on the other; old's on either.
    for p in placed["old"].active:
        assert p in placed["a"].standby or p in placed["b"].standby


def test_the_dead_owners_partitions_go_to_their_warm_copies() -> None:
    first = place(range(24), _members("a", "b", "c", standbys=1))
    # c dies: a and b come back saying what they owned and kept warm.
    survivors = {
        m: Holding(frozenset(first[m].active), frozenset(first[m].standby), 1) for m in ("a", "b")
    }
    after = place(range(24), survivors)
    for p in first["c"].active:
        taker = "a" if p in after["a"].active else "b"
        assert p in first[taker].standby, (p, taker)
    for m in ("a", "b"):
        assert set(first[m].active) <= set(after[m].active)
        assert len(after[m].active) == 12


@given(
    partitions=st.integers(min_value=0, max_value=40),
    names=st.sets(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=6),
    standbys=st.integers(min_value=0, max_value=3),
    seed=st.randoms(use_true_random=False),
)
def test_every_placement_is_balanced_and_whole(
    partitions: int, names: set[str], standbys: int, seed: object
) -> None:
    rng = seed  # hypothesis' Random: what each member claims to hold is arbitrary
    members = {
        n: Holding(
            frozenset(p for p in range(partitions) if rng.random() < 0.3),  # type: ignore[attr-defined]
            frozenset(p for p in range(partitions) if rng.random() < 0.3),  # type: ignore[attr-defined]
            standbys,
        )
        for n in names
    }
    placed = place(range(partitions), members)
    owners = [p for s in placed.values() for p in s.active]
    assert sorted(owners) == list(range(partitions))
    sizes = [len(s.active) for s in placed.values()]
    assert max(sizes) - min(sizes) <= 1
    copies = min(standbys, len(names) - 1)
    for p in range(partitions):
        holders = [m for m, s in placed.items() if p in s.standby]
        assert len(holders) == copies
        assert all(p not in placed[m].active for m in holders)
    assert place(range(partitions), members) == placed  # deterministic


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"v": 2}',
        b'{"v": 1, "owned": "all"}',
        b'{"v": 1, "owned": [-1]}',
        b'{"v": 1, "owned": [true]}',
        b'{"v": 1, "standbys": "many"}',
        b'{"v": 1, "standbys": 1' + b" " * 70_000 + b"}",
    ],
)
def test_a_members_unreadable_user_data_holds_nothing(data: bytes) -> None:
    assert Holding.decode(data) == Holding()


def test_standbys_asked_for_are_capped() -> None:
    assert Holding.decode(b'{"v": 1, "owned": [], "warm": [], "standbys": 1000}').standbys == 8


def test_holding_and_standby_round_trip() -> None:
    held = Holding(frozenset({3, 1}), frozenset({2}), 1)
    assert Holding.decode(held.encode()) == held
    assert decode_standby(encode_standby({"t": [5, 4]})) == {"t": frozenset({4, 5})}
    assert decode_standby(b'{"v": 1, "standby": {"t": ["x"]}}') == {}
    assert decode_standby(b"nonsense") == {}


def test_the_assignor_speaks_the_consumer_protocol() -> None:
    told: list[object] = []
    holdings = {
        "m1": Holding(owned=frozenset({0, 1}), standbys=1),
        "m2": Holding(standbys=1),
    }
    cluster = SimpleNamespace(partitions_for_topic=lambda topic: {0, 1, 2, 3})
    members = {
        m: ConsumerProtocol.METADATA.decode(
            ConsumerProtocolMemberMetadata(0, ["answers"], h.encode()).encode()
        )
        for m, h in holdings.items()
    }
    assignor = assignor_for(lambda: holdings["m1"], told.append)
    result = assignor.assign(cluster, members)
    mine = ConsumerProtocol.ASSIGNMENT.decode(result["m1"].encode())
    assert [(t, list(ps)) for t, ps in mine.assignment] == [("answers", [0, 1])]
    assignor.on_assignment(mine)
    assert told == [{"answers": frozenset({2, 3})}]
    sent = ConsumerProtocol.METADATA.decode(assignor.metadata(["answers"]).encode())
    assert Holding.decode(sent.user_data) == holdings["m1"]
    # An assignment from a round-robin leader carries no user data: no standbys.
    assignor.on_assignment(ConsumerProtocolMemberAssignment(0, [("answers", [0])], b""))
    assert told[-1] == {}
