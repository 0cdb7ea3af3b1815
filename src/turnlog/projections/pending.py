"""What waits for a person: the pending pauses of a store, and the oldest of them.

Shared by ``turnlog status`` and the projector's gauges, so the two always agree. The count
comes from the store's waiting counts (:meth:`Store.pending_count`: no walk over the pauses);
finding the oldest reads the waiting index's facts, never a pause's record, of no more than
:data:`OLDEST_SCAN` pauses, soonest deadline first -- with the usual one TTL for every pause, the
oldest pause is among the soonest deadlines.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime

from turnlog.clock import utc_now
from turnlog.observability.metrics import ProjectorMetrics
from turnlog.projections.store import Store

#: How many pending pauses (soonest deadline first) are looked at to find the oldest.
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
    #: Of the pending pauses, those written unfinalized and not finalized yet (the crash
    #: window): no token is out for them; their owner expires them if their writer never does.
    unfinalized: int = 0


def pending_summary(store: Store, now: datetime) -> PendingSummary:
    """The number of pauses waiting at ``now`` (unspent, window open) and the oldest of them."""
    now_ms = int(now.timestamp() * 1000)
    count = store.pending_count(now_ms)
    best = None
    page = store.pending_page(now_ms, limit=OLDEST_SCAN, max_scan=OLDEST_SCAN)
    for pause in itertools.islice(page.items, OLDEST_SCAN):
        # paused_at has whole seconds (it is the token's iat); the checkpoint's own time
        # orders pauses made within one second.
        if best is None or (pause.paused_at_ms, pause.created_at_ms) < (
            best.paused_at_ms,
            best.created_at_ms,
        ):
            best = pause
    left = sum(1 for p in store.unfinalized() if not p.spent and p.expires_at_ms > now_ms)
    if best is None:
        return PendingSummary(count, None, left)
    paused_at = datetime.fromtimestamp(best.paused_at_ms / 1000, UTC)
    return PendingSummary(count, OldestPending(best.thread_id, best.token_id, paused_at), left)


def report_pending(metrics: ProjectorMetrics, store: Store) -> None:
    """Set the pending-pause gauges from ``store`` (the projector does at each lag report)."""
    at = utc_now()
    summary = pending_summary(store, at)
    metrics.pending.set(summary.count)
    age = (at - summary.oldest.paused_at).total_seconds() if summary.oldest else 0.0
    metrics.oldest_pending_age.set(max(0.0, age))
