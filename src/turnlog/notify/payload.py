"""A notice, and the bytes a webhook receives for it.

A notice names its pause (thread, token id, the pause's event id, checkpoint), what it asks (the
interaction and a clipped one-line summary), when its window closes, and a link to its page in
the inbox -- never the token: whoever holds a token can answer, and a webhook's message lands in
chat channels and logs. Every character that could make the summary read otherwise than it is
(bidi overrides, zero-width characters, other controls) is written out as ``⟨U+XXXX⟩``, as the
inbox shows it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

from turnlog.contracts.events import AnswerRejected, PauseExpired, PauseRecorded, TurnResumed
from turnlog.contracts.group import calls_of, is_group, view_for_token
from turnlog.notify.text import SUMMARY_CHARS, one_line, questions

RECORDED, REMINDER, RESUMED, REFUSED, EXPIRED = (
    "pause.recorded",
    "pause.reminder",
    "pause.resumed",
    "pause.refused",
    "pause.expired",
)
KINDS: Final = (RECORDED, REMINDER, RESUMED, REFUSED, EXPIRED)
#: The version of the JSON body; a field added keeps it, a field changed or removed bumps it.
PAYLOAD_VERSION: Final = 1
#: Reminders are no Kafka event, and a pause of several calls is one event told to each call:
#: those notices' ids are derived (UUID version 5, written as 32 hex digits like every event
#: id) from the event's id and the call, the same on every replay.
_DERIVED = uuid.UUID("6f1d3c1e-3b1a-4f0e-9a57-6d1a2b7c9e10")


def derived_id(*names: str) -> str:
    """The 32-hex id of a notice that is one of several an event makes (or none makes)."""
    return uuid.uuid5(_DERIVED, "\0".join(names)).hex


_HEADLINES: Final = {
    RECORDED: "A question waits",
    REMINDER: "Reminder: a question closes soon",
    RESUMED: "Answered: the agent continues",
    REFUSED: "An answer was refused",
    EXPIRED: "Expired unanswered",
}


@dataclass(frozen=True, slots=True)
class PauseFacts:
    """What the notifier keeps of a pause (a few hundred bytes: not its checkpoint)."""

    thread_id: str
    token_id: str
    pause_event_id: str
    checkpoint_id: str
    interaction: str
    summary: str
    deadline: datetime
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class Notice:
    kind: str
    #: The idempotency key: the Kafka event's id (a reminder's is derived from its pause's).
    event_id: str
    occurred_at: datetime
    thread_id: str
    token_id: str
    pause_event_id: str | None = None
    checkpoint_id: str | None = None
    interaction: str | None = None
    summary: str | None = None
    deadline: datetime | None = None
    #: A refusal's reason (a ``RefusalReason`` name); ``None`` for the other kinds.
    reason: str | None = None


def summary_of(interaction: str, request_json: str, limit: int = SUMMARY_CHARS) -> str:
    """One line saying what the pause asks: the first question, the call to approve, or the
    interaction's name -- marked and clipped like the inbox's list."""
    try:
        request: Any = json.loads(request_json)
    except ValueError:
        request = None
    text = interaction
    if isinstance(request, dict) and isinstance(request.get("tool"), str):
        text = f"approve {request['tool']}"
    else:
        asked = questions(request)
        if asked and asked[0]:
            more = f" (+{len(asked) - 1} more)" if len(asked) > 1 else ""
            text = asked[0] + more
    return one_line(text, limit)


def facts_of(pause: PauseRecorded) -> PauseFacts:
    """The facts of ``pause`` -- of one call's view of a pause of several calls
    (:func:`~turnlog.contracts.group.view_for_token`), whose ``pause_event_id`` is then the
    pause's event id and the call (each call waits, and is reminded of, on its own)."""
    checkpoint = pause.checkpoint
    event_id = pause.event_id
    if is_group(pause):
        event_id = f"{event_id}:{checkpoint.tool_call_id or checkpoint.interrupt_id}"
    return PauseFacts(
        thread_id=checkpoint.thread_id,
        token_id=pause.token_id,
        pause_event_id=event_id,
        checkpoint_id=checkpoint.checkpoint_id,
        interaction=pause.response_schema,
        summary=summary_of(pause.response_schema, pause.request_json),
        deadline=pause.expires_at,
        recorded_at=pause.occurred_at,
    )


def _about(kind: str, event_id: str, at: datetime, facts: PauseFacts) -> Notice:
    return Notice(
        kind=kind,
        event_id=event_id,
        occurred_at=at,
        thread_id=facts.thread_id,
        token_id=facts.token_id,
        pause_event_id=facts.pause_event_id,
        checkpoint_id=facts.checkpoint_id,
        interaction=facts.interaction,
        summary=facts.summary,
        deadline=facts.deadline,
    )


def recorded(pause: PauseRecorded) -> Notice:
    return _about(RECORDED, pause.event_id, pause.occurred_at, facts_of(pause))


def each_call(pause: PauseRecorded) -> list[PauseRecorded]:
    """``pause`` as each of its calls sees it: itself for a pause of one call."""
    if not is_group(pause):
        return [pause]
    return [view_for_token(pause, call.token_id) for call in calls_of(pause)]


def recorded_calls(pause: PauseRecorded) -> list[Notice]:
    """One "waiting" notice per call of ``pause`` (one for a pause of one call), each with an
    event id of its own, so a receiver deduplicating on it keeps every call's."""
    views = each_call(pause)
    return [
        _about(RECORDED, _call_id(pause.event_id, f.token_id, len(views)), f.recorded_at, f)
        for f in (facts_of(view) for view in views)
    ]


def _call_id(event_id: str, token_id: str, calls: int) -> str:
    """The event's own id for a pause of one call; one derived per call otherwise."""
    return event_id if calls == 1 else derived_id(event_id, token_id)


def reminder(facts: PauseFacts, now: datetime) -> Notice:
    return _about(REMINDER, uuid.uuid5(_DERIVED, facts.pause_event_id).hex, now, facts)


def closing_calls(event: TurnResumed | PauseExpired, calls: tuple[str, ...]) -> tuple[str, ...]:
    """The calls (token ids) ``event`` closes: every answered call of a resumed group, every
    call of an expired pause (``calls``: its tokens, as the notifier learned them), else the
    event's own token. Each is told, so no call's receiver is left with an open question."""
    if isinstance(event, TurnResumed) and event.answers:
        return tuple(str(a["token_id"]) for a in event.answers)
    if isinstance(event, PauseExpired) and event.token_id in calls:
        return calls
    return (event.token_id,)


def closed(
    event: TurnResumed | PauseExpired | AnswerRejected,
    facts: PauseFacts | None,
    *,
    call: str | None = None,
    calls: int = 1,
) -> Notice | None:
    """The notice of a resume, an expiry or a refusal -- for ``call`` (a token id) when the
    event closes ``calls`` calls, each then with an id of its own; ``None`` for a refusal at
    step 1 (its token did not verify, so the token id it names is only claimed: anyone can
    publish an answer naming a real pause's token id) or of no pause known here."""
    if isinstance(event, AnswerRejected):
        if event.step < 2 or facts is None or event.token_id != facts.token_id:
            return None
        return replace(
            _about(REFUSED, event.event_id, event.occurred_at, facts), reason=event.reason
        )
    token_id = call or event.token_id
    event_id = _call_id(event.event_id, token_id, calls)
    kind = RESUMED if isinstance(event, TurnResumed) else EXPIRED
    if facts is not None:
        return _about(kind, event_id, event.occurred_at, facts)
    interaction = event.name if isinstance(event, TurnResumed) else None
    summary = one_line(event.prompt) if isinstance(event, TurnResumed) else None
    if isinstance(event, TurnResumed) and token_id != event.token_id:
        named = [a for a in event.answers if str(a.get("token_id")) == token_id]
        interaction = str(named[0].get("name") or "") or None if named else None
        summary = None  # the prompt is the last call's
    return Notice(
        kind=kind,
        event_id=event_id,
        occurred_at=event.occurred_at,
        thread_id=event.thread_id,
        token_id=token_id,
        checkpoint_id=event.checkpoint_id,
        interaction=interaction,
        summary=summary or None,
        deadline=event.expires_at if isinstance(event, PauseExpired) else None,
    )


def link(notice: Notice, inbox_url: str | None) -> str | None:
    """The pause's page in the inbox (``<inbox>/pause/<token id>``), if an inbox is named."""
    if not inbox_url:
        return None
    return f"{inbox_url.rstrip('/')}/pause/{quote(notice.token_id, safe='')}"


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def body(notice: Notice, inbox_url: str | None) -> bytes:
    """The JSON a webhook receives: compact, keys sorted, UTF-8 (its bytes are what is signed)."""
    data = {
        "version": PAYLOAD_VERSION,
        "kind": notice.kind,
        "event_id": notice.event_id,
        "occurred_at": _iso(notice.occurred_at),
        "thread_id": notice.thread_id,
        "token_id": notice.token_id,
        "pause_event_id": notice.pause_event_id,
        "checkpoint_id": notice.checkpoint_id,
        "interaction": notice.interaction,
        "summary": notice.summary,
        "deadline": _iso(notice.deadline),
        "reason": notice.reason,
        "link": link(notice, inbox_url),
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(notice: Notice, inbox_url: str | None) -> str:
    """One Slack ``mrkdwn`` message: the headline, what is asked, the deadline, the link."""
    headline = _HEADLINES.get(notice.kind, notice.kind)
    if notice.reason:
        headline += f" ({notice.reason})"
    parts = [f"*{headline}*"]
    if notice.summary:
        about = f"{notice.interaction}: " if notice.interaction else ""
        parts.append(_slack_escape(about + notice.summary))
    if notice.deadline is not None and notice.kind in (RECORDED, REMINDER):
        parts.append(f"answer by {notice.deadline.astimezone(UTC):%Y-%m-%d %H:%M} UTC")
    parts.append(f"thread {_slack_escape(notice.thread_id)}")
    page = link(notice, inbox_url)
    if page is not None:
        parts.append(f"<{page}|open in the inbox>")
    return " · ".join(parts)


def slack_body(notice: Notice, inbox_url: str | None) -> bytes:
    """A Slack incoming webhook's payload, ``{"text": ...}`` (Mattermost and others take it too)."""
    text = slack_text(notice, inbox_url)
    return json.dumps({"text": text}, separators=(",", ":"), ensure_ascii=False).encode()
