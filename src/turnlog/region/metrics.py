"""The mirror's lag as Prometheus gauges (``turnlog region lag --metrics-port``): the window a
loss of region A would open, known before the loss."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Gauge

from turnlog.observability.metrics import REGISTRY
from turnlog.region.lag import PartitionLag, worst

_lock = threading.Lock()
_made: WeakKeyDictionary[CollectorRegistry, RegionMetrics] = WeakKeyDictionary()


class RegionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lag = Gauge(
            "turnlog_region_mirror_lag_seconds",
            "Age of the oldest record region A holds and this region does not (0: caught up).",
            ["topic"],
            registry=registry,
        )
        self.behind = Gauge(
            "turnlog_region_mirror_behind_records",
            "Committed records region A holds and this region does not yet.",
            ["topic"],
            registry=registry,
        )
        self.measured = Gauge(
            "turnlog_region_mirror_last_measured_timestamp_seconds",
            "When the lag was last measured (Unix time).",
            registry=registry,
        )

    def observe(self, lags: Sequence[PartitionLag]) -> None:
        for topic in dict.fromkeys(x.topic for x in lags):
            behind, seconds = worst([x for x in lags if x.topic == topic])
            self.lag.labels(topic).set(seconds)
            self.behind.labels(topic).set(behind)
        self.measured.set_to_current_time()


def region_metrics(registry: CollectorRegistry | None = None) -> RegionMetrics:
    """The region collectors on ``registry`` (turnlog's own by default), made once."""
    reg = REGISTRY if registry is None else registry
    with _lock:
        if reg not in _made:
            _made[reg] = RegionMetrics(reg)
        return _made[reg]
