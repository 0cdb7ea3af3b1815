"""``turnlog pending`` a page at a time, against the real broker: 120 pauses in pages of 50,
every pause seen once, the filters narrowing through the store's waiting index, and
``turnlog status`` counting them from the store's counts."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.cli_support import EXIT_USAGE, Cli, cli_env
from turnlog.clock import utc_now
from turnlog.producers.pauses import PauseRecorder
from turnlog.settings import Settings
from turnlog.tokens import Keyring, TokenIssuer

PAUSES = 120


@pytest.fixture
def cli(bootstrap: str, names: Names, tmp_path: Path) -> Iterator[Cli]:
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    yield cli


async def _record(cli: Cli, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """120 pauses: every third of scope tenant-b, every fourth made two hours ago."""
    settings = Settings.from_env(cli.env)
    issuer = TokenIssuer(
        Keyring.from_directory(tmp_path / "keys"),
        issuer=settings.issuer,
        audience=settings.audience,
    )
    made: dict[str, dict[str, Any]] = {}
    now = utc_now()
    for old in (False, True):
        at = now - timedelta(hours=2) if old else now
        async with PauseRecorder(settings, issuer, clock=lambda at=at: at) as recorder:
            for i in range(PAUSES):
                if (i % 4 == 0) != old:
                    continue
                scope = "tenant-b" if i % 3 == 0 else "tenant-a"
                cp = dataclasses.replace(sample_checkpoint(f"page-{i:03}"), scope_hash=scope)
                recorded = await recorder.record(cp)
                made[recorded.token_id] = {"scope": scope, "old": old}
    assert len(made) == PAUSES
    return made


def _pages(cli: Cli, *options: str) -> tuple[list[list[dict[str, Any]]], list[str | None]]:
    pages, cursors = [], []
    after: list[str] = []
    while True:
        page = cli.json("pending", "--limit", "50", *options, *after)
        assert isinstance(page, dict)
        pages.append(page["pending"])
        cursors.append(page["next"])
        if page["next"] is None:
            return pages, cursors
        after = ["--after", page["next"]]


async def test_pending_pages_through_every_pause_once_and_filters(cli: Cli, tmp_path: Path) -> None:
    made = await _record(cli, tmp_path)

    pages, cursors = _pages(cli)
    assert [len(p) for p in pages] == [50, 50, 20]
    seen = [row["token_id"] for page in pages for row in page]
    assert len(seen) == len(set(seen)) == PAUSES and set(seen) == set(made)
    expiring = [row["expires_at_ms"] for page in pages for row in page]
    assert expiring == sorted(expiring)  # soonest deadline first, across pages
    assert all(isinstance(c, str) for c in cursors[:-1])

    tenant_b = {t for t, m in made.items() if m["scope"] == "tenant-b"}
    pages, _ = _pages(cli, "--scope", "tenant-b")
    assert {row["token_id"] for page in pages for row in page} == tenant_b
    assert all(row["scope"] == "tenant-b" for page in pages for row in page)

    old = {t for t, m in made.items() if m["old"]}
    pages, _ = _pages(cli, "--older-than", "1h")
    assert {row["token_id"] for page in pages for row in page} == old
    both = _pages(cli, "--older-than", "1h", "--scope", "tenant-b", "--interaction", "ask_user")
    assert {row["token_id"] for page in both[0] for row in page} == old & tenant_b
    none = cli.json("pending", "--interaction", "approve_tool_call")
    empty = {"pending": [], "next": None, "unfinalized": 0, "claimed_not_finished": []}
    assert none == {**empty, "as_of": none["as_of"]}  # type: ignore[index]

    table = cli("pending", "--limit", "2", "--scope", "tenant-a")
    assert "more: --after " in table.stdout and table.stdout.count("page-") == 2
    cursor = table.stdout.split("more: --after ", 1)[1].split()[0]
    following = cli.json("pending", "--limit", "2", "--scope", "tenant-a", "--after", cursor)
    assert isinstance(following, dict) and len(following["pending"]) == 2
    assert not {r["thread_id"] for r in following["pending"]} & set(table.stdout.split())

    status = cli.json("status")
    assert isinstance(status, dict) and status["pending"] == PAUSES
    assert status["oldest_pending"]["thread_id"] == "page-000"

    bad = cli("pending", "--after", "not-a-cursor", check=EXIT_USAGE)
    assert "not a page cursor" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    age = cli("pending", "--older-than", "soon", check=EXIT_USAGE)
    assert "--older-than takes an age" in age.stderr and "Traceback" not in age.stderr
