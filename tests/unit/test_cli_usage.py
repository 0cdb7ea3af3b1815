"""How ``turnlog`` reads its arguments and says a mistake in them, with no broker (issue 28).

Global options after the verb, one ``error:`` line (exit 2) for every usage error instead of
a box, help without reST backticks, durations a person reads, and a stream as JSON Lines.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from turnlog.cli import app
from turnlog.cli.answering import human_seconds
from turnlog.cli.app import print_json_line
from turnlog.cli.usage import hoist
from turnlog.cli.usage import plain as plain_help


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("pending", "--bootstrap-servers", "no-port-here"), "--bootstrap-servers"),
        (("pending", "--bootstrap-servers=no-port-here"), "--bootstrap-servers"),
        (("show", "thread-1", "--partitions", "0"), "--partitions"),
        (("topics", "ensure", "--topic-prefix", "newuser"), "--topic-prefix"),
        (("pending", "--json", "--connect-timeout", "-1"), "--connect-timeout"),
    ],
)
def test_a_global_option_after_the_verb_is_the_global_option(
    args: tuple[str, ...], option: str
) -> None:
    code, _, stderr = _run(*args)
    (line,) = stderr.splitlines()
    # The value was read as the global option (and refused as one, before any broker).
    assert code == 2 and line.startswith(f"error: {option}="), line


def test_hoisting_leaves_a_verbs_own_options_and_arguments_where_they_are() -> None:
    from typer.main import get_command

    group = get_command(app)
    ctx = group.make_context("turnlog", ["--help"], resilient_parsing=True)
    moved = hoist(
        group,  # type: ignore[arg-type]
        ctx,
        ["answer", "TOKEN", "--response", "{}", "--bootstrap-servers", "h:1", "--debug"],
    )
    assert moved == ["--bootstrap-servers", "h:1", "--debug", "answer", "TOKEN", "--response", "{}"]
    # pause has a --broker-timeout of its own: it stays the verb's.
    kept = hoist(group, ctx, ["pause", "cp.json", "--broker-timeout", "3"])  # type: ignore[arg-type]
    assert kept == ["pause", "cp.json", "--broker-timeout", "3"]
    assert hoist(group, ctx, ["tail", "--", "--state-dir"]) == ["tail", "--", "--state-dir"]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("pending", "--bogus"), "error: No such option: --bogus; try 'turnlog pending --help'"),
        (
            ("pendin",),
            "error: No such command 'pendin'. Did you mean 'pending'?; try 'turnlog --help'",
        ),
        (("show",), "error: Missing argument 'thread'; try 'turnlog show --help'"),
        (("pause", "--ttl", "soon"), "error: Invalid value for '--ttl'"),
        (("topics", "nope"), "error: No such command 'nope'"),
    ],
)
def test_a_usage_error_is_one_error_line_and_exit_2(args: tuple[str, ...], said: str) -> None:
    code, stdout, stderr = _run(*args)
    assert code == 2
    (line,) = stderr.splitlines()
    assert line.startswith(said), line
    assert not any(box in stderr + stdout for box in "╭╮╰╯│")


def test_help_shows_no_rest_backticks() -> None:
    for verb in ("pause", "answer", "pending", "worker", "replay", "audit"):
        code, stdout, _ = _run(verb, "--help")
        assert code == 0 and stdout.strip()
        assert "``" not in stdout, verb
    assert plain_help("``--example ask_user`` prints") == "--example ask_user prints"


def test_a_misspelt_variable_is_one_warning_line_and_the_verb_runs_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TURNLOG_PARTITONS", "3")
    code, _, stderr = _run("pause", "--example", "ask_user")
    assert code == 0
    assert stderr.splitlines()[0] == (
        "warning: TURNLOG_PARTITONS is not a turnlog setting and is ignored; "
        "did you mean TURNLOG_PARTITIONS?"
    )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (604791, "6d 23h 59m"),
        (90061, "1d 1h 1m"),
        (86400, "1d"),
        (3725, "1h 2m 5s"),
        (45.6, "45s"),
        (0, "0s"),
        (-3, "0s"),
    ],
)
def test_a_window_is_said_in_days_hours_and_minutes(seconds: float, shown: str) -> None:
    assert human_seconds(seconds) == shown


def test_a_stream_record_is_one_compact_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    print_json_line({"type": "TurnResumed", "history": [{"role": "user"}], "thread_id": "t"})
    print_json_line({"type": "AnswerRejected", "reason": "expired"})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("{") for line in lines)
    assert json.loads(lines[0])["history"] == [{"role": "user"}]
    assert " " not in lines[1]
