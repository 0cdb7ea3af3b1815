"""A broker that was never reached is not an outage (issue 27, items A1-A4), without a broker.

``bootstrap_servers`` refuses a malformed address by entry, naming the setting it came from; a
never-reached address is given up on in ``connect_timeout_seconds`` with one line first (what
plain connections to it found), an address that answered once still gets the outage budget;
and the CLI's hint fits the address: start the local broker for this machine's, look at the
address and the network for any other.

The closed ports are free ones below the ephemeral range (``tests.brokers.free_ports``), each
checked to refuse a connection before it is used.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

from tests.brokers import free_ports
from turnlog.cli.app import OPTION_NAMES, broker_hint
from turnlog.errors import BrokerUnavailable, SettingError
from turnlog.kafka.outage import (
    first_contact_budget,
    look_at,
    mark_reached,
    reached,
    ride_out,
)
from turnlog.settings import Settings, bootstrap_servers

OUTAGE_LOGGER = "turnlog.kafka.outage"


def closed_address() -> str:
    """``127.0.0.1:<port>`` where a connection is refused now (and no other test used it)."""
    port = free_ports(1)
    with socket.socket() as probe:
        probe.settimeout(2)
        assert probe.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED
    return f"127.0.0.1:{port}"


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == OUTAGE_LOGGER]


@pytest.fixture
def outage_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.WARNING, logger=OUTAGE_LOGGER)
    yield caplog


async def _refused() -> None:
    """What an aiokafka client's start raises when no bootstrap server answers."""
    raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1, 2)]")


# -- A3: the address is checked when the settings are built ----------------------------------


@pytest.mark.parametrize(
    ("value", "servers"),
    [
        ("127.0.0.1:9092", [("127.0.0.1", 9092)]),
        ("b-1.example.com:9096, b-2.example.com:9096", [
            ("b-1.example.com", 9096), ("b-2.example.com", 9096),
        ]),
        ("kafka_1:29092", [("kafka_1", 29092)]),
        ("[::1]:9092", [("::1", 9092)]),
        ("[fe80::1%eth0]:1", [("fe80::1%eth0", 1)]),
        ("localhost:65535", [("localhost", 65535)]),
    ],
)  # fmt: skip
def test_a_well_formed_address_is_read_as_its_servers(
    value: str, servers: list[tuple[str, int]]
) -> None:
    assert bootstrap_servers(value) == servers
    assert Settings(bootstrap_servers=value).bootstrap_servers == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("http://host:9092", "has a scheme"),
        ("PLAINTEXT://host:9092", "without PLAINTEXT://"),
        ("host", "has no port"),
        ("host:", "has no port"),
        ("[::1]", "has no port (host:port, e.g. [::1]:9092)"),
        (":9092", "has no host"),
        ("host:nine", "the port 'nine' is not a number"),
        ("host:+1", "the port '+1' is not a number"),
        ("host:0", "the port 0 is not in 1-65535"),
        ("host:65536", "the port 65536 is not in 1-65535"),
        ("a:1,,b:2", "has an empty entry"),
        ("a:1,", "has an empty entry"),
        ("my host:9092", "'my host' is not a host name or address"),
        ("::1:9092", "is written in brackets"),
        ("[nope]:9092", "'nope' is not an IPv6 address"),
        ("[::1:9092", "needs its closing ']'"),
    ],
)
def test_a_malformed_address_is_refused_naming_the_setting_and_the_entry(
    value: str, why: str
) -> None:
    with pytest.raises(ValueError, match=None) as parsed:
        bootstrap_servers(value)
    assert why in str(parsed.value)

    with pytest.raises(SettingError) as from_env:
        Settings.from_env({"TURNLOG_BOOTSTRAP_SERVERS": value})
    assert from_env.value.name == "TURNLOG_BOOTSTRAP_SERVERS" and from_env.value.value == value
    assert why in str(from_env.value) and "\n" not in str(from_env.value)

    with pytest.raises(SettingError) as from_option:
        Settings.from_env({}, names=OPTION_NAMES, bootstrap_servers=value)
    assert from_option.value.name == "--bootstrap-servers" and why in str(from_option.value)

    with pytest.raises(SettingError) as direct:
        Settings(bootstrap_servers=value)
    assert direct.value.name == "bootstrap_servers"


def test_a_malformed_address_from_elsewhere_is_named_by_where_it_came_from(
    tmp_path: Path,
) -> None:
    config = tmp_path / "client.properties"
    config.write_text("bootstrap.servers=https://b-1.example.com:9093\n")
    with pytest.raises(SettingError) as from_file:
        Settings.from_env({}, kafka_config=config)
    assert from_file.value.name == f"bootstrap.servers (--kafka-config {config})"
    assert "has a scheme" in str(from_file.value)

    with pytest.raises(SettingError) as local:
        Settings.from_env({"KAFKA_LOCAL_PORT": "nine"})
    assert local.value.name == "KAFKA_LOCAL_HOST/KAFKA_LOCAL_PORT"


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_connect_timeout_is_refused_naming_it(value: str) -> None:
    with pytest.raises(SettingError) as caught:
        Settings.from_env({"TURNLOG_CONNECT_TIMEOUT": value})
    assert caught.value.name == "TURNLOG_CONNECT_TIMEOUT" and repr(value) in str(caught.value)


def test_the_first_contact_budget_is_the_shorter_of_the_two() -> None:
    defaults = Settings()
    assert first_contact_budget(defaults) == (15.0, "TURNLOG_CONNECT_TIMEOUT")
    assert defaults.connect_timeout_seconds < defaults.broker_timeout_seconds / 10
    assert Settings.from_env({"TURNLOG_CONNECT_TIMEOUT": "2.5"}).connect_timeout_seconds == 2.5
    short_outages = Settings(broker_timeout_seconds=4, connect_timeout_seconds=15)
    assert first_contact_budget(short_outages) == (4, "TURNLOG_BROKER_TIMEOUT")


# -- A1, A2: a never-reached address, and one that answered once --------------------------------


async def test_a_never_reached_address_says_so_at_once_and_gives_up_in_the_connect_budget(
    outage_log: pytest.LogCaptureFixture,
) -> None:
    address = closed_address()
    settings = Settings(
        bootstrap_servers=address, connect_timeout_seconds=1.0, broker_timeout_seconds=300
    )
    attempts: list[float] = []

    async def attempt() -> None:
        attempts.append(time.monotonic())
        await _refused()

    started = time.time()
    with pytest.raises(BrokerUnavailable) as gave_up:
        await ride_out(attempt, settings=settings, who="unit")
    took = time.time() - started
    assert 1.0 <= took < 4.0, took
    assert gave_up.value.never_reached
    text = str(gave_up.value)
    assert address in text and "never reached in 1s (TURNLOG_CONNECT_TIMEOUT=1)" in text
    assert f"{address}: connection refused" in text and "KafkaConnectionError" in text
    assert "(('127.0.0.1'" not in text, "aiokafka's address tuples repeat the address"
    assert len(attempts) > 2, "retried with backoff within the budget"
    [line] = _lines(outage_log)
    message = line.getMessage()
    assert "never reached yet" in message and "connection refused" in message
    assert "up to 1s (TURNLOG_CONNECT_TIMEOUT)" in message and address in message
    assert line.created - started < 0.8, "the line comes with the first failure"
    assert not reached(address)


async def test_an_address_that_answered_once_gets_the_outage_budget(
    outage_log: pytest.LogCaptureFixture,
) -> None:
    address = closed_address()
    settings = Settings(
        bootstrap_servers=address, connect_timeout_seconds=0.3, broker_timeout_seconds=1.5
    )
    failures = 2

    async def flaky() -> str:
        nonlocal failures
        if failures:
            failures -= 1
            await _refused()
        return "answered"

    assert await ride_out(flaky, settings=settings, who="unit") == "answered"
    assert reached(address)
    outage_log.clear()

    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as gave_up:
        await ride_out(_refused, settings=settings, who="unit")
    took = time.monotonic() - started
    assert 1.5 <= took < 4.0, took  # the outage budget, not the 0.3 s first-contact one
    assert not gave_up.value.never_reached
    assert "unreachable for" in str(gave_up.value) and "TURNLOG_BROKER_TIMEOUT" in str(
        gave_up.value
    )
    [line] = _lines(outage_log)
    assert "never reached" not in line.getMessage()


async def test_an_attempt_that_hangs_is_looked_into_and_cut_off_at_the_budget(
    outage_log: pytest.LogCaptureFixture,
) -> None:
    """A silently dropped connection fails only at the client's own timeout (15 s for the
    admin client): the line must not wait for it, and neither may the give-up."""
    address = closed_address()
    settings = Settings(
        bootstrap_servers=address, connect_timeout_seconds=2.0, broker_timeout_seconds=300
    )
    cancelled = asyncio.Event()

    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    started = time.time()
    with pytest.raises(BrokerUnavailable) as gave_up:
        await ride_out(hangs, settings=settings, who="unit")
    took = time.time() - started
    assert 2.0 <= took < 6.0, took
    assert cancelled.is_set(), "the hanging attempt was left running"
    assert gave_up.value.never_reached and "connection refused" in str(gave_up.value)
    [line] = _lines(outage_log)
    assert "never reached yet" in line.getMessage() and "no answer within 1s" in line.getMessage()
    assert 0.9 <= line.created - started < 1.8, line.created - started


async def test_a_server_that_accepts_connections_is_not_called_unreachable_while_it_is_slow(
    outage_log: pytest.LogCaptureFixture,
) -> None:
    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # listens, answers nothing: what a slow or non-Kafka server looks like
        await writer.wait_closed()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = Settings(
        bootstrap_servers=f"127.0.0.1:{port}",
        connect_timeout_seconds=3.0,
        broker_timeout_seconds=300,
    )

    async def slow() -> str:
        await asyncio.sleep(1.6)  # past the look at 1 s: a topic creation on a busy broker
        return "done"

    try:
        assert await ride_out(slow, settings=settings, who="unit") == "done"
        assert _lines(outage_log) == []
        [look] = await look_at(f"127.0.0.1:{port}")
        assert look.connects and "no Kafka answer" in look.found
    finally:
        server.close()
        await server.wait_closed()


async def test_a_name_that_does_not_resolve_is_said_to() -> None:
    [look] = await look_at("no-such-host.invalid:9092")
    assert not look.connects
    assert str(look) == "no-such-host.invalid:9092: the name does not resolve"


def test_mark_reached_is_by_address() -> None:
    address = closed_address()
    assert not reached(address)
    mark_reached(f" {address} ")
    assert reached(address) and not reached(closed_address())


# -- A4: the hint fits the address ---------------------------------------------------------------


@pytest.mark.parametrize(
    "address", ["127.0.0.1:9092", "127.0.0.1:1", "localhost:9092", "[::1]:9092", "127.0.0.2:9"]
)
def test_this_machines_address_is_told_to_start_the_local_broker(address: str) -> None:
    assert broker_hint(address) == "start one with `turnlog broker up`"


@pytest.mark.parametrize(
    "address",
    [
        "no-such-host.invalid:9092",
        "10.0.0.5:9092",
        "b-1.example.com:9096",
        "127.0.0.1:9092,b-1.example.com:9096",  # one remote server: a local broker is no fix
    ],
)
def test_any_other_address_is_told_to_check_the_address_and_the_network(address: str) -> None:
    hint = broker_hint(address)
    assert "turnlog broker up" not in hint
    assert hint.startswith("check the address") and "TURNLOG_BOOTSTRAP_SERVERS" in hint
