"""The metrics' names and labels follow Prometheus conventions; the health answers are right."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from turnlog.contracts.refusals import RefusalReason
from turnlog.observability.health import HealthServer
from turnlog.observability.metrics import (
    REGISTRY,
    projector_metrics,
    resumed_turns_metrics,
    worker_metrics,
)

#: Every metric and its labels: the interface dashboards and alerts are written against.
EXPECTED = {
    "turnlog_worker_answers": ("counter", {"outcome", "reason"}),
    "turnlog_worker_resume_latency_seconds": ("histogram", set()),
    "turnlog_worker_batch_duration_seconds": ("histogram", set()),
    "turnlog_worker_transaction_duration_seconds": ("histogram", set()),
    "turnlog_worker_transaction_aborts": ("counter", set()),
    "turnlog_worker_fences": ("counter", set()),
    "turnlog_worker_owned_partitions": ("gauge", set()),
    "turnlog_worker_consumer_lag": ("gauge", {"partition"}),
    "turnlog_worker_restored_records": ("counter", set()),
    "turnlog_worker_standby_partitions": ("gauge", set()),
    "turnlog_worker_standby_records": ("counter", set()),
    "turnlog_worker_restore_duration_seconds": ("histogram", set()),
    "turnlog_worker_expired_pauses": ("counter", set()),
    "turnlog_worker_broker_outages": ("counter", set()),
    "turnlog_projector_records_applied": ("counter", {"topic"}),
    "turnlog_projector_records_skipped": ("counter", set()),
    "turnlog_projector_lag": ("gauge", {"topic", "partition"}),
    "turnlog_projector_caught_up": ("gauge", set()),
    "turnlog_pending_pauses": ("gauge", set()),
    "turnlog_oldest_pending_pause_age_seconds": ("gauge", set()),
    "turnlog_resumed_turns_delivered": ("counter", {"kind"}),
    "turnlog_resumed_turns_skipped": ("counter", set()),
    "turnlog_resumed_turns_commit_refusals": ("counter", set()),
}


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    worker_metrics(registry)
    projector_metrics(registry)
    resumed_turns_metrics(registry)
    return registry


def test_every_metric_has_its_name_type_and_labels() -> None:
    found = {}
    for metric in _registry().collect():
        labels: set[str] = set()
        for sample in metric.samples:
            labels |= set(sample.labels) - {"le"}
        found[metric.name] = (metric.type, labels)
    # Labelled metrics have no sample until used: their declared label names are the check.
    m = worker_metrics(CollectorRegistry())
    assert m.answers._labelnames == ("outcome", "reason")
    assert {name: kind for name, (kind, _) in found.items()} == {
        name: kind for name, (kind, _) in EXPECTED.items()
    }
    for name, (_, labels) in found.items():
        assert labels <= EXPECTED[name][1], name


def test_names_follow_the_conventions_and_no_label_names_a_person() -> None:
    text = _exposition()
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("turnlog_")
        for sample in family.samples:
            if family.type == "counter" and not sample.name.endswith("_created"):
                assert sample.name.endswith("_total"), sample.name
            assert not {"thread", "thread_id", "answer_id", "token", "token_id"} & set(
                sample.labels
            )
    for name in EXPECTED:
        if "duration" in name or "latency" in name:
            assert name.endswith("_seconds")


def _exposition() -> str:
    from prometheus_client import generate_latest

    registry = CollectorRegistry()
    m = worker_metrics(registry)
    m.answers.labels("resumed", "").inc()
    m.answers.labels("rejected", RefusalReason.ALREADY_CONSUMED.value).inc(2)
    m.lag.labels("3").set(7)
    p = projector_metrics(registry)
    p.applied.labels("pauses").inc()
    p.lag.labels("pauses", "0").set(1)
    resumed_turns_metrics(registry).delivered.labels("resumed").inc()
    return generate_latest(registry).decode()


def test_the_exposition_counts_answers_by_outcome_and_reason() -> None:
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(_exposition())
        for s in family.samples
    }
    reason = RefusalReason.ALREADY_CONSUMED.value
    assert samples[("turnlog_worker_answers_total", (("outcome", "resumed"), ("reason", "")))] == 1
    key = ("turnlog_worker_answers_total", (("outcome", "rejected"), ("reason", reason)))
    assert samples[key] == 2
    assert samples[("turnlog_worker_consumer_lag", (("partition", "3"),))] == 7


def test_one_set_of_collectors_per_registry() -> None:
    registry = CollectorRegistry()
    assert worker_metrics(registry) is worker_metrics(registry)
    assert worker_metrics(registry) is not worker_metrics(CollectorRegistry())
    assert worker_metrics() is worker_metrics(REGISTRY)


def test_health_answers() -> None:
    ready = [False]
    server = HealthServer(0, registry=_registry(), ready=lambda: ready[0])
    assert server.answer("/healthz")[0] == 200
    assert server.answer("/readyz")[0] == 503
    ready[0] = True
    assert server.answer("/readyz")[0] == 200
    status, ctype, body = server.answer("/metrics")
    assert (status, ctype.split(";")[0]) == (200, "text/plain")
    assert b"turnlog_worker_answers_total" in body or b"turnlog_worker_answers" in body
    assert server.answer("/nope")[0] == 404

    def broken() -> bool:
        raise RuntimeError("boom")

    assert HealthServer(0, ready=broken).answer("/readyz")[0] == 503
