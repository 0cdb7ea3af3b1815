"""One webhook's deliveries through its receiver's outage, on a clock the test turns: what
fails is kept (on the outbox) and tried again with backoff, in the order it was made and
behind the earlier notices of its own call; given up with its reason past its horizon (a
reminder: its pause's window); refused at once; a notice failing alone rests alone."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from turnlog.notify import payload
from turnlog.notify.backoff import Backoff
from turnlog.notify.config import NotifyConfig, Sink
from turnlog.notify.courier import Courier
from turnlog.notify.metrics import NotifyMetrics
from turnlog.notify.undelivered import Outbox
from turnlog.notify.waiting import DEAD, Backlog, Undelivered

T0 = datetime(2026, 12, 3, 5, 0, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def turn(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class _Receiver:
    """Answers ``status`` (or raises while ``down``); ``refuse``: event ids answered 404,
    ``fail``: event ids answered 500 whatever the rest does."""

    def __init__(self) -> None:
        self.down = True
        self.refuse: set[str] = set()
        self.fail: set[str] = set()
        self.taken: list[str] = []
        self.tries = 0

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> int:
        self.tries += 1
        key = headers["turnlog-idempotency-key"]
        if self.down:
            raise ConnectionRefusedError("refused")
        if key in self.refuse:
            return 404
        if key in self.fail:
            return 500
        self.taken.append(key)
        return 200


class _Outbox:
    """What the courier wrote to the undelivered topic, latest per key."""

    def __init__(self) -> None:
        self.latest: dict[bytes, Undelivered] = {}

    async def keep(self, entry: Undelivered) -> None:
        self.latest[entry.key] = entry

    async def drop(self, entry: Undelivered) -> None:
        self.latest.pop(entry.key, None)


def _courier(receiver: _Receiver, clock: _Clock, outbox: _Outbox) -> Courier:
    config = NotifyConfig(
        sinks=(Sink("http://r/x"),),
        secrets=(b"s3cret-s3cret-s3cret",),
        backoff=Backoff(base_seconds=1, cap_seconds=8, horizon=timedelta(minutes=5)),
    )
    metrics = NotifyMetrics(CollectorRegistry())
    fake: Outbox = outbox  # type: ignore[assignment]
    return Courier(
        "lane",
        config.sinks[0],
        config,
        receiver,
        fake,
        metrics,
        Backlog(),
        now=clock,
        draw=lambda: 0.0,
    )


def _notice(kind: str, token: str, n: int) -> payload.Notice:
    return payload.Notice(kind, f"{n:032x}", T0, "thread-1", token)


async def test_an_outage_keeps_every_notice_and_delivers_them_in_order_when_it_ends() -> None:
    receiver, clock, outbox, stop = _Receiver(), _Clock(), _Outbox(), asyncio.Event()
    courier = _courier(receiver, clock, outbox)
    await courier.send(_notice(payload.RECORDED, "a", 1))
    assert receiver.tries == 1 and len(outbox.latest) == 1  # tried once, then kept
    await courier.send(_notice(payload.RECORDED, "b", 2))
    await courier.send(_notice(payload.EXPIRED, "a", 3))
    assert receiver.tries == 1  # the webhook rests: the others wait without a try
    assert [e.event_id[-1] for e in courier.backlog.in_order()] == ["1", "2", "3"]
    waits = []
    for _ in range(4):  # down: 1 s, 2 s, 4 s, 8 s (capped) between probes
        due = courier.next_due()
        assert due is not None
        waits.append((due - clock.now).total_seconds())
        clock.now = due
        await courier.retry(stop)
    assert waits == [0.5, 1.0, 2.0, 4.0]  # the lower end of each step: the draw was 0
    # Each probe is two POSTs (two calls' notices: is it the webhook, or one notice?).
    assert receiver.tries == 1 + 4 * 2 and len(courier.backlog) == 3
    receiver.down = False
    clock.now = courier.next_due() or clock.now
    await courier.retry(stop)
    assert receiver.taken == [f"{n:032x}" for n in (1, 2, 3)]
    assert outbox.latest == {} and courier.next_due() is None
    # Back up: a fresh notice goes at once.
    await courier.send(_notice(payload.RECORDED, "c", 4))
    assert receiver.taken[-1] == f"{4:032x}" and not outbox.latest


async def test_past_the_horizon_or_the_window_a_notice_is_dead_lettered_with_its_reason() -> None:
    receiver, clock, outbox, stop = _Receiver(), _Clock(), _Outbox(), asyncio.Event()
    courier = _courier(receiver, clock, outbox)
    await courier.send(_notice(payload.RECORDED, "a", 1))
    reminder = _notice(payload.REMINDER, "b", 2)
    await courier.send(reminder, give_up_at=T0 + timedelta(minutes=1))
    clock.turn(61)
    await courier.retry(stop)
    [dead] = [e for e in outbox.latest.values() if e.state == DEAD]
    assert dead.event_id == reminder.event_id
    assert dead.reason.startswith("the pause's window closed before the reminder got through")
    assert "ConnectionRefusedError: refused" in dead.reason
    clock.turn(240)
    await courier.retry(stop)
    assert {e.state for e in outbox.latest.values()} == {DEAD} and not len(courier.backlog)
    first = outbox.latest[b"lane|" + f"{1:032x}".encode()]
    assert first.reason.startswith("not taken within 0:05:00 (last: ConnectionRefusedError")


async def test_a_refusal_is_dead_at_once_and_a_notice_failing_alone_rests_alone() -> None:
    receiver, clock, outbox, stop = _Receiver(), _Clock(), _Outbox(), asyncio.Event()
    receiver.down = False
    courier = _courier(receiver, clock, outbox)
    receiver.refuse.add(f"{1:032x}")
    await courier.send(_notice(payload.RECORDED, "a", 1))
    [dead] = outbox.latest.values()
    assert dead.state == DEAD and dead.reason.startswith("refused by the receiver: HTTP 404")
    # While the webhook is down, three notices wait; when it is back, the first fails alone.
    receiver.down = True
    await courier.send(_notice(payload.RECORDED, "b", 2))
    await courier.send(_notice(payload.RECORDED, "c", 3))
    await courier.send(_notice(payload.EXPIRED, "b", 4))
    receiver.down, receiver.fail = False, {f"{2:032x}"}
    clock.now = courier.next_due() or clock.now
    await courier.retry(stop)
    # c got through; b's expiry waits behind b's recorded notice, which rests on its own.
    assert receiver.taken == [f"{3:032x}"]
    assert [e.token_id for e in courier.backlog.in_order()] == ["b", "b"]
    receiver.fail = set()
    due = courier.next_due()
    assert due is not None and due > clock.now
    clock.now = due
    await courier.retry(stop)
    assert receiver.taken == [f"{n:032x}" for n in (3, 2, 4)]


def test_an_undelivered_notice_survives_its_encoding_and_nothing_else_decodes() -> None:
    entry = Undelivered("lane", "e" * 32, "tok", "pause.recorded", b'{"a":"\xc3\xa9"}', 7, T0, T0)
    assert Undelivered.decode(entry.encode()) == entry
    gone = entry.dead("why", T0)
    assert Undelivered.decode(gone.encode()) == gone
    for junk in (b"", b"{}", b"[1]", b'{"format": 2}', b"\xff"):
        assert Undelivered.decode(junk) is None
    assert entry.key == b"lane|" + b"e" * 32
