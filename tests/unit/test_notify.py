"""The notifier's pure parts: the payload (no token, a link, marked and clipped summaries, the
Slack text), the signature and its check, the retry schedule, the reminders' order and marks,
the config, and one delivery's retries against a scripted receiver."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.deployment import REQUEST, sample_checkpoint
from turnlog.contracts.events import AnswerRejected, PauseExpired, PauseRecorded, TurnResumed
from turnlog.errors import SettingError
from turnlog.notify import payload
from turnlog.notify.backoff import Backoff
from turnlog.notify.book import Book, Mark, Reminders
from turnlog.notify.config import Sink, build, parse_duration
from turnlog.notify.sender import DELIVERED, FAILED, REFUSED, Attempt, attempt, scrub
from turnlog.notify.signing import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    signature,
    signature_header,
    verify,
)

T0 = datetime(2026, 12, 3, 5, 0, tzinfo=UTC)
SECRET = b"s3cret-s3cret-s3cret"
TOKEN = "eyJhbGciOiJFZERTQSJ9.the-token-itself.signature"


def _pause(request: str = REQUEST, *, window: timedelta = timedelta(hours=2)) -> PauseRecorded:
    return PauseRecorded(
        event_id="ev-pause-1",
        occurred_at=T0,
        package_version="test",
        checkpoint=sample_checkpoint("thread-1"),
        token_id="tok-1",
        request_json=request,
        request_hash="h",
        response_schema="ask_user",
        expires_at=T0 + window,
    )


def test_a_recorded_notice_names_the_pause_and_links_the_inbox_never_the_token() -> None:
    data = json.loads(payload.body(payload.recorded(_pause()), "https://inbox.example/"))
    assert data == {
        "version": 1,
        "kind": "pause.recorded",
        "event_id": "ev-pause-1",
        "occurred_at": "2026-12-03T05:00:00.000Z",
        "thread_id": "thread-1",
        "token_id": "tok-1",
        "pause_event_id": "ev-pause-1",
        "checkpoint_id": "cp-1",
        "interaction": "ask_user",
        "summary": "Which region?",
        "deadline": "2026-12-03T07:00:00.000Z",
        "reason": None,
        "link": "https://inbox.example/pause/tok-1",
    }
    assert payload.body(payload.recorded(_pause()), None).count(b'"link":null') == 1
    assert TOKEN.encode() not in payload.body(payload.recorded(_pause()), None)


def test_a_summary_is_one_marked_clipped_line() -> None:
    sneaky = json.dumps({"questions": [{"question": "Delete the \u202etseT db?\n" + "x" * 500}]})
    summary = payload.recorded(_pause(sneaky)).summary
    assert summary is not None
    assert "\u202e" not in summary and "⟨U+202E⟩" in summary and "\n" not in summary
    assert len(summary) == 200 and summary.endswith("…")  # the ellipsis counted in the 200
    approval = json.dumps({"tool": "transfer_funds", "arguments": {"amount": 1}})
    assert payload.recorded(_pause(approval)).summary == "approve transfer_funds"
    two = json.dumps({"questions": [{"question": "A?"}, {"question": "B?"}]})
    assert payload.recorded(_pause(two)).summary == "A? (+1 more)"


def test_summaries_are_marked_as_the_inbox_marks_what_it_shows() -> None:
    from turnlog.notify import text

    spoof = "Delete the \u202etseT database?\u200b"
    assert text.one_line(spoof) == "Delete the ⟨U+202E⟩tseT database?⟨U+200B⟩"
    # CR, LF and TAB are controls like the others: marked where they stand, not made spaces.
    assert text.one_line("Which\r\nregion?\tEU") == "Which⟨U+000D⟩⟨U+000A⟩region?⟨U+0009⟩EU"
    assert text.one_line("x" * 200) == "x" * 200
    assert text.one_line("x" * 201) == "x" * 199 + "…"
    # Never half a mark: cut before it rather than leave "⟨U+20" to read as text.
    cut = text.one_line("x" * 195 + "\u202e" + "y" * 10)
    assert cut == "x" * 195 + "…" and len(cut) <= 200


def test_closing_notices_carry_the_pause_and_refusals_of_unknown_pauses_are_dropped() -> None:
    facts = payload.facts_of(_pause())
    expired = PauseExpired(
        event_id="ev-exp",
        occurred_at=T0,
        package_version="t",
        token_id="tok-1",
        thread_id="thread-1",
        checkpoint_id="cp-1",
        run_id="r",
        session_id="s",
        tool_call_id="call-1",
        expires_at=T0,
    )
    notice = payload.closed(expired, facts)
    assert notice is not None and notice.kind == payload.EXPIRED
    assert (notice.event_id, notice.pause_event_id, notice.summary) == (
        "ev-exp",
        "ev-pause-1",
        "Which region?",
    )
    refused = AnswerRejected(
        event_id="ev-rej",
        occurred_at=T0,
        package_version="t",
        answer_id="a",
        token_id="tok-1",
        thread_id="thread-1",
        reason="already_consumed",
        step=5,
        detail="",
    )
    seen = payload.closed(refused, facts)
    assert seen is not None and seen.reason == "already_consumed"
    assert payload.closed(refused, None) is None
    assert payload.closed(replace(refused, token_id="forged"), facts) is None
    # A token that did not verify only claims its id: nobody is told of such an answer.
    forged = replace(refused, reason="token_invalid", step=1)
    assert payload.closed(forged, facts) is None
    resumed = TurnResumed(
        event_id="ev-res",
        occurred_at=T0,
        package_version="t",
        token_id="tok-9",
        answer_id="a",
        run_id="r",
        session_id="s",
        thread_id="thread-9",
        checkpoint_id="cp-9",
        interrupt_id="i",
        tool_call_id="c",
        name="ask_user",
        prompt="Go on.",
        response_json="{}",
    )
    unknown = payload.closed(resumed, None)
    assert unknown is not None and (unknown.kind, unknown.pause_event_id) == (payload.RESUMED, None)


def test_the_slack_body_is_one_text_with_its_link() -> None:
    notice = payload.recorded(_pause(json.dumps({"question": "<b>&?"})))
    data = json.loads(payload.slack_body(notice, "https://inbox.example"))
    assert list(data) == ["text"]
    text = data["text"]
    assert (
        "&lt;b&gt;&amp;?" in text
        and "<https://inbox.example/pause/tok-1|open in the inbox>" in text
    )
    assert "answer by 2026-12-03 07:00 UTC" in text


def test_a_reminder_id_is_the_same_on_every_replay_and_not_the_pause_id() -> None:
    facts = payload.facts_of(_pause())
    first, again = payload.reminder(facts, T0), payload.reminder(facts, T0 + timedelta(1))
    assert first.event_id == again.event_id != facts.pause_event_id
    assert re.fullmatch("[0-9a-f]{32}", first.event_id)  # the documented form of every id


def test_every_call_of_a_group_hears_its_close_each_with_its_own_id() -> None:
    resumed = TurnResumed(
        event_id="e" * 32,
        occurred_at=T0,
        package_version="t",
        token_id="tok-b",
        answer_id="a",
        run_id="r",
        session_id="s",
        thread_id="thread-1",
        checkpoint_id="cp-1",
        interrupt_id="i",
        tool_call_id="call-b",
        name="ask_user",
        prompt="B?",
        response_json="{}",
        answers=(
            {"token_id": "tok-a", "name": "approve_tool_call", "tool_call_id": "call-a"},
            {"token_id": "tok-b", "name": "ask_user", "tool_call_id": "call-b"},
        ),
    )
    calls = payload.closing_calls(resumed, ())
    assert calls == ("tok-a", "tok-b")
    notices = [payload.closed(resumed, None, call=t, calls=len(calls)) for t in calls]
    assert [n.token_id for n in notices if n] == ["tok-a", "tok-b"]
    ids = [n.event_id for n in notices if n]
    assert len(set(ids)) == 2 and all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)
    assert [n.interaction for n in notices if n] == ["approve_tool_call", "ask_user"]
    expired = PauseExpired(
        event_id="f" * 32,
        occurred_at=T0,
        package_version="t",
        token_id="tok-a",
        thread_id="thread-1",
        checkpoint_id="cp-1",
        run_id="r",
        session_id="s",
        tool_call_id="call-a",
        expires_at=T0,
    )
    assert payload.closing_calls(expired, ("tok-a", "tok-b")) == ("tok-a", "tok-b")
    assert payload.closing_calls(expired, ()) == ("tok-a",)
    one = payload.closed(expired, None)
    assert one is not None and one.event_id == "f" * 32  # one call: the event's own id


def test_a_signature_verifies_and_nothing_else_does() -> None:
    body = b'{"kind":"pause.recorded"}'
    header = signature_header((SECRET,), 1_700_000_000, body)
    assert header == f"t=1700000000,v1={signature(SECRET, 1_700_000_000, body)}"
    assert verify(SECRET, header, body, now=1_700_000_100)
    assert not verify(SECRET, header, body + b" ", now=1_700_000_100)
    assert not verify(b"another-secret-entirely", header, body, now=1_700_000_100)
    assert not verify(SECRET, header, body, now=1_700_000_000 + 301)  # replayed later
    assert not verify(SECRET, header.replace("t=1700000000", "t=1700000001"), body, now=1.7e9)
    assert not verify(SECRET, "v1=" + "0" * 64, body, now=1.7e9)
    rotating = signature_header((b"the-new-secret-1234", SECRET), 1_700_000_000, body)
    assert verify(SECRET, rotating, body, now=1.7e9)
    assert verify(b"the-new-secret-1234", rotating, body, now=1.7e9)


def test_the_backoff_doubles_up_to_its_cap_with_jitter_for_a_day_by_default() -> None:
    default = Backoff()
    assert default.horizon == timedelta(days=1)
    assert [default.step(n) for n in (1, 2, 3, 9, 10, 1000)] == [1, 2, 4, 256, 300, 300]
    capped = Backoff(base_seconds=1, cap_seconds=10)
    # Equal jitter: somewhere in the upper half of the step, never more than the cap.
    assert [capped.delay(4, 0.0), capped.delay(4, 0.5), capped.delay(4, 0.999)] == [
        4.0,
        6.0,
        pytest.approx(7.996),
    ]
    assert capped.delay(50, 1.0) == 10
    for bad in ({"base_seconds": 0}, {"base_seconds": 5, "cap_seconds": 1}):
        with pytest.raises(ValueError):
            Backoff(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Backoff(horizon=timedelta(0))


def _facts(token: str, deadline_min: int, recorded_min: int = 0) -> payload.PauseFacts:
    return replace(
        payload.facts_of(_pause()),
        token_id=token,
        pause_event_id=f"ev-{token}",
        deadline=T0 + timedelta(minutes=deadline_min),
        recorded_at=T0 + timedelta(minutes=recorded_min),
    )


def test_reminders_fall_due_in_order_and_marks_say_which_are_done() -> None:
    book = Book()
    late, soon, short = _facts("late", 120), _facts("soon", 90), _facts("short", 30)
    for facts in (late, soon, short):
        book.learn(facts, 0, facts.token_id.encode())
    reminders = Reminders(timedelta(hours=1), {0: None})
    assert [reminders.offer(f, 0) for f in (late, soon, short)] == [True, True, False]
    assert not reminders.offer(late, 0)  # queued already
    assert reminders.next_due() == T0 + timedelta(minutes=30)
    assert reminders.pop_due(T0 + timedelta(minutes=29), book) is None
    first = reminders.pop_due(T0 + timedelta(minutes=45), book)
    assert first is not None and first.facts == soon
    reminders.done(first)
    book.close("late")  # answered meanwhile: its moment passes with nothing to send
    second = reminders.pop_due(T0 + timedelta(minutes=61), book)
    assert second is not None and second.facts is None
    reminders.done(second)
    assert reminders.pop_due(T0 + timedelta(days=1), book) is None

    # After a restart the mark read back from the commit says both are done.
    mark = Mark.decode(reminders.metadata(0))
    assert mark == Mark(T0 + timedelta(minutes=60), "late")
    again = Reminders(timedelta(hours=1), {0: mark})
    assert not again.offer(soon, 0) and not again.offer(late, 0)
    assert again.offer(_facts("later", 200), 0)


def test_a_reminder_past_its_deadline_or_of_a_forgotten_pause_is_not_sent() -> None:
    book = Book()
    facts = _facts("t", 120)
    book.learn(facts, 1, b"key")
    reminders = Reminders(timedelta(hours=1), {})
    reminders.offer(facts, 1)
    gone = reminders.pop_due(T0 + timedelta(minutes=121), book)
    assert gone is not None and gone.facts is None
    reminders.offer(facts, 1)
    book.forget(b"key")
    forgotten = reminders.pop_due(T0 + timedelta(minutes=61), book)
    assert forgotten is not None and forgotten.facts is None


def test_marks_decode_only_what_they_encode() -> None:
    mark = Mark(T0 + timedelta(microseconds=7), "tok|with|bars")
    assert Mark.decode(mark.encode()) == mark
    for junk in (None, "", "other metadata", "turnlog-notify/1 remind<=yesterday|x"):
        assert Mark.decode(junk) is None


def test_durations_and_the_config_are_checked_when_built() -> None:
    assert parse_duration("1h30m", "x") == timedelta(minutes=90)
    assert parse_duration("90", "x") == timedelta(seconds=90)
    assert parse_duration("2d", "x") == timedelta(days=2)
    for bad in ("1x", "h", "1h 2m", ""):
        with pytest.raises(SettingError):
            parse_duration(bad, "x")
    env = {
        "TURNLOG_NOTIFY_SECRET": "0123456789abcdef",
        "TURNLOG_NOTIFY_URLS": "http://a/x,http://b",
    }
    config = build(env, slack_urls=["https://hooks.example/services/T/B/secretpath"])
    assert [s.url for s in config.sinks] == ["http://a/x", "http://b", config.sinks[2].url]
    assert config.sinks[2].slack and config.sinks[2].describe() == "https://hooks.example/…"
    assert config.remind_before is None and config.secrets == (b"0123456789abcdef",)
    assert len({config.group_id("app", s) for s in config.sinks}) == 3
    with pytest.raises(SettingError, match="secret"):
        build({"TURNLOG_NOTIFY_URLS": "http://a"})
    with pytest.raises(SettingError, match="16 bytes"):
        build({**env, "TURNLOG_NOTIFY_SECRET": "short"})
    with pytest.raises(SettingError, match="http"):
        build(env, urls=["file:///etc/passwd"])
    with pytest.raises(SettingError, match="TURNLOG_NOTIFY_TIMEOUT"):
        build({**env, "TURNLOG_NOTIFY_TIMEOUT": "soon"})
    assert Sink("https://user:pw@host:8443/p?k=v").describe() == "https://host:8443/…"
    assert config.backoff == Backoff()
    tuned = build({**env, "TURNLOG_NOTIFY_RETRY_CAP": "2s"}, retry_for="6h", retry_base="0.2")
    assert tuned.backoff == Backoff(0.2, 2.0, timedelta(hours=6))
    for bad in (
        {"retry_for": "30s"},
        {"retry_for": "31d"},
        {"retry_base": "1m", "retry_cap": "1s"},
    ):
        with pytest.raises(SettingError):
            build(env, **bad)


class _Receiver:
    def __init__(self, *answers: int | BaseException) -> None:
        self.answers = list(answers)
        self.seen: list[Mapping[str, str]] = []

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> int:
        self.seen.append(headers)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def _attempt(receiver: _Receiver, url: str = "http://r") -> Attempt:
    return await attempt(
        receiver,
        url,
        b"{}",
        event_id="ev-1",
        kind="pause.recorded",
        secrets=(SECRET,),
        timeout=2,
        clock=lambda: 1_700_000_000.0,
    )


async def test_an_attempt_says_whether_to_try_again_and_never_names_the_url() -> None:
    receiver = _Receiver(500, TimeoutError(), ConnectionResetError("reset"), 429, 204, 404)
    outcomes = [await _attempt(receiver) for _ in range(6)]
    assert [a.outcome for a in outcomes] == [FAILED] * 4 + [DELIVERED, REFUSED]
    assert [a.error for a in outcomes] == [
        "HTTP 500",
        "no answer within 2s",
        "ConnectionResetError: reset",
        "HTTP 429",
        "",
        "HTTP 404",
    ]
    assert {h[IDEMPOTENCY_HEADER] for h in receiver.seen} == {"ev-1"}
    assert all(verify(SECRET, h[SIGNATURE_HEADER], b"{}", now=1.7e9) for h in receiver.seen)
    url = "https://u:pw@hooks.example/services/T0/B0/SECRETPATH?token=QSECRET"
    leaky = _Receiver(OSError(f"cannot reach {url} (path /services/T0/B0/SECRETPATH)"))
    said = (await _attempt(leaky, url)).error
    assert said == "OSError: cannot reach https://hooks.example/… (path …)"
    assert scrub("token=QSECRET at u:pw", url) == "… at …"
