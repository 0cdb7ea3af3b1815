"""The worker group's timings an operator sets (issue 41): the session timeout -- how long a
killed worker keeps its partitions -- and the heartbeat, as ``TURNLOG_*`` settings and
``turnlog worker`` flags, checked when the settings are built and used by the worker's
consumer, so a takeover's figure is one a user can reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from turnlog.cli import app
from turnlog.errors import SettingError
from turnlog.settings import Settings


def test_the_session_timeout_and_heartbeat_are_read_from_the_environment() -> None:
    settings = Settings.from_env(
        {"TURNLOG_SESSION_TIMEOUT_MS": "2000", "TURNLOG_HEARTBEAT_INTERVAL_MS": "500"}
    )
    assert settings.session_timeout_ms == 2000
    assert settings.heartbeat_ms == 500


def test_the_defaults_are_kafkas_and_the_heartbeat_follows_the_session() -> None:
    assert Settings().session_timeout_ms == 10000
    assert Settings().heartbeat_ms == 1000  # a third of the session, at most a second
    assert Settings(session_timeout_ms=2400).heartbeat_ms == 800


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TURNLOG_SESSION_TIMEOUT_MS": "999"}, "TURNLOG_SESSION_TIMEOUT_MS"),
        ({"TURNLOG_SESSION_TIMEOUT_MS": "2s"}, "TURNLOG_SESSION_TIMEOUT_MS"),
        ({"TURNLOG_HEARTBEAT_INTERVAL_MS": "-1"}, "TURNLOG_HEARTBEAT_INTERVAL_MS"),
        # One heartbeat lost or late must not end the membership: at most a third.
        (
            {"TURNLOG_SESSION_TIMEOUT_MS": "3000", "TURNLOG_HEARTBEAT_INTERVAL_MS": "1001"},
            "TURNLOG_HEARTBEAT_INTERVAL_MS",
        ),
    ],
)
def test_a_bad_timing_is_refused_by_its_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingError) as caught:
        Settings.from_env(env)
    assert named in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_heartbeat_too_slow_for_the_session_is_refused_when_built() -> None:
    with pytest.raises(SettingError, match="a third of the session timeout"):
        Settings(session_timeout_ms=3000, heartbeat_interval_ms=1500)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("worker", "--session-timeout-ms", "500"), "--session-timeout-ms"),
        (("worker", "--session-timeout-ms", "3000", "--heartbeat-interval-ms", "2000"),
         "--heartbeat-interval-ms"),
    ],
)  # fmt: skip
def test_the_worker_refuses_a_bad_timing_in_one_line_before_any_broker(
    args: tuple[str, ...], option: str
) -> None:
    result = CliRunner().invoke(
        app, ["--bootstrap-servers", "127.0.0.1:1", "--connect-timeout", "1", *args]
    )
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error:") and option in line


def test_the_workers_group_consumer_uses_the_settings_timings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnlog.consumers.worker import ResumeWorker
    from turnlog.contracts.interactions import default_interactions
    from turnlog.kafka import clients
    from turnlog.projections.store import Store
    from turnlog.tokens import Keyring, TokenVerifier

    made: list[dict[str, Any]] = []

    def consumer(*args: Any, **kwargs: Any) -> object:  # what the worker asks Kafka for
        made.append(kwargs)
        return object()

    monkeypatch.setattr(clients, "consumer", consumer)
    settings = Settings(session_timeout_ms=2000, heartbeat_interval_ms=400)
    store = Store.open(tmp_path / "w")
    try:
        worker = ResumeWorker(
            settings,
            store=store,
            verifier=TokenVerifier(Keyring.hs256("k", b"x" * 32), issuer="i", audience="a"),
            interactions=default_interactions(),
        )
    finally:
        store.close()
    (group,) = [kw for kw in made if kw.get("group_id")]
    assert (group["session_timeout_ms"], group["heartbeat_interval_ms"]) == (2000, 400)
    assert worker._owners._refence_after == 2.0  # a failed fence is retried a session later
