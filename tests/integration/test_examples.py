"""Checked at the edge (issue 13): the example checkpoints are what ``turnlog pause --example``
prints and pause as they are; ``turnlog answer`` refuses a response that does not fit its
interaction before publishing and ``--wait`` prints the worker's decision; and each example
agent loop runs end to end -- pause, a separate task answers, the worker resumes, the loop goes
on with the answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.integration.cli_support import EXIT_REFUSED, EXIT_USAGE, Cli, Spawned, cli_env
from tests.integration.example_steps import ADAPTER_EXAMPLES, run_story
from turnlog.cli.examples import EXAMPLES, checkpoint_text
from turnlog.producers.pauses import read_checkpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("interaction", sorted(EXAMPLES))
def test_the_example_files_are_what_pause_example_prints(interaction: str) -> None:
    text = (ROOT / "examples" / "checkpoints" / f"{interaction}.json").read_text()
    assert text == checkpoint_text(interaction)
    assert read_checkpoint(text) == EXAMPLES[interaction][0]


def test_pause_example_answer_and_wait_for_the_outcome(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("keys", "new", "--kid", "k1")
    printed = cli("pause", "--example", "ask_user")
    assert "turnlog pause FILE --interaction ask_user --request" in printed.stderr
    assert cli("pause", "--example", "nope", check=EXIT_USAGE).lines == [
        "error: --example: no example for 'nope' (known: approve_tool_call, ask_user)"
    ]
    example = tmp_path / "cp.json"
    example.write_text(printed.stdout)
    request = json.dumps(EXAMPLES["ask_user"][1])
    paused = cli.json("pause", str(example), "--request", request)
    assert isinstance(paused, dict)
    cp = EXAMPLES["ask_user"][0]
    axes = [
        *("--scope", cp.scope_hash, "--session", cp.session_id),
        *("--run", cp.run_id, "--call", cp.tool_call_id),
    ]
    token = str(paused["token"])

    # Refused before publishing: the response does not fit ask_user's schema.
    bad = cli("answer", token, "--response", '{"answers": [{"picked": 1}]}', *axes, check=3)
    assert bad.lines[0].startswith("error: refused: response_invalid (step 4)")
    assert "published" not in bad.stdout

    worker = Spawned(cli, "worker")
    try:
        worker.wait_for_line("worker ")
        good = json.dumps(EXAMPLES["ask_user"][2])
        waited = cli("answer", token, "--response", good, *axes, "--wait", timeout=90)
        assert "published answer" in waited.stdout
        assert f"resumed thread {cp.thread_id} — 4 messages" in waited.stdout
        again = cli(
            "answer", token, "--response", good, *axes, "--wait", check=EXIT_REFUSED, timeout=90
        )
        assert again.lines[-1].startswith("error: rejected: already_consumed (step 5)")
    finally:
        worker.proc.send_signal(2)
        code, _ = worker.finish(timeout=60)
    assert code == 0


@pytest.mark.parametrize(
    ("script", "args", "says"),
    [
        ("ask_user_agent.py", [], "agent: Deploying billing to eu."),
        ("approve_tool_call_agent.py", ["approve"], "agent: Done: deployed billing to eu"),
        ("approve_tool_call_agent.py", ["edit"], "agent: Done: deployed billing to us"),
        ("approve_tool_call_agent.py", ["reject"], "not on a Friday"),
        ("langgraph_agent.py", [], "graph: Deploying billing. region=us"),
        ("pydantic_ai_agent.py", [], "deployed billing to us"),
        ("openai_agents_agent.py", [], "agent: Done: deployed billing to eu"),
    ],
    ids=["ask_user", "approve", "edit", "reject", "langgraph", "pydantic-ai", "openai-agents"],
)
def test_each_example_agent_loop_runs_end_to_end(
    bootstrap: str, names: Names, tmp_path: Path, script: str, args: list[str], says: str
) -> None:
    env = cli_env(bootstrap, names.prefix, names.app, tmp_path)
    Cli(env)("keys", "new", "--kid", "example")  # as each example's docstring says to
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "outcome accepted: True" in run.stdout
    assert says in run.stdout, run.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("framework", sorted(ADAPTER_EXAMPLES))
def test_the_continue_step_run_twice_at_once_and_again_continues_once(
    bootstrap: str, names: Names, tmp_path: Path, framework: str
) -> None:
    """Issue 37: two ``continue`` processes at once and a third afterwards -- one continues, the
    side effect runs once, and the others end promptly with the named refusal, one line each,
    instead of waiting forever on a turn someone else took."""
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    story = run_story(framework, cli, tmp_path)
    says = ADAPTER_EXAMPLES[framework][2]
    won = [c for c in story.continues if c.returncode == 0]
    assert len(won) == 1, story.continues
    assert says in won[0].stdout
    assert story.continues[2] is not won[0], "the one started afterwards must be refused"
    for lost in (c for c in story.continues if c is not won[0]):
        assert lost.returncode == 1, lost
        (line,) = lost.stderr.splitlines()
        assert line.startswith("AlreadyContinued: already_continued (step 8): the resumed turn")
        assert " was continued by " in line, line
        assert lost.stdout == ""
        # Promptly: told, not left waiting (the old loop waited until the 120 s wait_for); the
        # bound is loose as a loaded machine takes seconds to import a framework.
        assert lost.seconds < 60, lost
    assert story.continues[2].stderr.rstrip().endswith(", finished)")
    assert len(story.side_effects) == 1, story.side_effects


@pytest.mark.parametrize("framework", sorted(ADAPTER_EXAMPLES))
def test_an_adapter_example_without_keys_says_turnlog_keys_new_before_it_runs(
    bootstrap: str, names: Names, tmp_path: Path, framework: str
) -> None:
    """Issue 37: an agent without keys raised a traceback after its graph had stopped at the
    interrupt, which was never paused; now one line naming the fix, before the run."""
    script, files, _ = ADAPTER_EXAMPLES[framework]
    (tmp_path / "keys").mkdir()  # there, but empty
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "start"],
        env=cli_env(bootstrap, names.prefix, names.app, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert line.startswith("ConfigurationError: ") and "`turnlog keys new`" in line, line
    assert not (tmp_path / files / "pause.json").exists()
