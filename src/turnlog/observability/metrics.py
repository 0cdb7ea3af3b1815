"""The Prometheus metrics of the worker, the projector and ``ResumedTurns``.

Names follow Prometheus conventions: counters end in ``_total``, durations are ``_seconds``
histograms, gauges name what they hold. Labels are bounded sets -- an outcome, a refusal reason
(the names of :class:`~turnlog.contracts.refusals.RefusalReason`), a partition number, a topic
role -- never a thread, answer or token id, which would make one time series per person.

Each registry gets one set of collectors (:func:`worker_metrics` and friends return the same
object for the same registry): prometheus_client refuses a second registration of a name, and
two workers in one process add to the same counters, as one process should report.
"""

from __future__ import annotations

import threading
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: turnlog's registry for components given none (scraped by ``--metrics-port``).
REGISTRY = CollectorRegistry(auto_describe=True)

#: Resume latency spans seconds to the days a person may take to answer.
LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    21600.0, 86400.0, 604800.0,
)  # fmt: skip
#: Batches, transactions, restores: milliseconds to minutes.
DURATION_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
)  # fmt: skip

_lock = threading.Lock()


class WorkerMetrics:
    """What the resume worker reports. Counted after the transaction committed (an aborted
    batch is read again and counted then), so the counters match what the topics hold."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.answers = Counter(
            "turnlog_worker_answers",
            "Answers handled and committed, by outcome (resumed, rejected, duplicate, "
            "tombstone) and refusal reason (empty unless rejected).",
            ["outcome", "reason"],
            registry=registry,
        )
        self.resume_latency = Histogram(
            "turnlog_worker_resume_latency_seconds",
            "From the answer record's timestamp to the commit of its resumed turn.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.batch_duration = Histogram(
            "turnlog_worker_batch_duration_seconds",
            "Handling one fetched batch of one partition, commit included.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.transaction_duration = Histogram(
            "turnlog_worker_transaction_duration_seconds",
            "One transaction, begin to commit (or abort).",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.aborts = Counter(
            "turnlog_worker_transaction_aborts",
            "Transactions aborted (their batch is read again).",
            registry=registry,
        )
        self.fences = Counter(
            "turnlog_worker_fences",
            "Partitions given up because a newer owner fenced this worker's producer.",
            registry=registry,
        )
        self.owned = Gauge(
            "turnlog_worker_owned_partitions",
            "Answers partitions this process owns (fenced and restored).",
            registry=registry,
        )
        self.lag = Gauge(
            "turnlog_worker_consumer_lag",
            "Answers not yet read, per partition: last stable offset minus position.",
            ["partition"],
            registry=registry,
        )
        self.restored = Counter(
            "turnlog_worker_restored_records",
            "Pause and consumption records applied while restoring owned partitions.",
            registry=registry,
        )
        self.standby = Gauge(
            "turnlog_worker_standby_partitions",
            "Answers partitions this process keeps a warm, read-only copy of for their owner.",
            registry=registry,
        )
        self.standby_records = Counter(
            "turnlog_worker_standby_records",
            "Pause and consumption records applied to standby copies.",
            registry=registry,
        )
        self.restore_duration = Histogram(
            "turnlog_worker_restore_duration_seconds",
            "One restore of partitions' pauses and consumptions to their committed end.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.expired = Counter(
            "turnlog_worker_expired_pauses",
            "Pauses whose window closed unanswered, expired and committed.",
            registry=registry,
        )
        self.outages = Counter(
            "turnlog_worker_broker_outages",
            "Times the worker found its broker unreachable.",
            registry=registry,
        )


class ProjectorMetrics:
    """What a :class:`~turnlog.projections.projector.CheckpointProjector` reports."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.applied = Counter(
            "turnlog_projector_records_applied",
            "Records applied to the store, by topic role (pauses, consumptions).",
            ["topic"],
            registry=registry,
        )
        self.skipped = Counter(
            "turnlog_projector_records_skipped",
            "Records that could not be decoded and were skipped.",
            registry=registry,
        )
        self.lag = Gauge(
            "turnlog_projector_lag",
            "Records not yet applied, per topic role and partition (as of the last catch-up "
            "or fetch).",
            ["topic", "partition"],
            registry=registry,
        )
        self.caught_up = Gauge(
            "turnlog_projector_caught_up",
            "1 once the projector reached the ends of its topics at start, else 0.",
            registry=registry,
        )
        self.pending = Gauge(
            "turnlog_pending_pauses",
            "Pauses waiting for a person (unspent, window open), as of the last report.",
            registry=registry,
        )
        self.oldest_pending_age = Gauge(
            "turnlog_oldest_pending_pause_age_seconds",
            "How long the oldest pending pause has waited (0 when none), as of the last report.",
            registry=registry,
        )


class ResumedTurnsMetrics:
    """What a :class:`~turnlog.consumers.resumed.ResumedTurns` reader reports."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.delivered = Counter(
            "turnlog_resumed_turns_delivered",
            "Records handed out to the caller, by kind (resumed, expired).",
            ["kind"],
            registry=registry,
        )
        self.skipped = Counter(
            "turnlog_resumed_turns_skipped",
            "Records passed over: undecodable or of an unknown type.",
            registry=registry,
        )
        self.commit_refusals = Counter(
            "turnlog_resumed_turns_commit_refusals",
            "Offset commits the group refused after a rebalance (made again after the rejoin).",
            registry=registry,
        )


_worker: WeakKeyDictionary[CollectorRegistry, WorkerMetrics] = WeakKeyDictionary()
_projector: WeakKeyDictionary[CollectorRegistry, ProjectorMetrics] = WeakKeyDictionary()
_resumed: WeakKeyDictionary[CollectorRegistry, ResumedTurnsMetrics] = WeakKeyDictionary()


def worker_metrics(registry: CollectorRegistry | None = None) -> WorkerMetrics:
    """The worker's collectors on ``registry`` (turnlog's :data:`REGISTRY` by default)."""
    reg = REGISTRY if registry is None else registry
    with _lock:
        if reg not in _worker:
            _worker[reg] = WorkerMetrics(reg)
        return _worker[reg]


def projector_metrics(registry: CollectorRegistry | None = None) -> ProjectorMetrics:
    """The projector's collectors on ``registry`` (turnlog's :data:`REGISTRY` by default)."""
    reg = REGISTRY if registry is None else registry
    with _lock:
        if reg not in _projector:
            _projector[reg] = ProjectorMetrics(reg)
        return _projector[reg]


def resumed_turns_metrics(registry: CollectorRegistry | None = None) -> ResumedTurnsMetrics:
    """``ResumedTurns``' collectors on ``registry`` (turnlog's :data:`REGISTRY` by default)."""
    reg = REGISTRY if registry is None else registry
    with _lock:
        if reg not in _resumed:
            _resumed[reg] = ResumedTurnsMetrics(reg)
        return _resumed[reg]


class AuditMetrics:
    """What ``turnlog audit --watch`` reports: the last verdict, per violation kind (a bounded
    set: :class:`~turnlog.audit.invariant.Kind`), and when it was reached."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.violations = Gauge(
            "turnlog_audit_violations",
            "Violations of the exactly-once invariant found by the last audit, by kind.",
            ["kind"],
            registry=registry,
        )
        self.answers = Gauge(
            "turnlog_audit_answers_judged",
            "Answers below the worker group's committed offset judged by the last audit.",
            registry=registry,
        )
        self.passes = Counter(
            "turnlog_audit_passes", "Audits completed since the auditor started.", registry=registry
        )
        self.last_pass = Gauge(
            "turnlog_audit_last_pass_timestamp_seconds",
            "When the last audit completed (unix time).",
            registry=registry,
        )


_audit: WeakKeyDictionary[CollectorRegistry, AuditMetrics] = WeakKeyDictionary()


def audit_metrics(registry: CollectorRegistry | None = None) -> AuditMetrics:
    """The auditor's collectors on ``registry`` (turnlog's :data:`REGISTRY` by default)."""
    reg = REGISTRY if registry is None else registry
    with _lock:
        if reg not in _audit:
            _audit[reg] = AuditMetrics(reg)
        return _audit[reg]
