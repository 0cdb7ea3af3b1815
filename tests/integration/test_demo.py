"""``make demo`` is ``turnlog demo``: the whole story on its own throw-away topics, on the real
broker. It runs here as a newcomer runs it, in a subprocess, and what it says it did is checked:
one resume, the second claim told who continues the turn, the spent token refused, the forgery
refused twice, the rebuilt store equal to the live one -- and its topics gone afterwards."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.integration.cli_support import Cli, cli_env
from tests.kafka_helpers import eventually
from turnlog.kafka.topics import admin_client
from turnlog.settings import Settings


def test_the_demo_runs_the_story_end_to_end_and_cleans_up(bootstrap: str, tmp_path: Path) -> None:
    cli = Cli(cli_env(bootstrap, "unused.", "unused", tmp_path))
    ran = cli("demo", timeout=180)
    out = " ".join(ran.stdout.split())  # rich wraps at the terminal's width
    for said in (
        "PauseRecorded committed at",
        "granted to agent-replica-",
        "the other is told: already_continued — the resumed turn of thread",
        "AnswerRejected: already_consumed (step 5)",
        "publisher refused before Kafka: token_invalid",
        "AnswerRejected: token_invalid (step 1)",
        "worker totals: resumed 1, duplicates ignored 1, rejected 3",
        "→ equal",
        "paused → answered → resumed exactly once",
    ):
        assert said in out, (said, ran.stdout)
    assert "Traceback" not in ran.stderr

    async def none_left() -> bool:
        admin = admin_client(Settings(bootstrap_servers=bootstrap))
        await admin.start()
        try:
            return not [t for t in await admin.list_topics() if t.startswith("turnlog.cli.demo.")]
        finally:
            await admin.close()

    # Deleting a topic is asynchronous on the broker: its name may linger in metadata a moment.
    asyncio.run(eventually(none_left))
