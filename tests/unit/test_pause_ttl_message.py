"""A refused window says how long it was in seconds, as the caller wrote it, rather than
``datetime.timedelta(days=-1, seconds=86395)`` -- the repr of ``-5 s`` nobody recognises."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.deployment import REQUEST, make_deployment, sample_checkpoint
from turnlog.errors import PauseInvalid
from turnlog.producers.pauses import PauseRecorder


@pytest.mark.parametrize(
    ("window", "shown"),
    [
        (timedelta(seconds=-5), "got -5 seconds"),
        (timedelta(0), "got 0 seconds"),
        (timedelta(milliseconds=500), "got 0.5 seconds"),
        (timedelta(days=-30), "got -2592000 seconds"),
    ],
)
async def test_a_refused_window_is_shown_in_seconds(
    tmp_path: Path, window: timedelta, shown: str
) -> None:
    # Nothing listens on port 1: the refusal comes before any connection.
    dep = make_deployment("127.0.0.1:1", "unit.", "unit-app", tmp_path)
    recorder = PauseRecorder(dep.settings, dep.issuer)
    with pytest.raises(PauseInvalid) as refused:
        await recorder.record(sample_checkpoint("t-ttl"), request_json=REQUEST, ttl=window)
    assert str(refused.value) == f"ttl: a pause's window must be at least one second, {shown}"
    assert "datetime" not in str(refused.value)
