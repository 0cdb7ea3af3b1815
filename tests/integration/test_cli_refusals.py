"""The CLI refuses bad input with one line and the README's exit code, and never writes half:

a bad setting (2, naming the variable or option), a pause that could not get its token (2, with
nothing on the pauses topic), an answer too large or nested too deeply (3, before Kafka), and a
``forget`` whose tombstone the broker refused (1, saying how many).

Checks that must happen before Kafka run against a port where nothing listens, with the default
outage budget of five minutes: a verb that went to the broker first would hang there instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.brokers import free_ports
from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.cli_support import (
    EXIT_FAILURE,
    EXIT_REFUSED,
    EXIT_USAGE,
    Cli,
    cli_env,
    local_token,
)
from tests.kafka_helpers import read_to_end
from turnlog.kafka.topics import admin_client


@pytest.fixture
def cli(bootstrap: str, names: Names, tmp_path: Path) -> Iterator[Cli]:
    yield Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path))


@pytest.fixture
def offline(names: Names, tmp_path: Path) -> Cli:
    """The CLI pointed at a local port where no broker listens (below the ephemeral range)."""
    return Cli(cli_env(f"127.0.0.1:{free_ports(1)}", names.prefix, names.app, tmp_path))


def _one_error_line(ran: object) -> str:
    lines = ran.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:") and "Traceback" not in lines[0]
    return str(lines[0])


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "args", "named", "value"),
    [
        ({"TURNLOG_PARTITIONS": "0"}, ("topics", "ensure"), "TURNLOG_PARTITIONS", "'0'"),
        ({"TURNLOG_PARTITIONS": "six"}, ("pending",), "TURNLOG_PARTITIONS", "'six'"),
        ({"TURNLOG_REPLICATION_FACTOR": "0"}, ("topics", "ensure"), "TURNLOG_REPLICATION", "'0'"),
        ({"TURNLOG_COMMIT_INTERVAL_MS": "-1"}, ("worker",), "TURNLOG_COMMIT_INTERVAL_MS", "'-1'"),
        ({"TURNLOG_BROKER_TIMEOUT": "soon"}, ("pending",), "TURNLOG_BROKER_TIMEOUT", "'soon'"),
        ({"TURNLOG_TOKEN_TTL_SECONDS": "-60"}, ("pending",), "TURNLOG_TOKEN_TTL", "'-60'"),
        ({"TURNLOG_MAX_ANSWER_BYTES": "0"}, ("pending",), "TURNLOG_MAX_ANSWER_BYTES", "'0'"),
        ({"TURNLOG_TOPIC_PREFIX": ""}, ("topics", "ensure"), "TURNLOG_TOPIC_PREFIX", "''"),
        ({"TURNLOG_APPLICATION_ID": ""}, ("worker",), "TURNLOG_APPLICATION_ID", "''"),
        ({}, ("--partitions", "0", "topics", "ensure"), "--partitions", "0"),
        ({}, ("--broker-timeout", "0", "pending"), "--broker-timeout", "0"),
        ({}, ("topics", "ensure", "--broker-timeout", "-3"), "--broker-timeout", "-3"),
        ({}, ("--topic-prefix", "a b.", "pending"), "--topic-prefix", "'a b.'"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it_and_exit_2(
    offline: Cli, env: dict[str, str], args: tuple[str, ...], named: str, value: str
) -> None:
    ran = offline.with_env(**env)(*args, check=EXIT_USAGE)
    line = _one_error_line(ran)
    assert named in line and value in line


# -- pause: nothing written without a token --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("[" * 50_000, "is not JSON"),
        ({"sequence": "one"}, "sequence"),
        ({"thread_id": 42}, "thread_id"),
        ({"safe_boundary": "yes"}, "safe_boundary"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0]"),
        ({"messages": {"role": "user"}}, "messages"),
        ({"thred_id": "typo"}, "thred_id"),
    ],
)
def test_a_bad_checkpoint_file_is_one_line_naming_the_field(
    offline: Cli, tmp_path: Path, body: str | dict[str, object], field: str
) -> None:
    offline("keys", "new", "--kid", "k1")
    path = tmp_path / "checkpoint.json"
    if isinstance(body, str):
        path.write_text(body)
    else:
        path.write_text(json.dumps({**sample_checkpoint("cli-bad").body(), **body}))
    line = _one_error_line(offline("pause", str(path), check=EXIT_USAGE))
    assert field in line and str(path) in line


async def test_a_pause_that_could_not_get_its_token_is_refused_before_it_is_written(
    cli: Cli, bootstrap: str, names: Names, tmp_path: Path
) -> None:
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    path = tmp_path / "checkpoint.json"
    path.write_text(sample_checkpoint("cli-ttl").encode())
    refusals = [
        (("--ttl", "0"), "--ttl"),
        (("--ttl", "-5"), "--ttl"),
        (("--interaction", "approve_deploy"), "'approve_deploy'"),
        (("--request", "not json"), "--request"),
    ]
    for options, named in refusals:
        line = _one_error_line(cli("pause", str(path), *options, check=EXIT_USAGE))
        assert named in line, (options, line)
    assert await read_to_end(bootstrap, names.topic("pauses")) == []

    # The same file with a sound window is recorded: the topic was writable all along.
    paused = cli.json("pause", str(path), "--ttl", "60")
    assert isinstance(paused, dict) and paused["token"]
    [record] = await read_to_end(bootstrap, names.topic("pauses"))
    assert record.offset == paused["offset"]


# -- answer: refused before Kafka ------------------------------------------------------------------


@pytest.mark.parametrize("response", ["[" * 50_000, "[" * 50_000 + "]" * 50_000])
def test_a_response_nested_too_deeply_is_one_refusal_line_and_exit_3(
    offline: Cli, tmp_path: Path, response: str
) -> None:
    offline("keys", "new", "--kid", "k1")
    token, stated = local_token(tmp_path / "keys", "cli-deep")
    ran = offline("answer", token, "--response", response, *stated, check=EXIT_REFUSED)
    line = _one_error_line(ran)
    assert "refused: response_invalid" in line


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"answers": [{"other": None}]}, "answers[0].selections is missing"),
        (
            {"answers": [{"selections": "eu", "other": None}]},
            "answers[0].selections must be a list, got text of 2 characters",
        ),
        (
            {"answers": [{"selections": ["eu"], "other": 3}]},
            "answers[0].other must be null or text, got a number",
        ),
    ],
)
def test_a_response_that_does_not_fit_says_what_is_wrong_where(
    offline: Cli, tmp_path: Path, answer: dict[str, object], said: str
) -> None:
    offline("keys", "new", "--kid", "k1")
    token, stated = local_token(tmp_path / "keys", "cli-unfit")
    ran = offline("answer", token, "--response", json.dumps(answer), *stated, check=EXIT_REFUSED)
    line = _one_error_line(ran)
    assert line == (
        "error: refused: response_invalid (step 4): the response does not fit the ask_user "
        f"schema: {said}"
    )


def test_an_answer_over_the_size_limit_is_refused_before_kafka(
    offline: Cli, tmp_path: Path
) -> None:
    offline("keys", "new", "--kid", "k1")
    token, stated = local_token(tmp_path / "keys", "cli-big")
    # One argument may not exceed 128 KiB (Linux's MAX_ARG_STRLEN): the default limit of
    # 256 KiB is covered by the unit tests; here the limit comes from the environment.
    big = json.dumps({"answers": [{"selections": ["eu"], "other": "x" * 100_000}]})
    limited = offline.with_env(TURNLOG_MAX_ANSWER_BYTES="50000")
    line = _one_error_line(limited("answer", token, "--response", big, *stated, check=EXIT_REFUSED))
    assert "refused: answer_too_large" in line and "50000 bytes" in line

    small = json.dumps({"answers": [{"selections": ["eu"], "other": None}]})
    limited = offline.with_env(TURNLOG_MAX_ANSWER_BYTES="100")
    line = _one_error_line(
        limited("answer", token, "--response", small, *stated, check=EXIT_REFUSED)
    )
    assert "answer_too_large" in line and "100 bytes" in line


# -- forget: an undelivered tombstone is a failure -------------------------------------------------


async def test_forget_whose_tombstone_is_refused_exits_1_saying_how_many(
    cli: Cli, bootstrap: str, names: Names, tmp_path: Path
) -> None:
    cli("keys", "new", "--kid", "k1")
    cli("topics", "ensure")
    path = tmp_path / "checkpoint.json"
    path.write_text(sample_checkpoint("cli-forget").encode())
    cli("pause", str(path))
    # The broker now refuses every record on the pauses topic as too large, tombstones too.
    admin = admin_client(bootstrap)
    await admin.start()
    try:
        configs = {"cleanup.policy": "compact", "max.message.bytes": "16"}
        resource = ConfigResource(ConfigResourceType.TOPIC, names.topic("pauses"), configs)
        await admin.alter_configs([resource])
    finally:
        await admin.close()

    line = _one_error_line(cli("forget", "cli-forget", "--yes", check=EXIT_FAILURE))
    assert "1 of 1 tombstones not delivered" in line
    assert len(await read_to_end(bootstrap, names.topic("pauses"))) == 1  # still there
