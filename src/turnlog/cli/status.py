"""``turnlog status``: what is waiting, what is stuck, and who is on it, at a glance.

Waiting for a person (pending pauses, from the local projection) and answered but not yet
resumed (the worker group's lag on the answers topic, from the broker) are different troubles:
the first is people, the second is the worker. Both are shown, with the oldest pending pause and
which worker owns which answers partitions.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from turnlog.cli.answering import RETAKE_HINT, claim_words, unfinished_claims
from turnlog.cli.app import (
    BrokerTimeoutOpt,
    JsonOpt,
    app,
    err,
    out,
    print_json,
    run_async,
    run_state,
)
from turnlog.cli.common import caught_up, freshness, open_for_reading
from turnlog.contracts.visible import visible
from turnlog.projections.pending import pending_summary


@app.command("status")
@run_async
async def status(
    ctx: typer.Context, as_json: JsonOpt = False, broker_timeout: BrokerTimeoutOpt = None
) -> None:
    """Per answers partition the worker group's committed offset, end and lag; pending pauses
    and the oldest; which worker owns what."""
    from turnlog.clock import utc_now
    from turnlog.kafka.groups import group_status
    from turnlog.kafka.outage import ride_out
    from turnlog.kafka.topics import TopicSet
    from turnlog.notify import undelivered

    settings = run_state(ctx).settings
    topics = TopicSet.from_settings(settings)
    group = await ride_out(
        lambda: group_status(settings.connection, settings.application_id, topics.answers),
        settings=settings,
        who="status",
    )
    notices = await undelivered.summary(settings)
    now = utc_now()
    with open_for_reading(settings) as (store, writer):
        if writer:
            await caught_up(store, settings)
        summary = pending_summary(store, now)
        claims = unfinished_claims(store, int(now.timestamp() * 1000))
        fresh = freshness(store)
    told: dict[str, Any] | None = None
    if notices is not None:  # a notifier ran in this deployment: what its webhooks have not taken
        waited = None if notices.oldest is None else (now - notices.oldest).total_seconds()
        told = {
            "waiting": notices.waiting,
            "oldest_waiting_seconds": None if waited is None else round(waited, 1),
            "dead_letters": notices.dead,
        }
    oldest: dict[str, Any] | None = None
    if summary.oldest is not None:
        paused_at = summary.oldest.paused_at
        oldest = {
            "thread_id": summary.oldest.thread_id,
            "token_id": summary.oldest.token_id,
            "age_seconds": round((now - paused_at).total_seconds(), 1),
            "paused_at": paused_at.isoformat(),
        }
    report = {
        "group": group.group,
        "group_state": group.state,
        "topic": group.topic,
        "partitions": [
            {"partition": p.partition, "committed": p.committed, "end": p.end, "lag": p.lag}
            for p in group.partitions
        ],
        "answered_not_resumed": group.lag,
        "pending": summary.count,
        "unfinalized": summary.unfinalized,
        "oldest_pending": oldest,
        # Resumed turns whose continuation was claimed and never said done: running, or left
        # by a holder that died (retaken only explicitly); the oldest first.
        "claimed_not_finished": len(claims),
        "oldest_claimed_not_finished": claims[0] if claims else None,
        "members": [
            {
                "client_id": m.client_id,
                "host": m.host,
                "instance_id": m.instance_id,
                "partitions": m.partitions,
            }
            for m in group.members
        ],
        "as_of": fresh,
        "notices": told,
    }
    if as_json:
        print_json(report)
        return
    owner = {p: m.client_id for m in group.members for p in m.partitions}
    table = Table("partition", "committed", "end", "lag", "owner", title=f"{group.topic}")
    for p in group.partitions:
        committed = "-" if p.committed is None else str(p.committed)
        table.add_row(
            str(p.partition), committed, str(p.end), str(p.lag), owner.get(p.partition, "-")
        )
    out.print(table)
    out.print(f"group {group.group} ({group.state}), {len(group.members)} member(s)")
    out.print(f"answered, not yet resumed: {group.lag}")
    out.print(f"pending (waiting for a person): {summary.count}")
    if summary.unfinalized:
        out.print(
            f"of which unfinalized (the crash window, no token out yet): {summary.unfinalized}"
        )
    if oldest is not None:
        age = oldest["age_seconds"]
        out.print(f"oldest pending: thread {oldest['thread_id']}, paused {age:.0f}s ago")
    out.print(f"resumed, claimed, not finished: {len(claims)}", highlight=False)
    if claims:
        first = claims[0]
        out.print(
            f"oldest claim not finished: thread {visible(first['thread_id'])}, "
            f"{claim_words(first)} ({RETAKE_HINT})",
            markup=False, highlight=False, soft_wrap=True,
        )  # fmt: skip
    if told is not None:
        since = told["oldest_waiting_seconds"]
        oldest_note = "" if since is None else f", the oldest for {since:.0f}s"
        out.print(
            f"notices not yet taken by a webhook: {told['waiting']}{oldest_note}; "
            f"dead-lettered: {told['dead_letters']}"
        )
    err.print(f"as of {fresh}", soft_wrap=True)
