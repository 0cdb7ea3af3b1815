"""``turnlog region promote`` and ``status`` on the shared broker (as region B): one record on
the control topic, written once; refused while region A still answers; a record there that is
no promotion promotes nothing -- and a passive worker takes over on the promotion, not before."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path

import pytest

from tests.conftest import Names
from tests.integration.cli_support import EXIT_FAILURE, EXIT_USAGE, Cli, Spawned, cli_env
from tests.integration.test_observability import http_get
from tests.integration.worker_support import keyed_deployment, running_worker
from tests.kafka_helpers import eventually
from turnlog.kafka import clients
from turnlog.kafka.topics import admin_client, ensure_topics
from turnlog.region.control import control_topic, ensure_control_topic


def _cli(bootstrap: str, names: Names, tmp_path: Path) -> Cli:
    return Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))


def test_promote_writes_one_promotion_and_status_says_who_and_when(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    cli = _cli(bootstrap, names, tmp_path)
    assert cli("region", "status").stdout == "not promoted: passive workers here answer nothing\n"
    ran = cli("region", "promote", "--by", "alice", "--region", "eu-2", "--reason", "eu-1 lost")
    assert ran.stdout.startswith("region eu-2 promoted by alice at 20")
    assert ran.stdout.rstrip().endswith("(eu-1 lost)")
    again = cli("region", "promote", "--by", "bob")
    assert again.stdout.startswith("region eu-2 promoted by alice")
    assert "(already; nothing written)" in again.stdout
    status = cli.json("region", "status")
    assert isinstance(status, dict)
    assert (status["promoted"], status["by"], status["region"]) == (True, "alice", "eu-2")


def test_promote_refuses_while_region_a_answers_and_needs_a_name(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    cli = _cli(bootstrap, names, tmp_path)
    ran = cli("region", "promote", "--by", "alice", "--source", bootstrap, check=EXIT_FAILURE)
    assert ran.lines == [
        f"error: region A at {bootstrap} still answers: stop its workers and MirrorMaker first "
        "(two regions resuming the same answers cannot be undone), or pass --force"
    ]
    assert cli("region", "status").stdout.startswith("not promoted")
    blank = cli("region", "promote", "--by", " ", check=EXIT_USAGE)
    assert blank.lines == ["error: --by must name who decides"]
    forced = cli("region", "promote", "--by", "alice", "--source", bootstrap, "--force")
    assert forced.stdout.startswith("region B promoted by alice")


async def test_a_passive_worker_answers_nothing_until_the_promotion(
    bootstrap: str, names: Names, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnlog.region.control")
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path, partitions=2)
    admin = admin_client(dep.settings)
    await admin.start()
    try:
        await ensure_topics(admin, dep.topics)  # B's operator made the topic set
    finally:
        await admin.close()
    name = control_topic(dep.settings.topic_prefix)
    await ensure_control_topic(bootstrap, name)
    producer = clients.producer(bootstrap, acks="all")
    await producer.start()
    try:
        # Another tool's record, and a promotion with no one named: neither promotes.
        junk = json.dumps({"kind": "turnlog.region.promotion", "region": "B", "by": "", "at_ms": 1})
        first = await producer.send_and_wait(name, b"not a promotion", partition=0)
        await producer.send_and_wait(name, junk.encode(), partition=0)
    finally:
        await producer.stop()
    async with running_worker(dep, tmp_path / "state", passive=True) as worker:

        async def warm_and_past_the_junk() -> bool:
            skipped = caplog.text.count("skipped a record on the region control topic")
            return worker.standby_current and skipped == 2

        await eventually(warm_and_past_the_junk, timeout=60, interval=0.05)
        assert f"at offset {first.offset}: not a promotion" in caplog.text
        assert worker.owned == [] and worker.promotion is None
        cli = _cli(bootstrap, names, tmp_path)
        await asyncio.to_thread(cli, "region", "promote", "--by", "carol")

        async def owns_all() -> bool:
            return worker.ready and sorted(worker.owned) == [0, 1]

        await eventually(owns_all, timeout=60, interval=0.05)
        assert worker.promotion is not None and worker.promotion.by == "carol"


async def test_lag_and_audit_of_a_region_against_itself_find_nothing_behind(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    dep, _ = keyed_deployment(bootstrap, names.prefix, names.app, tmp_path, partitions=2)
    admin = admin_client(dep.settings)
    await admin.start()
    try:
        await ensure_topics(admin, dep.topics)
    finally:
        await admin.close()
    producer = clients.producer(bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(dep.topics.resumed, b"x", key=b"k", partition=1)
    finally:
        await producer.stop()
    cli = _cli(bootstrap, names, tmp_path)
    lag = await asyncio.to_thread(cli, "region", "lag", "--source", bootstrap)
    assert lag.stdout.splitlines()[-1] == "behind: 0 records; lag 0.000 s"
    assert f"{names.prefix}resumed" in lag.stdout
    data = await asyncio.to_thread(cli.json, "region", "lag", "--source", bootstrap)
    assert isinstance(data, dict) and data["behind"] == 0
    assert len(data["partitions"]) == 5 * 2
    audit = await asyncio.to_thread(cli, "region", "audit", "--source", bootstrap)
    first, window = audit.stdout.splitlines()[:2]
    assert first.startswith(f"region {bootstrap} after {bootstrap}: nothing lost or doubled; ")
    assert window == f"window: empty (every record of {bootstrap} is in {bootstrap})"


async def test_turnlog_worker_passive_is_unready_until_the_promotion_then_takes_over(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    cli = _cli(bootstrap, names, tmp_path)
    await asyncio.to_thread(cli, "keys", "new", "--kid", "k1")
    await asyncio.to_thread(cli, "topics", "ensure")
    worker = Spawned(cli, "worker", "--passive", "--metrics-port", "0", "--log-level", "info")
    try:
        line = worker.wait_for_line("metrics and health on port")
        port = int(line.rsplit(" ", 1)[1])
        worker.wait_for_line("passive until `turnlog region promote`; Ctrl-C stops")
        worker.wait_for_line("standby copies of answers partitions [0, 1, 2] are current")
        assert (await http_get(port, "/readyz"))[0] == 503  # warm, and answering nothing
        await asyncio.to_thread(cli, "region", "promote", "--by", "dave", "--region", "eu-2")
        took = worker.wait_for_line("taking over the answers group")
        assert "region eu-2 promoted by dave at " in took

        async def ready() -> bool:
            return (await http_get(port, "/readyz"))[0] == 200

        await eventually(ready, timeout=60, interval=0.1)
    finally:
        worker.proc.send_signal(signal.SIGTERM)
        code, _ = await asyncio.to_thread(worker.finish, 45.0)
    assert code == 0, worker.seen
