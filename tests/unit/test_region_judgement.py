"""The cross-region judgement (pure): what a failover from A to B lost and doubled, by name."""

from __future__ import annotations

import json

from turnlog.audit.regions import (
    Copy,
    Refusal,
    RegionFacts,
    Resume,
    judge_regions,
    window_line,
)
from turnlog.consumers.screening import derived_event_id
from turnlog.region.control import Promotion


def _copy(role: str, n: int, ts: int) -> Copy:
    return Copy(role, 0, f"k{n}".encode(), f"v{n}".encode(), ts)


def _resume(token: str, answer: str, occurred: int, ts: int) -> Resume:
    return Resume(token, answer, derived_event_id("resumed", token, answer), occurred, ts)


def _regions() -> tuple[RegionFacts, RegionFacts]:
    """A with three pauses, three answers and two resumes; B with what was mirrored of them."""
    a, b = RegionFacts("A"), RegionFacts("B")
    for region in (a, b):
        region.records |= {_copy("pauses", 1, 1000), _copy("answers", 1, 1100)}
        region.pauses["t1"] = 1000
        region.answers["a1"] = ("t1", 1100)
        region.resumes.append(_resume("t1", "a1", 1150, 1160))
    a.records |= {_copy("pauses", 2, 1200), _copy("answers", 2, 1300), _copy("resumed", 2, 1310)}
    a.pauses["t2"] = 1200
    a.answers["a2"] = ("t2", 1300)
    a.resumes.append(_resume("t2", "a2", 1305, 1310))
    return a, b


def test_a_mirror_that_kept_up_leaves_an_empty_window() -> None:
    a, _ = _regions()
    report = judge_regions(a, a)
    assert report.clean
    assert report.window is None
    assert "window: empty" in window_line(report)


def test_what_a_holds_and_b_lacks_is_the_window_named_with_its_bounds() -> None:
    a, b = _regions()
    report = judge_regions(a, b)
    assert not report.clean
    assert report.window == (1200, 1310)
    assert report.unmirrored == {
        "pauses": 1, "answers": 1, "consumptions": 0, "resumed": 1, "rejections": 0,
    }  # fmt: skip
    assert report.answers_lost == [("a2", "t2", 1300)]
    assert report.pauses_missing == [("t2", 1200)]
    assert report.resumes_unmirrored == [("t2", "a2")]
    assert report.doubled == []
    line = window_line(report)
    assert line.startswith("window: 1970-01-01T00:00:01.200Z .. 1970-01-01T00:00:01.310Z")
    assert "1 answers" in line


def test_a_mirrored_resume_is_a_copy_not_a_second_resume() -> None:
    a, b = _regions()
    report = judge_regions(a, b)
    assert [d.token_id for d in report.doubled] == []


def test_the_same_answer_resumed_again_in_b_is_named_and_shares_its_event_id() -> None:
    a, b = _regions()
    b.answers["a2"] = ("t2", 1300)  # the answer was mirrored, its consumption was not
    b.resumes.append(_resume("t2", "a2", 5000, 5001))  # B resumed it again, later
    report = judge_regions(a, b)
    assert [(d.token_id, d.same_event) for d in report.doubled] == [("t2", True)]
    assert report.answers_lost == []


def test_another_answer_resumed_in_b_is_named_under_distinct_event_ids() -> None:
    a, b = _regions()
    b.answers["a2-retry"] = ("t2", 5000)
    b.pauses["t2"] = 1200
    b.resumes.append(_resume("t2", "a2-retry", 5000, 5001))
    report = judge_regions(a, b)
    (doubled,) = report.doubled
    assert doubled.answers_a == ("a2",)
    assert doubled.answers_b == ("a2-retry",)
    assert not doubled.same_event
    assert report.summary()["doubled_with_distinct_events"] == 1


def test_refusals_of_answers_to_unmirrored_pauses_are_counted_in_the_window() -> None:
    a, b = _regions()
    refused = Refusal("a2-b", "t2", "no_recorded_turn_state", "e", 6000, 6001)
    spent = Refusal("a1", "t1", "already_consumed", "e2", 6100, 6101)
    b.refusals += [refused, spent]
    b.answers["a2-b"] = ("t2", 6000)
    report = judge_regions(a, b)
    assert report.refused_unmirrored_pause == ["a2-b"]
    assert report.refused_spent == 1
    a.refusals.append(spent)  # a refusal mirrored from A is a copy, not B's own
    assert judge_regions(a, b).refused_spent == 0


def test_the_report_as_data_names_every_item() -> None:
    a, b = _regions()
    data = judge_regions(a, b).as_dict()
    assert data["answers_lost"] == [{"answer_id": "a2", "token_id": "t2", "timestamp_ms": 1300}]
    assert data["pauses_missing"] == [{"token_id": "t2", "timestamp_ms": 1200}]
    assert data["window"] == [1200, 1310]
    json.dumps(data)


def test_a_resume_event_id_depends_on_token_and_answer_not_on_the_region() -> None:
    assert derived_event_id("resumed", "t", "a") == derived_event_id("resumed", "t", "a")
    assert derived_event_id("resumed", "t", "a") != derived_event_id("resumed", "t", "b")


def test_a_promotion_round_trips_and_anything_else_promotes_nothing() -> None:
    p = Promotion("B", "alice", 1_796_000_000_000, "region A lost")
    assert Promotion.decode(p.encode()) == p
    assert p.line().startswith("region B promoted by alice at 2026-")
    for junk in (
        None,
        b"",
        b"not json",
        b"[]",
        json.dumps({"kind": "other", "region": "B", "by": "x", "at_ms": 1}).encode(),
        json.dumps(
            {"kind": "turnlog.region.promotion", "region": "B", "by": "", "at_ms": 1}
        ).encode(),
        json.dumps(
            {"kind": "turnlog.region.promotion", "region": "B", "by": "x", "at_ms": True}
        ).encode(),
        json.dumps(
            {"kind": "turnlog.region.promotion", "region": "B", "by": "x", "at_ms": 0}
        ).encode(),
    ):
        assert Promotion.decode(junk) is None, junk


def test_a_region_read_with_a_transaction_still_open_is_never_clean() -> None:
    a, _ = _regions()
    a.unsettled = ["turnlog.pauses[2]"]
    report = judge_regions(a, a)
    assert report.window is None and not report.clean
    assert report.summary()["unsettled"] == {"A": ["turnlog.pauses[2]"]}
