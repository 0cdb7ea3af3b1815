"""What waits for a person: the pending pauses of a store, and the oldest of them.

Shared by ``turnlog status`` and the projector's gauges, so the two always agree. Counting walks
the deadline index (keys only); finding the oldest reads pauses (skimmed: their messages are not
decoded), so it looks at no more than :data:`OLDEST_SCAN` of them, soonest deadline first --
with the usual one TTL for every pause, the oldest pause is among the soonest deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from turnlog.clock import utc_now
from turnlog.observability.metrics import ProjectorMetrics
from turnlog.projections.store import Store
from turnlog.wire.skim import skim_pause

#: How many pending pauses (soonest deadline first) are decoded to find the oldest.
OLDEST_SCAN = 10_000


@dataclass(frozen=True, slots=True)
class OldestPending:
    thread_id: str
    token_id: str
    paused_at: datetime


@dataclass(frozen=True, slots=True)
class PendingSummary:
    count: int
    oldest: OldestPending | None


def pending_summary(store: Store, now: datetime) -> PendingSummary:
    """The number of pauses waiting at ``now`` (unspent, window open) and the oldest of them."""
    count = 0
    best: tuple[tuple[datetime, datetime], OldestPending] | None = None
    for pause in store.pending(int(now.timestamp() * 1000)):
        count += 1
        if count > OLDEST_SCAN:
            continue
        info = store.pause_for_token(pause.token_id)
        if info is None:
            continue
        recorded = skim_pause(info.value)
        # occurred_at has whole seconds (it is the token's iat); the checkpoint's own time
        # orders pauses made within one second.
        at = (recorded.occurred_at, recorded.checkpoint.created_at)
        if best is None or at < best[0]:
            best = (at, OldestPending(pause.thread_id, pause.token_id, recorded.occurred_at))
    return PendingSummary(count, best[1] if best is not None else None)


def report_pending(metrics: ProjectorMetrics, store: Store) -> None:
    """Set the pending-pause gauges from ``store`` (the projector does at each lag report)."""
    at = utc_now()
    summary = pending_summary(store, at)
    metrics.pending.set(summary.count)
    age = (at - summary.oldest.paused_at).total_seconds() if summary.oldest else 0.0
    metrics.oldest_pending_age.set(max(0.0, age))
