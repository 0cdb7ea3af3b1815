"""The adapter examples' steps as processes of their own, as their pages run them: ``start``,
``answer`` and then ``continue`` run by two processes at once and once more afterwards, a
``turnlog worker`` deciding meanwhile. What each ``continue`` printed and how it exited, and
the lines the example's side effect wrote (``deployments.log``), are handed back to the test.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.cli_support import Cli, Spawned

ROOT = Path(__file__).resolve().parents[2]
#: Each adapter example, the directory it keeps its files in, and what its continue prints.
ADAPTER_EXAMPLES = {
    "langgraph": ("langgraph_agent.py", "langgraph-example", "graph: Deploying billing. region=us"),
    "pydantic-ai": ("pydantic_ai_agent.py", "pydantic-ai-example", "deployed billing to us"),
    "openai-agents": (
        "openai_agents_agent.py",
        "openai-agents-example",
        "agent: Done: deployed billing to eu",
    ),
}


@dataclass(frozen=True)
class Continued:
    """One ``continue`` process: its exit code, output and how long it ran."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass(frozen=True)
class Story:
    continues: list[Continued]  # the two run at once, then the one run afterwards
    side_effects: list[str]  # deployments.log, a line per run of the side effect


def _step(script: str, step: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / script), step],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], started: float) -> Continued:
    stdout, stderr = proc.communicate(timeout=150)
    return Continued(proc.returncode, stdout, stderr, time.monotonic() - started)


def run_story(framework: str, cli: Cli, tmp_path: Path) -> Story:
    """Start, answer, two ``continue`` at once, one more after they ended."""
    script, files, _ = ADAPTER_EXAMPLES[framework]
    cli("keys", "new", "--kid", "example")
    worker = Spawned(cli, "worker")
    try:
        worker.wait_for_line("worker ")
        for step in ("start", "answer"):
            done = _finish(_step(script, step, cli.env), time.monotonic())
            assert done.returncode == 0, (step, done.stdout, done.stderr)
        started = time.monotonic()
        racing = [_step(script, "continue", cli.env) for _ in range(2)]
        continues = [_finish(proc, started) for proc in racing]
        continues.append(_finish(_step(script, "continue", cli.env), time.monotonic()))
    finally:
        worker.proc.send_signal(2)
        worker.finish(timeout=60)
    log = tmp_path / files / "deployments.log"
    return Story(continues, log.read_text().splitlines() if log.exists() else [])
