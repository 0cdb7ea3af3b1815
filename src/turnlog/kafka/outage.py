"""Riding out an unreachable broker: retry with backoff for a budget, one line each way.

A broker that goes away (a restart, a leader change, a network blip) is retried with backoff
for ``Settings.broker_timeout_seconds``; the first failure logs one line and the first success
after it another; only past the budget is it :class:`~turnlog.errors.BrokerUnavailable` (the
CLI's exit 4). :class:`BrokerOutage` keeps that account for loops that retry on their own (the
worker, the projector, ``ResumedTurns``); :func:`ride_out` wraps a one-shot attempt (a pause, an
answer, a topic check).

An address that has never answered this process is not having an outage: it is mistyped, a
closed port, or a broker not started yet. :func:`ride_out` gives such an address the much
shorter ``Settings.connect_timeout_seconds``, and its first line says what plain connections
to the servers found (refused, a name that does not resolve) -- before, a typo was waited on in
silence for the whole five-minute outage budget.

That budget is a person's: a CLI verb run against a wrong address. A service -- a worker, the
notifier, the inbox, a projector -- is started by a supervisor, possibly while its broker is
down for a restart, and must wait that out as it would an outage after its first contact: code
running :func:`as_service` gives a never-reached address the outage budget, says so in its
line, and :func:`waiting` tells its readiness why it is not ready meanwhile. A malformed address
is refused before any of this (``Settings`` checks it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    UnknownTopicOrPartitionError,
)

from turnlog.errors import BrokerUnavailable
from turnlog.kafka import clients
from turnlog.kafka.addresses import bootstrap_servers
from turnlog.kafka.internals import cancel_sender_tasks, fail_pending
from turnlog.kafka.reader import BrokerOutage
from turnlog.kafka.security import KafkaConnection

T = TypeVar("T")


class BrokerSettings(Protocol):
    """What the outage account reads of the settings (``Settings`` is one): the address, the two
    budgets, and the connection a client is built from. A protocol, so that the Kafka room
    never imports the settings, which import the Kafka room's security value."""

    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def broker_timeout_seconds(self) -> float: ...
    @property
    def connect_timeout_seconds(self) -> float: ...
    @property
    def connection(self) -> KafkaConnection: ...


#: One line when the broker goes, one when it is back (the CLI quiets it for one-shot verbs,
#: whose single error line says the same, unless a person watches the terminal).
OUTAGE_LOG = logging.getLogger("turnlog.kafka.outage")

#: How long a first attempt at a never-reached address may go unanswered before its servers
#: are looked at (a silently dropped connection would otherwise say nothing until it times out).
NOTICE_AFTER_SECONDS = 1.0
#: How long each look at a server (a name lookup, then a TCP connection) may take.
LOOK_SECONDS = 1.0

#: The bootstrap addresses that have answered this process. One answer is what makes a later
#: failure an outage, whichever component had it: a worker that reached its broker at start and
#: a pause that finds it gone an hour later both get the outage budget, not the first-contact
#: one. Only ever added to: an address that answered once is a real one.
_REACHED: set[str] = set()


#: The service the running code belongs to (:func:`as_service`), or ``None`` for a CLI verb or
#: a library call. A context variable: tasks the service starts inherit it, others do not.
_SERVICE: ContextVar[str | None] = ContextVar("turnlog_service", default=None)
#: What each service waits for now, as its readiness says it: one entry per wait under way.
_WAITING: dict[int, str] = {}


@contextlib.contextmanager
def as_service(name: str) -> Iterator[None]:
    """Run the block as the service ``name``: a never-reached address is waited for under the
    outage budget (``broker_timeout_seconds``), not the first-contact one."""
    token = _SERVICE.set(name)
    try:
        yield
    finally:
        _SERVICE.reset(token)


def serve_as(name: str) -> None:
    """:func:`as_service` for the rest of the running task (a CLI verb's whole life)."""
    _SERVICE.set(name)


def waiting() -> str | None:
    """Why a service is not ready because of its broker (the first wait under way), if it is
    waiting for one: what ``/readyz`` says beside "not ready"."""
    return next(iter(_WAITING.values()), None)


def reached(address: str) -> bool:
    """Whether ``address`` (a bootstrap string) has answered this process."""
    return address.strip() in _REACHED


def mark_reached(address: str) -> None:
    _REACHED.add(address.strip())


def first_contact_budget(settings: BrokerSettings) -> tuple[float, str]:
    """How long a never-reached address is tried, and the setting that said so: the
    first-contact budget, never longer than the outage budget."""
    if settings.connect_timeout_seconds <= settings.broker_timeout_seconds:
        return settings.connect_timeout_seconds, "TURNLOG_CONNECT_TIMEOUT"
    return settings.broker_timeout_seconds, "TURNLOG_BROKER_TIMEOUT"


@dataclass(frozen=True, slots=True)
class Look:
    """What a plain TCP connection to one bootstrap server found."""

    server: str
    found: str
    #: A connection opened: something listens, so the trouble is above TCP (TLS, SASL, not
    #: Kafka) or the broker is merely slow.
    connects: bool

    def __str__(self) -> str:
        return f"{self.server}: {self.found}"


async def look_at(address: str, timeout: float = LOOK_SECONDS) -> list[Look]:
    """Look up and connect to each server of ``address`` (side by side, ``timeout`` each step).

    aiokafka logs why it could not connect and raises only "Unable to bootstrap"; this says it
    in the words a person acts on. It opens and closes a TCP connection and sends nothing.
    """
    try:
        servers = bootstrap_servers(address)
    except ValueError:
        return []
    return list(await asyncio.gather(*(_look(host, port, timeout) for host, port in servers)))


async def _look(host: str, port: int, timeout: float) -> Look:
    server = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout
        )
    except socket.gaierror:
        return Look(server, "the name does not resolve", False)
    except (OSError, TimeoutError):
        return Look(server, f"the name did not resolve within {timeout:g}s", False)
    family, _, proto, _, where = infos[0]
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(str(where[0]), int(where[1]), family=family, proto=proto),
            timeout,
        )
    except ConnectionRefusedError:
        return Look(server, "connection refused", False)
    except TimeoutError:
        return Look(server, f"no answer to a connection within {timeout:g}s", False)
    except OSError as exc:
        return Look(server, (exc.strerror or str(exc)).lower(), False)
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), timeout)
    return Look(server, "a connection opens, but no Kafka answer came", True)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the broker cannot be reached *now* (worth retrying), as opposed to
    a refusal that a retry would only repeat. An unknown topic is not an outage."""
    if isinstance(exc, UnknownTopicOrPartitionError):
        return False
    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError | NodeNotReadyError):
        return True
    return isinstance(exc, KafkaError) and bool(exc.retriable)


def attempt_timeout(settings: BrokerSettings) -> float:
    """How long one attempt may take before the broker counts as gone: a tenth of the outage
    budget, at least 5 s (a transactional start on a busy machine) and at most 10 s (so the
    line saying the broker went comes within seconds of it going)."""
    return min(10.0, max(5.0, settings.broker_timeout_seconds / 10))


def request_timeout_ms(settings: BrokerSettings) -> int:
    """A client's own request timeout: no longer than one attempt."""
    return int(attempt_timeout(settings) * 1000)


async def stop_producer(producer: AIOKafkaProducer, *, patience: float, grace: float = 2.0) -> None:
    """Stop ``producer``, waiting up to ``patience`` seconds for what it still has to deliver,
    and then not waiting for the broker any more.

    aiokafka 0.14's idempotent and transactional producers never expire a batch -- they retry
    until the broker takes it -- and ``stop()`` waits for every pending batch and, for a
    transactional producer, for its coordinator lookups, which also retry until the broker
    answers: with the broker gone a plain stop never returns. So past ``patience`` the pending
    batches are failed (the accumulator's own ``fail_all``, as an abort does), then the
    sender's tasks are cancelled, then the client is closed. Whatever was not acknowledged is
    the caller's to send again, as the same fact. (aiokafka internals, pinned ``<0.15``.)
    """
    stopping = asyncio.ensure_future(producer.stop())
    steps = (
        lambda: fail_pending(getattr(producer, "_message_accumulator", None)),
        lambda: cancel_sender_tasks(producer),
        stopping.cancel,
    )
    done, _ = await asyncio.wait([stopping], timeout=patience)
    for step in steps:
        if done:
            break
        step()
        done, _ = await asyncio.wait([stopping], timeout=grace)
    if not stopping.done() or stopping.cancelled() or stopping.exception() is not None:
        # The stop ended on the cancelled sender before it closed the client: close it here.
        client = getattr(producer, "client", None)
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), grace)
            except Exception as exc:  # noqa: BLE001 - best effort on a client being dropped
                OUTAGE_LOG.debug("closing an abandoned producer's client: %r", exc)


async def abandon(producer: AIOKafkaProducer) -> None:
    """Close a producer whose broker may be gone at once: its pending sends fail."""
    fail_pending(getattr(producer, "_message_accumulator", None))
    await stop_producer(producer, patience=0.5)


async def reach(settings: BrokerSettings, *, who: str) -> None:
    """Have the first answer from ``settings``' address, unless this process already had one.

    For callers whose next step retries on its own for the outage budget (a projector's start,
    a worker's): run first, it makes a never-reached address ``BrokerUnavailable`` within the
    first-contact budget, with its one line, instead of five minutes of that step's retries.
    An admin client's start is the cheapest answer there is (a metadata request).
    """
    if reached(settings.bootstrap_servers):
        return

    async def attempt() -> None:
        admin = clients.admin(settings, client_id="turnlog-contact")
        try:
            await admin.start()
        finally:
            await admin.close()

    await ride_out(attempt, settings=settings, who=who, timeout=attempt_timeout(settings))


async def ride_out(
    attempt: Callable[[], Awaitable[T]],
    *,
    settings: BrokerSettings,
    who: str,
    timeout: float | None = None,
    log: logging.Logger = OUTAGE_LOG,
) -> T:
    """``attempt()``, retried with backoff while the broker is unreachable.

    An attempt fails on an outage when it raises one of aiokafka's "cannot reach" errors, or
    -- with ``timeout`` -- when it has not finished in that many seconds (idempotent producers
    do not fail while the broker is away: they wait for it), in which case it is cancelled and
    must clean up after itself. The lines and the budget are the shared
    :class:`~turnlog.kafka.reader.BrokerOutage`'s: once the outage (dated from the start of the
    first failed attempt) has lasted ``settings.broker_timeout_seconds``, the next failure is
    :class:`BrokerUnavailable` -- never retried here: whoever raises it has already waited.
    Anything that is not an outage is raised at once.

    An address that has not answered this process yet gets the first-contact budget instead
    (:func:`first_contact_budget`), every attempt is cut off at its end, and the first line
    comes as soon as an attempt fails or has gone unanswered for
    :data:`NOTICE_AFTER_SECONDS` while no server accepts a connection. In a service
    (:func:`as_service`) a never-reached address has the outage budget instead.
    """
    address = settings.bootstrap_servers
    first = not reached(address)
    service = _SERVICE.get()
    budget, setting = (
        first_contact_budget(settings)
        if first and service is None
        else (settings.broker_timeout_seconds, "TURNLOG_BROKER_TIMEOUT")
    )
    outage = BrokerOutage(
        budget, f"{who} (Kafka at {address})", log, setting=setting, never_reached=first,
        service=service,
    )  # fmt: skip
    try:
        return await _ride_out(attempt, settings, outage, first, budget, timeout)
    finally:
        _WAITING.pop(id(outage), None)


async def _ride_out(
    attempt: Callable[[], Awaitable[T]],
    settings: BrokerSettings,
    outage: BrokerOutage,
    first: bool,
    budget: float,
    timeout: float | None,
) -> T:
    loop = asyncio.get_running_loop()
    address = settings.bootstrap_servers
    since: float | None = None
    while True:
        started = loop.time()
        limit = timeout
        if first:
            # Nothing waits past the first-contact budget, whatever the attempt's own timeouts.
            end = (started if since is None else since) + budget + 1.0
            limit = max(1.0, min(end - started, limit if limit is not None else end - started))
        elif limit is not None and since is not None:
            limit = max(1.0, min(limit, since + budget - started + 1.0))
        try:
            if first and not outage.down and limit is not None:
                result = await _watched(attempt, limit, outage, address)
            else:
                result = await (attempt() if limit is None else asyncio.wait_for(attempt(), limit))
        except BrokerUnavailable:
            raise
        except Exception as exc:
            if not (is_outage(exc) or isinstance(exc, TimeoutError)):
                raise
            if isinstance(exc, TimeoutError):
                exc = TimeoutError(f"no answer within {loop.time() - started:.0f}s")
            if since is None and settings.connection.security.protocol != "PLAINTEXT":
                # aiokafka's clients drop a refused SASL login or TLS certificate into "Unable
                # to bootstrap": one direct look at the first failure tells a wrong credential
                # (raised, as the CLI says it: not authorized) from a broker that is away.
                await clients.check_credentials(settings.connection, timeout=min(10.0, budget))
            since = started if since is None else since
            if first and outage.tried is None:
                outage.tried = "; ".join(map(str, await look_at(address))) or None
            backoff = outage.failed(exc, began=started)
            if outage.service is not None:
                _WAITING[id(outage)] = (
                    f"{outage.who}: waiting for the broker, up to {budget:g}s "
                    f"(TURNLOG_BROKER_TIMEOUT)"
                )
            # The last attempt comes just after the budget is spent, and its failure raises.
            await asyncio.sleep(min(backoff, max(0.05, since + budget - loop.time() + 0.05)))
            continue
        outage.ok()
        mark_reached(address)
        return result


async def _watched(
    attempt: Callable[[], Awaitable[T]], limit: float, outage: BrokerOutage, address: str
) -> T:
    """The first attempt at a never-reached address, with a look at its servers when it has
    not finished in :data:`NOTICE_AFTER_SECONDS`: a connection that is silently dropped (a
    firewall, a wrong private address) fails only at the client's own timeout, and the first
    line must not wait for that. Nothing is said while a server accepts connections (a slow
    broker, a topic creation): the attempt may still succeed."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    task: asyncio.Future[T] = asyncio.ensure_future(attempt())
    try:
        done, _ = await asyncio.wait({task}, timeout=min(NOTICE_AFTER_SECONDS, limit))
        if not done:
            looks = await look_at(address)
            if looks and not any(look.connects for look in looks):
                outage.tried = "; ".join(map(str, looks))
                outage.went(f"no answer within {loop.time() - started:.0f}s", began=started)
            done, _ = await asyncio.wait({task}, timeout=max(0.0, started + limit - loop.time()))
            if not done:
                raise TimeoutError
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
