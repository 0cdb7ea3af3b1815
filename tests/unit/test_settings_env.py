"""Settings from the environment: a bad ``TURNLOG_*`` value is refused naming the variable."""

from __future__ import annotations

import math
import re

import pytest

from turnlog.errors import SettingError, TurnlogError
from turnlog.settings import Settings, SettingWarning, misspelled

NOT_NUMBERS = [
    ("TURNLOG_PARTITIONS", "three"),
    ("TURNLOG_PARTITIONS", "1.5"),
    ("TURNLOG_REPLICATION_FACTOR", ""),
    ("TURNLOG_COMMIT_INTERVAL_MS", "10ms"),
    ("TURNLOG_TOKEN_TTL_SECONDS", "1w"),
    ("TURNLOG_TOKEN_LEEWAY_SECONDS", "abc"),
    ("TURNLOG_BROKER_TIMEOUT", "soon"),
    ("TURNLOG_MAX_RECORD_BYTES", "1MB"),
    ("TURNLOG_MAX_ANSWER_BYTES", "0x"),
]

OUT_OF_RANGE = [
    ("TURNLOG_PARTITIONS", "0"),
    ("TURNLOG_PARTITIONS", "-3"),
    ("TURNLOG_REPLICATION_FACTOR", "0"),
    ("TURNLOG_COMMIT_INTERVAL_MS", "0"),
    ("TURNLOG_TOKEN_TTL_SECONDS", "-1"),
    ("TURNLOG_TOKEN_TTL_SECONDS", "0"),
    ("TURNLOG_TOKEN_LEEWAY_SECONDS", "-5"),
    ("TURNLOG_BROKER_TIMEOUT", "0"),
    ("TURNLOG_BROKER_TIMEOUT", "-2.5"),
    ("TURNLOG_BROKER_TIMEOUT", "nan"),
    ("TURNLOG_BROKER_TIMEOUT", "inf"),
    ("TURNLOG_MAX_RECORD_BYTES", "0"),
    ("TURNLOG_MAX_ANSWER_BYTES", "-1"),
    ("TURNLOG_TOPIC_PREFIX", ""),
    ("TURNLOG_TOPIC_PREFIX", "has space."),
    ("TURNLOG_APPLICATION_ID", ""),
    ("TURNLOG_BOOTSTRAP_SERVERS", ""),
]


@pytest.mark.parametrize(("variable", "value"), NOT_NUMBERS + OUT_OF_RANGE)
def test_a_bad_value_is_refused_naming_the_variable_and_the_value(
    variable: str, value: str
) -> None:
    with pytest.raises(SettingError) as caught:
        Settings.from_env({variable: value})
    error = caught.value
    assert isinstance(error, TurnlogError)
    assert error.name == variable and error.value == value
    assert variable in str(error) and repr(value) in str(error)
    assert "\n" not in str(error)


def test_good_values_are_read() -> None:
    settings = Settings.from_env(
        {
            "TURNLOG_PARTITIONS": " 3 ",
            "TURNLOG_REPLICATION_FACTOR": "3",
            "TURNLOG_COMMIT_INTERVAL_MS": "1",
            "TURNLOG_TOKEN_TTL_SECONDS": "60",
            "TURNLOG_TOKEN_LEEWAY_SECONDS": "0",
            "TURNLOG_BROKER_TIMEOUT": "2.5",
            "TURNLOG_MAX_RECORD_BYTES": "2000000",
            "TURNLOG_MAX_ANSWER_BYTES": "1",
            "TURNLOG_TOPIC_PREFIX": "team-a.turnlog_",
        }
    )
    assert settings.partitions == 3 and settings.replication_factor == 3
    assert settings.commit_interval_ms == 1 and settings.token_ttl_seconds == 60
    assert settings.token_leeway_seconds == 0 and math.isclose(settings.broker_timeout_seconds, 2.5)
    assert settings.max_record_bytes == 2_000_000 and settings.max_answer_bytes == 1
    assert settings.topic_prefix == "team-a.turnlog_"
    assert Settings.from_env({}) == Settings()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partitions", 0),
        ("replication_factor", -1),
        ("commit_interval_ms", 0),
        ("token_ttl_seconds", 0),
        ("token_leeway_seconds", -1),
        ("broker_timeout_seconds", 0.0),
        ("max_record_bytes", 0),
        ("max_answer_bytes", 0),
        ("topic_prefix", ""),
        ("application_id", ""),
        ("partitions", True),
        ("partitions", "6"),
    ],
)
def test_overrides_and_direct_values_obey_the_same_ranges(field: str, value: object) -> None:
    with pytest.raises(SettingError) as by_option:
        Settings.from_env({}, names={field: f"--{field}"}, **{field: value})
    assert by_option.value.name == f"--{field}"
    with pytest.raises(SettingError) as direct:
        Settings(**{field: value})  # type: ignore[arg-type]
    assert direct.value.name == field
    with pytest.raises(SettingError):
        Settings().with_(**{field: value})


def test_an_override_wins_over_a_bad_variable_only_when_given() -> None:
    env = {"TURNLOG_PARTITIONS": "0"}
    assert Settings.from_env(env, partitions=2).partitions == 2
    with pytest.raises(SettingError, match="TURNLOG_PARTITIONS"):
        Settings.from_env(env, partitions=None)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("TURNLOG_BOOTSTRAP_SERVER", "TURNLOG_BOOTSTRAP_SERVERS"),
        ("TURNLOG_PARTITONS", "TURNLOG_PARTITIONS"),
        ("TURNLOG_TOKEN_TTL_SECOND", "TURNLOG_TOKEN_TTL_SECONDS"),
    ],
)
def test_a_misspelled_variable_is_warned_of_with_the_one_meant(typo: str, meant: str) -> None:
    with pytest.warns(SettingWarning) as caught:
        Settings.from_env({typo: "3"})
    (warned,) = caught
    assert str(warned.message) == (
        f"{typo} is not a turnlog setting and is ignored; did you mean {meant}?"
    )


def test_variables_other_readers_own_are_not_taken_for_typos() -> None:
    env = {
        "TURNLOG_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
        "TURNLOG_KAFKA_SASL_USERNAME": "u",
        "TURNLOG_LOG_LEVEL": "debug",
        "TURNLOG_INSTANCE_ID": "w1",
        "TURNLOG_STANDBY": "1",
        "TURNLOG_SIGNING_KID": "k1",
        "TURNLOG_NOTIFY_URLS": "https://example.org/hook",
        "TURNLOG_SOMETHING_ELSE": "x",
    }
    assert misspelled(env) == []


def test_a_keyword_that_is_no_field_names_the_field_meant() -> None:
    meant = "broker_timeout (did you mean broker_timeout_seconds?)"
    with pytest.raises(TypeError, match=re.escape(meant)):
        Settings(broker_timeout=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=re.escape(meant)):
        Settings.from_env({}, broker_timeout=3)
    with pytest.raises(TypeError, match=re.escape(meant)):
        Settings().with_(broker_timeout=3)


@pytest.mark.parametrize("prefix", ["newuser", "team.turnlog"])
def test_a_prefix_without_a_separator_is_refused_saying_what_it_would_name(prefix: str) -> None:
    with pytest.raises(SettingError) as refused:
        Settings.from_env({"TURNLOG_TOPIC_PREFIX": prefix})
    assert refused.value.name == "TURNLOG_TOPIC_PREFIX"
    assert f"{prefix}pauses" in str(refused.value) and f"{prefix + '.'!r}" in str(refused.value)
    for fine in (f"{prefix}.", f"{prefix}-", f"{prefix}_"):
        assert Settings(topic_prefix=fine).topic_prefix == fine
