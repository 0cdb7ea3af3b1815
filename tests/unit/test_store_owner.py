"""Who holds a store: a second writer is told the owner's pid and host, not only "another
process" -- with several processes on one state directory, the pid is what a person acts on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnlog.errors import StoreError
from turnlog.projections.store import OWNER_FILE, Store

HOLD = (
    "import sys\n"
    "from turnlog.projections.store import Store\n"
    "store = Store.open(sys.argv[1])\n"
    "print('held', flush=True)\n"
    "sys.stdin.readline()\n"
    "store.close()\n"
)

RAW_HOLD = (  # a writer that is not turnlog's: it records no owner
    "import sys, rocksdict\n"
    "options = rocksdict.Options(raw_mode=True)\n"
    "options.create_if_missing(True)\n"
    "db = rocksdict.Rdict(sys.argv[1], options)\n"
    "print('held', flush=True)\n"
    "sys.stdin.readline()\n"
    "db.close()\n"
)


def _holding(code: str, path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.write("\n")
            proc.stdin.close()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def held(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    yield from _holding(HOLD, tmp_path / "db")


def test_a_second_writer_is_told_the_owners_pid_and_host(
    held: subprocess.Popen[str], tmp_path: Path
) -> None:
    with pytest.raises(StoreError) as refused:
        Store.open(tmp_path / "db")
    message = str(refused.value)
    assert f"already open read-write by pid {held.pid} on {socket.gethostname()}" in message
    assert "\n" not in message  # one line


def test_a_second_open_in_this_process_says_so(tmp_path: Path) -> None:
    mine = rf"by this process \(pid {os.getpid()}\)"
    with Store.open(tmp_path / "db"), pytest.raises(StoreError, match=mine):
        Store.open(tmp_path / "db")


def test_the_owner_record_lives_while_the_store_is_open_and_goes_with_it(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db"):
        owner = json.loads((tmp_path / "db" / OWNER_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
    assert not (tmp_path / "db" / OWNER_FILE).exists()
    with Store.open_secondary(tmp_path / "db", tmp_path / "reader"):  # readers claim nothing
        assert not (tmp_path / "db" / OWNER_FILE).exists()


def test_a_stale_owner_record_is_not_believed(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(gone.stdout)
    path = tmp_path / "db"
    path.mkdir()
    record = {"pid": dead_pid, "host": socket.gethostname(), "since": "x", "program": "old"}
    (path / OWNER_FILE).write_text(json.dumps(record))  # left by a writer that crashed
    for _ in _holding(RAW_HOLD, path):
        with pytest.raises(StoreError, match="another process") as refused:
            Store.open(path)
        assert f"pid {dead_pid}" not in str(refused.value)


def test_a_record_with_this_pid_from_an_earlier_process_is_not_believed(tmp_path: Path) -> None:
    path = tmp_path / "db"
    path.mkdir()
    record = {"pid": os.getpid(), "host": socket.gethostname(), "claim": "an earlier life"}
    (path / OWNER_FILE).write_text(json.dumps(record))  # pid 1 in a restarted container
    for _ in _holding(RAW_HOLD, path):
        with pytest.raises(StoreError, match="another process") as refused:
            Store.open(path)
        assert "this process" not in str(refused.value)


def test_destroy_leaves_nothing_even_after_a_crashed_owner(tmp_path: Path) -> None:
    path = tmp_path / "db"
    Store.open(path).close()
    (path / OWNER_FILE).write_text("{}")  # a crashed owner never removed its record
    (path / f"{OWNER_FILE}.0123").write_text("{}")  # nor the one it was writing
    Store.destroy(path)
    assert not path.exists()
