"""Topics made by operators: a process that creates none verifies the topic set and refuses a
missing or under-replicated topic by name; ``turnlog topics plan`` is what an operator applies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.deployment import make_deployment
from tests.integration.cli_support import cli_env
from turnlog.errors import TopicMismatch
from turnlog.kafka.topics import TopicSet, admin_client, describe, ensure_topics
from turnlog.producers.pauses import PauseRecorder


async def test_without_topic_creation_a_missing_topic_is_refused_by_name(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path, partitions=2)
    settings = dep.settings.with_(create_topics=False)
    recorder = PauseRecorder(settings, dep.issuer)
    with pytest.raises(TopicMismatch) as caught:
        await recorder.ensure_ready()
    await recorder.stop()
    assert caught.value.reason == "topic_missing"
    assert f"{names.prefix}pauses" in str(caught.value)
    admin = admin_client(settings)
    await admin.start()
    try:
        assert (
            await describe(admin, [s.name for s in TopicSet.from_settings(settings).specs()]) == {}
        )
    finally:
        await admin.close()


async def test_verification_refuses_a_replication_below_the_settings(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep = make_deployment(bootstrap, names.prefix, names.app, tmp_path, partitions=2)
    admin = admin_client(dep.settings)
    await admin.start()
    try:
        created = await ensure_topics(admin, TopicSet.from_settings(dep.settings))
        assert len(created) == 5
        states = await describe(admin, created)
        assert {(s.replication, s.in_sync) for s in states.values()} == {(1, 1)}
        wanted = TopicSet.from_settings(dep.settings.with_(replication_factor=3))
        with pytest.raises(TopicMismatch) as caught:
            await ensure_topics(admin, wanted, create=False)
        assert caught.value.reason == "replication_factor_mismatch"
        assert "replication factor 1" in str(caught.value)
        # The same set at its own replication verifies without creating anything.
        assert await ensure_topics(admin, TopicSet.from_settings(dep.settings), create=False) == []
    finally:
        await admin.close()


def test_topics_plan_is_what_ensure_creates(bootstrap: str, names: Names, tmp_path: Path) -> None:
    env = cli_env(bootstrap, names.prefix, names.app, tmp_path)
    env |= {"TURNLOG_REPLICATION_FACTOR": "3", "TURNLOG_MIN_INSYNC_REPLICAS": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "turnlog", "topics", "plan", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    plan = {item["topic"]: item for item in json.loads(done.stdout)}
    expected = TopicSet(names.prefix, partitions=3, replication_factor=3, min_insync_replicas=2)
    assert sorted(plan) == sorted(s.name for s in expected.specs())
    for spec in expected.specs():
        assert plan[spec.name]["configs"] == spec.all_configs()
        assert plan[spec.name]["configs"]["min.insync.replicas"] == "2"
        assert plan[spec.name]["replication_factor"] == 3
    text = subprocess.run(
        [sys.executable, "-m", "turnlog", "topics", "plan"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"--topic {names.prefix}answers --partitions 3 --replication-factor 3" in text
