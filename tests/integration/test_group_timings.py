"""The worker group's session timeout as the operator sets it (issue 41), on the real broker: a
value the broker's ``group.min.session.timeout.ms`` refuses is one line naming the setting and
the broker's bound, at once -- not five minutes of "broker unreachable" retries, as a join
refused with ``InvalidSessionTimeoutError`` was taken for an outage before."""

from __future__ import annotations

from pathlib import Path

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.conftest import Names
from tests.integration.cli_support import EXIT_FAILURE, Cli, cli_env
from turnlog.kafka.topics import admin_client


async def _broker_least_session_ms(bootstrap: str) -> int:
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        (node,) = (await admin.describe_cluster())["brokers"][:1]
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(node["node_id"]))]
        )
    finally:
        await admin.close()
    for response in responses:
        for resource in response.to_object()["resources"]:
            for entry in resource["config_entries"]:
                if entry["config_names"] == "group.min.session.timeout.ms":
                    return int(entry["config_value"])
    raise AssertionError("the broker did not say its group.min.session.timeout.ms")


async def test_a_session_timeout_below_the_brokers_least_is_one_line_at_once(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    least = await _broker_least_session_ms(bootstrap)
    # The suite's broker keeps Kafka's default least (6 s): a value under it is refused.
    assert least > 1000, f"the test broker allows sessions down to {least} ms"
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("keys", "new")
    cli("topics", "ensure")
    ran = cli("worker", "--session-timeout-ms", str(least - 1), check=EXIT_FAILURE, timeout=60)
    errors = [line for line in ran.lines if line.startswith("error:")]
    assert len(errors) == 1, ran.lines
    assert f"session timeout of {least - 1} ms" in errors[0]
    assert "group.min.session.timeout.ms" in errors[0]
    assert not any("unreachable" in line for line in ran.lines), ran.lines
    assert ran.seconds < 30  # at the join, not after the outage budget (300 s)


async def test_the_environment_sets_the_session_timeout_the_worker_joins_with(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    least = await _broker_least_session_ms(bootstrap)
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))
    cli("keys", "new")
    cli("topics", "ensure")
    env = cli.with_env(TURNLOG_SESSION_TIMEOUT_MS=str(least - 1))
    ran = env("worker", check=EXIT_FAILURE, timeout=60)
    assert any("TURNLOG_SESSION_TIMEOUT_MS" in line for line in ran.lines), ran.lines
