"""The topic settings ``forget --erase-within`` asks for: each a fraction of the window, only
ever lowered, an unreadable value replaced."""

from __future__ import annotations

from datetime import timedelta

from turnlog.producers.erasure import Plan


def test_a_window_sets_each_setting_to_its_fraction_and_never_raises_one() -> None:
    plan = Plan(timedelta(hours=1))
    assert plan.targets() == {
        "segment.ms": 900_000,
        "max.compaction.lag.ms": 1_800_000,
        "min.compaction.lag.ms": 900_000,
        "file.delete.delay.ms": 60_000,
    }
    broker_defaults = {
        "segment.ms": "604800000",
        "max.compaction.lag.ms": "9223372036854775807",
        "min.compaction.lag.ms": "0",
        "file.delete.delay.ms": "60000",
    }
    assert plan.changes(broker_defaults) == {
        "segment.ms": "900000",
        "max.compaction.lag.ms": "1800000",
    }
    stricter = {**broker_defaults, "segment.ms": "1000", "max.compaction.lag.ms": "5000"}
    assert plan.changes(stricter) == {}
    assert plan.changes({}) == {k: str(v) for k, v in plan.targets().items()}
    assert plan.changes({**stricter, "segment.ms": "soon"}) == {"segment.ms": "900000"}


def test_a_short_window_deletes_replaced_files_sooner() -> None:
    plan = Plan(timedelta(minutes=1))
    assert (plan.segment_ms, plan.max_lag_ms, plan.file_delete_delay_ms) == (15_000, 30_000, 7_500)


def test_forget_names_the_doors_topics_as_the_doors_make_them() -> None:
    from turnlog.a2a import tasks_topic
    from turnlog.kafka.topics import TopicSet
    from turnlog.mcp import results_topic
    from turnlog.producers.forget import thread_topics
    from turnlog.settings import Settings

    settings = Settings(bootstrap_servers="b:9092", topic_prefix="dep.")
    named = thread_topics(settings, TopicSet.from_settings(settings))
    assert named[results_topic(settings).name] is False  # made only where the door ran
    assert named[tasks_topic(settings)] is False
    assert [n for n, always in named.items() if always] == ["dep.pauses", "dep.answers",
                                                             "dep.consumptions"]  # fmt: skip
