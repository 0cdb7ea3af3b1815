"""A pause's trail (``turnlog trail``, ``turnlog.audit.trail.read_trail``): paused, answered by
whom, spent, resumed, a second answer refused -- read back from the real broker, in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.test_api import api_settings
from turnlog import Turnlog
from turnlog.audit.trail import read_trail

ISSUER = "https://sso.example.com"


async def test_the_trail_says_who_answered_and_what_came_of_each_answer(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    thread = "trail-thread"
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        paused = await tl.pause(sample_checkpoint(thread), request=REQUEST)
        first = await tl.answer(
            paused.token, ANSWER, **paused.axes, answered_by="alice", answered_by_issuer=ISSUER
        )
        assert (await tl.outcome(first.answer_id, timeout=45)).accepted
        second = await tl.answer(paused.token, ANSWER, **paused.axes, answered_by="bob")
        refused = await tl.outcome(second.answer_id, timeout=45)
        assert refused.reason == "already_consumed"
        other = await tl.pause(sample_checkpoint("another-thread"), request=REQUEST)
    assert worker.exception() is None

    trail = await read_trail(settings, thread)
    seen = [(e.what, e.answer_id, e.answered_by) for e in trail]
    assert seen == [
        ("paused", None, None),
        ("answered", first.answer_id, "alice"),
        ("spent", first.answer_id, None),
        ("resumed", first.answer_id, None),
        ("answered", second.answer_id, "bob"),
        ("refused", second.answer_id, None),
    ]
    assert {e.token_id for e in trail} == {paused.token_id}  # nothing of another thread
    assert trail[1].answered_by_issuer == ISSUER and trail[4].answered_by_issuer is None
    assert trail[5].detail.startswith("already_consumed (step 5)")
    assert await read_trail(settings, thread, token_id=other.token_id) == []

    # The command prints the same trail, one fact a line, and as JSON.
    env = {
        **cli_env(bootstrap, names.prefix, names.app, tmp_path),
        "TURNLOG_PARTITIONS": "2",
        "TURNLOG_KEYS_DIR": str(settings.keys_dir),
    }
    cli = Cli(env)
    printed = cli("trail", thread).stdout.splitlines()
    assert [line.split()[1] for line in printed] == [w for w, _, _ in seen]
    assert f"answer {first.answer_id}  by alice (vouched for by {ISSUER})" in printed[1]
    data = cli.json("trail", thread, "--token", paused.token_id)
    assert isinstance(data, dict)
    assert [e["what"] for e in data["trail"]] == [w for w, _, _ in seen]
    assert cli("trail", "nobody-here").stdout.strip() == "nothing on the log for thread nobody-here"
