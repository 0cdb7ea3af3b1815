"""The four axes as one value: refused by name when unstated or different, unpacked with **."""

from __future__ import annotations

import pytest

from tests.unit.test_resume import CLAIMS, make_answer, make_checkpoint
from turnlog.contracts.axes import Axes
from turnlog.contracts.refusals import RefusalReason


def test_a_pause_the_token_and_a_right_answer_state_the_same_axes() -> None:
    assert Axes.of_pause(make_checkpoint()) == Axes.of_claims(CLAIMS)
    assert Axes.stated_by(make_answer()) == Axes.of_claims(CLAIMS)


def test_axes_unpack_as_the_wire_fields() -> None:
    axes = Axes("tenant-a", "sess-1", "run-1", "call-1")
    assert dict(**axes) == {
        "scope_hash": "tenant-a",
        "session_id": "sess-1",
        "run_id": "run-1",
        "call_id": "call-1",
    }
    with pytest.raises(KeyError):
        axes["thread_id"]


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        ("scope_hash", RefusalReason.AXIS_MISSING_SCOPE),
        ("session_id", RefusalReason.AXIS_MISSING_SESSION),
        ("run_id", RefusalReason.AXIS_MISSING_RUN),
        ("call_id", RefusalReason.AXIS_MISSING_CALL),
    ],
)
def test_an_unstated_axis_is_refused_by_its_own_name(field: str, reason: RefusalReason) -> None:
    for unstated in (None, ""):
        stated = Axes(**{**Axes("s", "t", "r", "c"), field: unstated})
        refusal = stated.missing()
        assert refusal is not None and refusal.reason is reason


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        ("scope_hash", RefusalReason.SCOPE_MISMATCH),
        ("session_id", RefusalReason.SESSION_MISMATCH),
        ("run_id", RefusalReason.RUN_MISMATCH),
        ("call_id", RefusalReason.CALL_MISMATCH),
    ],
)
def test_a_different_axis_is_refused_by_its_own_name(field: str, reason: RefusalReason) -> None:
    token = Axes("s", "t", "r", "c")
    refusal = Axes(**{**token, field: "other"}).mismatch(token)
    assert refusal is not None and refusal.reason is reason
    assert "'other'" not in refusal.detail  # named by the reason, never quoted
    assert token.mismatch(token) is None and token.missing() is None
