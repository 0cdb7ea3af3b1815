"""``turnlog notify``'s refusals that need no broker: each one line and exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnlog.cli import app

SECRET = "0123456789abcdef-secret"


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        ((), {"TURNLOG_NOTIFY_SECRET": SECRET}, "name a webhook"),
        (("--url", "http://hooks.example/x"), {}, "notices are signed"),
        (("--url", "http://h/x"), {"TURNLOG_NOTIFY_SECRET": "short"}, "at least 16 bytes"),
        (("--url", "gopher://h/x"), {"TURNLOG_NOTIFY_SECRET": SECRET}, "http:// or https://"),
        (
            ("--url", "http://h/x", "--remind-before", "soon"),
            {"TURNLOG_NOTIFY_SECRET": SECRET},
            "a duration such as",
        ),
        (
            ("--url", "http://h/x", "--retry-for", "10s"),
            {"TURNLOG_NOTIFY_SECRET": SECRET},
            "from 1m to 30d",
        ),
        (("--url", "not-a-url"), {"TURNLOG_NOTIFY_SECRET": SECRET}, "'not-a-url'"),
        (
            ("--url", "htps://hooks.example/services/T0/B0/SECRETPATH"),
            {"TURNLOG_NOTIFY_SECRET": SECRET},
            "'htps://hooks.example/…'",
        ),
        (
            ("--url", "http://h/x", "--id", "two words"),
            {"TURNLOG_NOTIFY_SECRET": SECRET},
            "--id",
        ),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    args: tuple[str, ...],
    env: dict[str, str],
    said: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("TURNLOG_NOTIFY_SECRET", "TURNLOG_NOTIFY_URLS", "TURNLOG_NOTIFY_SLACK_URLS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["notify", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], lines
    assert "Traceback" not in result.output


def test_a_secret_file_that_is_missing_or_empty_is_one_line(tmp_path: Path) -> None:
    for path, said in ((tmp_path / "absent", "No such file"), (tmp_path / "empty", "no secret")):
        if path.name == "empty":
            path.write_text("\n\n")
        result = CliRunner().invoke(
            app, ["notify", "--url", "http://h/x", "--secret-file", str(path)]
        )
        assert result.exit_code == 2
        (line,) = result.stderr.splitlines()
        assert said in line
