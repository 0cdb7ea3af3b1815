"""What the notifier reports to Prometheus (labels: the notice's kind, an outcome -- never a
webhook URL, whose path may be its secret, nor a thread or token id)."""

from __future__ import annotations

import threading
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Counter, Gauge

from turnlog.observability.metrics import REGISTRY

_lock = threading.Lock()


class NotifyMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.notices = Counter(
            "turnlog_notify_notices",
            "Notices handled, by kind and outcome (delivered; failed: retries spent or refused).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.attempts = Counter(
            "turnlog_notify_attempts", "POSTs made, retries included.", registry=registry
        )
        self.skipped = Counter(
            "turnlog_notify_skipped",
            "Records passed over: undecodable or of an unknown type.",
            registry=registry,
        )
        self.reminders_owed = Gauge(
            "turnlog_notify_reminders_owed",
            "Reminders waiting for their moment, over every webhook.",
            registry=registry,
        )


_made: WeakKeyDictionary[CollectorRegistry, NotifyMetrics] = WeakKeyDictionary()


def notify_metrics(registry: CollectorRegistry | None = None) -> NotifyMetrics:
    reg = REGISTRY if registry is None else registry
    with _lock:
        if reg not in _made:
            _made[reg] = NotifyMetrics(reg)
        return _made[reg]
