"""Driving the ``turnlog`` command in a subprocess, as a shell would: stdout, stderr, exit code."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from tests.deployment import REQUEST, axes, sample_checkpoint
from turnlog.clock import utc_now
from turnlog.contracts.resume import request_hash
from turnlog.settings import Settings
from turnlog.tokens import Keyring, PauseClaims, TokenIssuer

EXIT_FAILURE, EXIT_USAGE, EXIT_REFUSED, EXIT_BROKER, EXIT_INTERRUPTED = 1, 2, 3, 4, 130


@dataclass
class Ran:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def lines(self) -> list[str]:
        """The lines on stderr."""
        return self.stderr.splitlines()


class Cli:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def with_env(self, **changes: str) -> Cli:
        return Cli({**self.env, **changes})

    def __call__(self, *args: str, check: int | None = 0, timeout: float = 60) -> Ran:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "turnlog", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        ran = Ran(args, result.returncode, result.stdout, result.stderr, time.monotonic() - started)
        if check is not None:
            assert ran.returncode == check, (args, ran.returncode, ran.stdout, ran.stderr)
        return ran

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "--json").stdout)

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "turnlog", *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def cli_env(bootstrap: str, prefix: str, app: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TURNLOG_BOOTSTRAP_SERVERS": bootstrap,
        "TURNLOG_TOPIC_PREFIX": prefix,
        "TURNLOG_APPLICATION_ID": app,
        "TURNLOG_STATE_DIR": str(tmp_path / "state"),
        "TURNLOG_KEYS_DIR": str(tmp_path / "keys"),
        "TURNLOG_PARTITIONS": "3",
        "TURNLOG_COMMIT_INTERVAL_MS": "50",
    }


def local_token(keys_dir: Path, thread_id: str) -> tuple[str, list[str]]:
    """A valid token signed with the key ``turnlog keys new`` wrote, and the ``answer`` options
    stating its axes -- for checks that happen before Kafka, so no pause is needed."""
    settings = Settings()
    issuer = TokenIssuer(
        Keyring.from_directory(keys_dir), issuer=settings.issuer, audience=settings.audience
    )
    cp = sample_checkpoint(thread_id)
    now = utc_now()
    token = issuer.issue(
        PauseClaims(
            token_id=uuid.uuid4().hex,
            scope_hash=cp.scope_hash,
            session_id=cp.session_id,
            run_id=cp.run_id,
            tool_call_id=cp.tool_call_id,
            interrupt_id=cp.interrupt_id,
            thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id,
            interaction="ask_user",
            request_hash=request_hash(REQUEST),
            issued_at=now,
            not_before=now,
            expires_at=now + timedelta(hours=1),
        )
    )
    stated = axes(cp)
    options = [
        *("--scope", stated["scope_hash"]),
        *("--session", stated["session_id"]),
        *("--run", stated["run_id"]),
        *("--call", stated["call_id"]),
    ]
    return token, options


class Spawned:
    """A long-running verb in the background; its stderr read line by line as it comes."""

    def __init__(self, cli: Cli, *args: str) -> None:
        self.proc = cli.spawn(*args)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for_line(self, needle: str, timeout: float = 60) -> str:
        """The first stderr line containing ``needle``; fails past ``timeout`` or at exit."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line with {needle!r} in {timeout:.0f}s: {self.seen}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"exited before a line with {needle!r}: {self.seen}")
            self.seen.append(line)
            if needle in line:
                return line

    def finish(self, timeout: float) -> tuple[int, list[str]]:
        """Wait for the exit; the return code and every stderr line not read yet."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=10)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
        rest: list[str] = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                rest.append(line)
        self.seen += rest
        return self.proc.returncode, rest
