"""The ``turnlog`` command.

Every verb reads the same settings (environment, overridden by the global options), prints data
as a rich table or, with ``--json``, as JSON, and fails with one clear line and a meaningful exit
code -- never a traceback unless ``--debug``:

  0 ok · 1 failure · 2 usage · 3 refused (a token or answer was refused) · 4 broker unavailable
  · 5 not authorized (the broker refused this principal: an ACL or the credentials)

The typer app, its global options, and how a verb runs (one error line, an exit code).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from rich.console import Console
from rich.markup import escape

from turnlog.cli.usage import TurnlogGroup
from turnlog.errors import BrokerUnavailable, PauseInvalid, SettingError, TurnlogError
from turnlog.kafka.clients import check_credentials
from turnlog.kafka.reader import NOT_AUTHORIZED
from turnlog.settings import Settings, SettingWarning, bootstrap_servers

app = typer.Typer(
    cls=TurnlogGroup,
    name="turnlog",
    help="Paused agent turns, durable and resumable exactly once, over Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


broker_app = typer.Typer(help="The local Apache Kafka (no Docker needed).", no_args_is_help=True)


topics_app = typer.Typer(help="Create, verify and describe the topic set.", no_args_is_help=True)


keys_app = typer.Typer(help="Token signing keys.", no_args_is_help=True)


app.add_typer(broker_app, name="broker")


app.add_typer(topics_app, name="topics")


app.add_typer(keys_app, name="keys")


out = Console()


err = Console(stderr=True)


EXIT_FAILURE, EXIT_USAGE, EXIT_REFUSED, EXIT_BROKER, EXIT_UNAUTHORIZED = 1, 2, 3, 4, 5


#: What a shell reports for a process ended by SIGINT.
EXIT_INTERRUPTED = 130


T = TypeVar("T")


@dataclass
class State:
    """What the global options decided, carried on the typer (click) context of the run."""

    settings: Settings = field(default_factory=Settings)
    debug: bool = False


def run_state(ctx: typer.Context) -> State:
    """The run's :class:`State`, set on the root context by the global options."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, State) else State()


#: Verbs that run until stopped: they show the one line when the broker goes and the one when
#: it comes back. The others say it once, in their own error line, when the budget is spent.
LONG_RUNNING = frozenset({"worker", "project", "tail", "demo", "inbox"})


#: The option each settings field is given by, for naming a bad value.
OPTION_NAMES = {
    "bootstrap_servers": "--bootstrap-servers",
    "topic_prefix": "--topic-prefix",
    "state_dir": "--state-dir",
    "keys_dir": "--keys-dir",
    "partitions": "--partitions",
    "broker_timeout_seconds": "--broker-timeout",
    "connect_timeout_seconds": "--connect-timeout",
}


JsonOpt = Annotated[bool, typer.Option("--json", help="Print data as JSON.")]


_BROKER_TIMEOUT_HELP = "Exit 4 once Kafka is unreachable this long (env TURNLOG_BROKER_TIMEOUT)."


BrokerTimeoutOpt = Annotated[
    float | None, typer.Option("--broker-timeout", metavar="SECONDS", help=_BROKER_TIMEOUT_HELP)
]


@app.callback()
def main_options(
    ctx: typer.Context,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers (env TURNLOG_BOOTSTRAP_SERVERS).")
    ] = None,
    topic_prefix: Annotated[
        str | None, typer.Option(help="Topic name prefix (env TURNLOG_TOPIC_PREFIX).")
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option(help="Local store directory (env TURNLOG_STATE_DIR).")
    ] = None,
    keys_dir: Annotated[
        Path | None, typer.Option(help="Token keys directory (env TURNLOG_KEYS_DIR).")
    ] = None,
    partitions: Annotated[
        int | None, typer.Option(help="Partitions of new topics (env TURNLOG_PARTITIONS).")
    ] = None,
    broker_timeout: BrokerTimeoutOpt = None,
    connect_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="Exit 4 when Kafka has not answered once in this long "
            "(env TURNLOG_CONNECT_TIMEOUT, default 15).",
        ),
    ] = None,
    kafka_config: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Kafka client.properties (security, SASL, TLS; env TURNLOG_KAFKA_CONFIG).",
        ),
    ] = None,
    debug: Annotated[bool, typer.Option(help="Show tracebacks.")] = False,
) -> None:
    ctx.obj = current = State(debug=debug)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", SettingWarning)
            current.settings = Settings.from_env(
                names=OPTION_NAMES,
                bootstrap_servers=bootstrap_servers,
                topic_prefix=topic_prefix,
                state_dir=state_dir,
                keys_dir=keys_dir,
                partitions=partitions,
                broker_timeout_seconds=broker_timeout,
                connect_timeout_seconds=connect_timeout,
                kafka_config=kafka_config,
            )
    except SettingError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    for warning in warned:  # a misspelt TURNLOG_ variable: one line each, the verb runs on
        err.print(f"[yellow]warning:[/yellow] {escape(str(warning.message))}", soft_wrap=True)
    if current.settings.schema_registry_url:  # every verb reads either framing
        from turnlog.kafka.registry import read_through

        read_through(current.settings)
    _quiet_logs(ctx, debug)


def _quiet_logs(ctx: typer.Context, debug: bool) -> None:
    # Kafka client chatter (reconnect attempts) is for --debug; the verb says what failed.
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiokafka").setLevel(logging.DEBUG if debug else logging.CRITICAL)
    # A one-shot verb says what went wrong in its one error line; the lines a component logs
    # while it waits (the broker went, came back) are for the verbs that keep running -- and
    # for a person at a terminal, who would otherwise watch a verb wait in silence.
    quiet = not debug and ctx.invoked_subcommand not in LONG_RUNNING
    logging.getLogger("turnlog").setLevel(logging.ERROR if quiet else logging.NOTSET)
    if quiet and _watched_terminal():
        logging.getLogger("turnlog.kafka.outage").setLevel(logging.WARNING)


def _watched_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced, or closed
        return False


def fail(message: str, code: int) -> typer.Exit:
    line = " ".join(message.split())  # one line, whatever the message carried
    err.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _apply_broker_timeout(current: State, seconds: float | None) -> None:
    """A verb's own ``--broker-timeout`` wins over the global one and the environment."""
    if seconds is None:
        return
    try:
        current.settings = current.settings.with_(broker_timeout_seconds=seconds)
    except SettingError as exc:
        raise fail(str(SettingError("--broker-timeout", seconds, exc.why)), EXIT_USAGE) from None


class Interrupted(Exception):
    """The verb was stopped by a signal before it could finish on its own."""


def run_async(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run an async verb, turning turnlog's errors into one line and an exit code (a verb's
    own ``broker_timeout`` is applied to the settings here, before it runs)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        from turnlog.contracts.refusals import Refused

        # Typer hands the verb click's own context class (typer.Context subclasses it), so it
        # is found by what it does, not by its class.
        ctx = next((a for a in (*args, *kwargs.values()) if hasattr(a, "find_root")), None)
        current = run_state(ctx) if ctx is not None else State()
        _apply_broker_timeout(current, kwargs.get("broker_timeout"))

        async def checked() -> T:
            # A refused SASL login is said at once, not waited out as an outage.
            await check_credentials(current.settings)
            return await fn(*args, **kwargs)

        try:
            return asyncio.run(checked())
        except typer.Exit:
            raise
        except (KeyboardInterrupt, asyncio.CancelledError, Interrupted):
            # Ctrl-C during a one-shot verb, or a long-running one that did not stop in time.
            raise fail("interrupted", EXIT_INTERRUPTED) from None
        except Exception as exc:
            if current.debug:
                raise
            if isinstance(exc, Refused):
                raise fail(f"refused: {exc.refusal}", EXIT_REFUSED) from None
            if isinstance(exc, SettingError | PauseInvalid):
                raise fail(str(exc), EXIT_USAGE) from None
            denied = _not_authorized(exc)
            if denied is not None:
                who = current.settings.kafka.describe()
                raise fail(
                    f"not authorized: {denied} (Kafka at {current.settings.bootstrap_servers}, "
                    f"{who}); `turnlog acls` prints what each role needs",
                    EXIT_UNAUTHORIZED,
                ) from None
            if isinstance(exc, BrokerUnavailable | KafkaConnectionError | KafkaTimeoutError):
                address = current.settings.bootstrap_servers
                raise fail(
                    f"Kafka at {address} is not reachable: {exc}; {broker_hint(address)}",
                    EXIT_BROKER,
                ) from None
            if isinstance(exc, TurnlogError | KafkaError | OSError | ValueError):
                raise fail(f"{type(exc).__name__}: {exc}", EXIT_FAILURE) from None
            raise

    return wrapper


def broker_hint(address: str) -> str:
    """What to do about an unreachable ``address``: start the local broker when every server is
    this machine (what ``turnlog broker up`` serves), else look at the address and the way to
    it -- "start one" is no help to someone who mistyped a cluster's host name."""
    try:
        servers = bootstrap_servers(address)
    except ValueError:
        servers = []
    if servers and all(_loopback(host) for host, _ in servers):
        return "start one with `turnlog broker up`"
    return (
        "check the address (--bootstrap-servers, TURNLOG_BOOTSTRAP_SERVERS) and that this "
        "machine can reach it (DNS, firewall, VPN, the broker's advertised listeners)"
    )


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _not_authorized(exc: BaseException) -> str | None:
    """What the broker refused, when ``exc`` (or what caused it) is an authorization failure."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, NOT_AUTHORIZED):
            return f"{type(seen).__name__}: {seen}"
        seen = seen.__cause__ or seen.__context__
    return None


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def print_json_line(data: Any) -> None:
    """One compact JSON object on one line (JSON Lines), flushed: a stream's record, for pipes."""
    sys.stdout.write(json.dumps(data, sort_keys=True, default=str, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class Interrupts:
    """SIGINT and SIGTERM for a long-running verb, installed before it does anything else.

    The first signal asks every registered component to finish its batch, commit and leave
    (``on_stop``); a signal before any is registered, a second signal, or a component still
    busy after ``grace`` seconds (a restore, a catch-up: they do not look at the stop flag)
    cancels the verb instead, which then exits 130 with one line. If even the cancellation
    cannot finish within ``grace`` (a client stuck waiting on a lock), the process leaves at
    once: what it had not committed is redone by the next owner, as after a crash.
    """

    def __init__(self, grace: float = 10.0) -> None:
        self.signal: int | None = None
        self._grace = grace
        self._stops: list[Callable[[], None]] = []
        self._task = asyncio.current_task()
        self._cancelled = False
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._received, sig)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def on_stop(self, stop: Callable[[], None]) -> None:
        """Register a graceful stop; called at once if a signal already came."""
        self._stops.append(stop)
        if self.signal is not None:
            stop()

    def _received(self, sig: int) -> None:
        if self.signal is not None or not self._stops:
            self.signal = self.signal or sig
            self._cancel()
            return
        self.signal = sig
        for stop in self._stops:
            stop()
        asyncio.get_running_loop().call_later(self._grace, self._cancel)

    def _cancel(self) -> None:
        if self._task is None or self._task.done():
            return
        if self._cancelled:
            self._abandon()
            return
        self._cancelled = True
        self._task.cancel()
        asyncio.get_running_loop().call_later(self._grace, self._abandon)

    def _abandon(self) -> None:
        if self._task is None or self._task.done():
            return
        err.print("[red]error:[/red] interrupted; left without a clean stop", soft_wrap=True)
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        app()
    except KeyboardInterrupt:  # before a verb's own handling began
        err.print("[red]error:[/red] interrupted", highlight=False)
        sys.exit(EXIT_INTERRUPTED)
