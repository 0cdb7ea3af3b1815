"""The lone-replica warning (issue 27, item B): when a worker's topics can lose a resume.

A single-replica partition's controlled shutdown can lose an acknowledged commit marker
(KAFKA-20734, ``docs/guarantees.md``); the warning says so, and how to avoid it, exactly when a
topic of the set has -- or, missing, will be created with -- one replica.
"""

from __future__ import annotations

import pytest

from turnlog.kafka.topics import TopicSet, TopicState, lone_replica_warning

TOPICS = TopicSet(prefix="t.", partitions=3, replication_factor=1)
REPLICATED = TopicSet(prefix="t.", partitions=3, replication_factor=3)


def _states(replication: int, names: list[str] | None = None) -> dict[str, TopicState]:
    chosen = names if names is not None else [s.name for s in TOPICS.specs()]
    return {name: TopicState(name, 3, {}, replication, replication) for name in chosen}


def test_one_replica_everywhere_is_said_once_with_what_can_go_wrong_and_the_way_out() -> None:
    warning = lone_replica_warning(_states(1), REPLICATED)
    assert warning is not None and "\n" not in warning
    assert warning.startswith("the t.* topics have one replica:")
    for said in (
        "KAFKA-20734",
        "commit marker",
        "a resume",
        "a refusal written twice",
        "three brokers with replication factor 3 and min.insync.replicas=2",
        "stop the workers before the broker",
        "`turnlog audit`",
    ):
        assert said in warning, said


def test_three_replicas_say_nothing() -> None:
    assert lone_replica_warning(_states(3), REPLICATED) is None
    assert lone_replica_warning(_states(2), TOPICS) is None


def test_only_the_lone_topics_are_named_when_the_others_are_replicated() -> None:
    states = {**_states(3), **_states(1, ["t.answers"])}
    warning = lone_replica_warning(states, REPLICATED)
    assert warning is not None and warning.startswith("t.answers has one replica:")
    states = {**_states(3), **_states(1, ["t.pauses", "t.answers"])}
    warning = lone_replica_warning(states, REPLICATED)
    assert warning is not None and warning.startswith("t.pauses, t.answers have one replica:")


@pytest.mark.parametrize("existing", [[], ["t.pauses"], ["t.pauses", "t.answers", "t.resumed"]])
def test_topics_not_created_yet_count_as_the_settings_will_create_them(
    existing: list[str],
) -> None:
    """A worker started just before the first pause creates the topics says what one started
    just after says: the same line, whichever won."""
    everything = lone_replica_warning(_states(1), TOPICS)
    assert lone_replica_warning(_states(1, existing), TOPICS) == everything
    assert lone_replica_warning(_states(3, existing), REPLICATED) is None


def test_an_unknown_replication_is_not_called_one() -> None:
    """0: a topic described with no partitions; nothing is known, nothing is claimed."""
    assert lone_replica_warning(_states(0), REPLICATED) is None
