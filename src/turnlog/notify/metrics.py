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
            "Notices handled, by kind and outcome (delivered; waiting: kept on the log to be "
            "tried again; dead: given up, dead-lettered with its reason).",
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
        self.waiting = Gauge(
            "turnlog_notify_waiting",
            "Notices kept on the log for a webhook that has not taken them yet (every webhook).",
            registry=registry,
        )
        self.oldest_waiting = Gauge(
            "turnlog_notify_oldest_waiting_seconds",
            "How long the oldest waiting notice has waited since its first attempt (0: none).",
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
