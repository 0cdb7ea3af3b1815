"""What ``turnlog notify`` is told: the webhooks, the signing secret, the reminder's lead, the
inbox's address -- from ``TURNLOG_NOTIFY_*`` variables, overridden by the verb's options.

Every value is checked when the config is built, and a bad one is a :class:`SettingError`
naming where it came from, never a failure at the first delivery hours later.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final
from urllib.parse import urlsplit

from turnlog.errors import SettingError
from turnlog.notify.backoff import Backoff

ENV: Final = {
    "urls": "TURNLOG_NOTIFY_URLS",
    "slack_urls": "TURNLOG_NOTIFY_SLACK_URLS",
    "secret": "TURNLOG_NOTIFY_SECRET",
    "remind_before": "TURNLOG_NOTIFY_REMIND_BEFORE",
    "inbox_url": "TURNLOG_INBOX_URL",
    "notifier_id": "TURNLOG_NOTIFY_ID",
    "timeout": "TURNLOG_NOTIFY_TIMEOUT",
    "retry_for": "TURNLOG_NOTIFY_RETRY_FOR",
    "retry_base": "TURNLOG_NOTIFY_RETRY_BASE",
    "retry_cap": "TURNLOG_NOTIFY_RETRY_CAP",
}
#: The retry horizon's bounds: at least a minute (an outage outlasts seconds), at most 30 days.
RETRY_FOR_RANGE: Final = (timedelta(minutes=1), timedelta(days=30))
#: A shorter secret is guessable from the signatures it makes.
MIN_SECRET_BYTES: Final = 16
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")


@dataclass(frozen=True, slots=True)
class Sink:
    """One webhook: its URL, and whether it takes Slack's ``{"text": ...}`` instead of JSON."""

    url: str
    slack: bool = False

    def describe(self) -> str:
        """The URL as a log line may show it: scheme, host and port (a Slack webhook's path
        is its secret, a query string may carry a token, the user part a password)."""
        return describe_url(self.url)


def describe_url(url: str) -> str:
    """``scheme://host:port/…``: nothing of ``url``'s credentials, path, query or fragment."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…"


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    sinks: tuple[Sink, ...]
    #: The HMAC secrets: the first signs; every one adds a ``v1=`` while receivers move over.
    secrets: tuple[bytes, ...]
    #: Remind this long before a window closes; ``None``: no reminders.
    remind_before: timedelta | None = None
    #: The inbox's base URL, for each notice's link to the pause's page.
    inbox_url: str | None = None
    #: Names the consumer groups: a second notifier with another id is told everything again.
    notifier_id: str = "default"
    #: The most one POST may take, connect to last byte.
    timeout_seconds: float = 10.0
    #: The waits between attempts, and how long a notice is tried before it is dead-lettered.
    backoff: Backoff = field(default_factory=Backoff)

    def group_id(self, application_id: str, sink: Sink) -> str:
        """One consumer group per webhook, so one that is down or slow delays only itself."""
        digest = hashlib.sha256(f"{sink.slack}:{sink.url}".encode()).hexdigest()[:16]
        return f"{application_id}.notify.{self.notifier_id}.{digest}"


def parse_duration(text: str, name: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``1h30m``, ``2d``, or plain seconds."""
    value = text.strip().lower()
    try:
        return timedelta(seconds=float(value))
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise SettingError(name, text, "a duration such as 90s, 15m, 1h, 1h30m or 2d")
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


def _url(value: str, name: str) -> str:
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:  # an unbalanced [ or a port that is no number
        parts, host = urlsplit(""), None
    if parts.scheme not in ("http", "https") or not host:
        # Something that names a host may hold a secret path: shown without it; anything
        # else is no URL at all, and shown as given so the mistake can be seen.
        shown = describe_url(value) if parts.scheme and parts.netloc else value
        raise SettingError(name, shown, "a webhook is an http:// or https:// URL")
    return value


def _split(value: str | None) -> list[str]:
    return [v for v in re.split(r"[,\s]+", value or "") if v]


def _secret(value: bytes, name: str) -> bytes:
    if len(value) < MIN_SECRET_BYTES:
        raise SettingError(name, "<hidden>", f"a secret of at least {MIN_SECRET_BYTES} bytes")
    return value


def _number(environ: Mapping[str, str], key: str, default: float) -> float:
    text = environ.get(ENV[key])
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise SettingError(ENV[key], text, "a number") from None


def _given(given: str | None, environ: Mapping[str, str], key: str) -> str | None:
    return given if given is not None else environ.get(ENV[key]) or None


def _backoff(
    environ: Mapping[str, str], retry_for: str | None, base: str | None, cap: str | None
) -> Backoff:
    default = Backoff()
    horizon_text = _given(retry_for, environ, "retry_for")
    horizon = parse_duration(horizon_text, "--retry-for") if horizon_text else default.horizon
    low, high = RETRY_FOR_RANGE
    if not low <= horizon <= high:
        raise SettingError("--retry-for", horizon_text, "from 1m to 30d")
    base_text = _given(base, environ, "retry_base")
    cap_text = _given(cap, environ, "retry_cap")
    base_s = parse_duration(base_text, "--retry-base").total_seconds() if base_text else None
    cap_s = parse_duration(cap_text, "--retry-cap").total_seconds() if cap_text else None
    base_s = default.base_seconds if base_s is None else base_s
    cap_s = max(default.cap_seconds, base_s) if cap_s is None else cap_s
    if not 0 < base_s <= cap_s <= 86400:
        raise SettingError("--retry-base", base_text, "above 0, at most --retry-cap (at most 1d)")
    return Backoff(base_seconds=base_s, cap_seconds=cap_s, horizon=horizon)


def build(
    environ: Mapping[str, str],
    *,
    urls: Iterable[str] = (),
    slack_urls: Iterable[str] = (),
    secrets: Iterable[bytes] = (),
    remind_before: str | None = None,
    inbox_url: str | None = None,
    notifier_id: str | None = None,
    timeout: float | None = None,
    retry_for: str | None = None,
    retry_base: str | None = None,
    retry_cap: str | None = None,
) -> NotifyConfig:
    """The config from ``environ`` (the ``ENV`` names), each given value winning over its
    variable; ``secrets`` (from ``--secret-file``) wins over ``TURNLOG_NOTIFY_SECRET``."""
    plain = list(urls) or _split(environ.get(ENV["urls"]))
    slack = list(slack_urls) or _split(environ.get(ENV["slack_urls"]))
    sinks = tuple(
        [Sink(_url(u, "--url")) for u in plain]
        + [Sink(_url(u, "--slack-url"), True) for u in slack]
    )
    if not sinks:
        raise SettingError("--url", None, f"name a webhook (--url, --slack-url or {ENV['urls']})")
    keys = tuple(_secret(s, "--secret-file") for s in secrets)
    if not keys:
        env_secret = environ.get(ENV["secret"], "")
        if not env_secret:
            raise SettingError(ENV["secret"], None, "notices are signed: set a shared secret")
        keys = (_secret(env_secret.encode(), ENV["secret"]),)
    lead_text = remind_before if remind_before is not None else environ.get(ENV["remind_before"])
    lead = parse_duration(lead_text, "--remind-before") if lead_text else None
    if lead is not None and lead <= timedelta(0):
        lead = None
    inbox = inbox_url if inbox_url is not None else environ.get(ENV["inbox_url"])
    if inbox:
        _url(inbox, "--inbox-url")
    ident = notifier_id if notifier_id is not None else environ.get(ENV["notifier_id"], "default")
    if not _ID.fullmatch(ident):
        raise SettingError("--id", ident, "letters, digits, '.', '_' or '-', at most 100")
    seconds = timeout if timeout is not None else _number(environ, "timeout", 10.0)
    if not 0 < seconds <= 300:
        raise SettingError("--timeout", seconds, "above 0 and at most 300 seconds")
    backoff = _backoff(environ, retry_for, retry_base, retry_cap)
    return NotifyConfig(
        sinks=sinks,
        secrets=keys,
        remind_before=lead,
        inbox_url=inbox or None,
        notifier_id=ident,
        timeout_seconds=seconds,
        backoff=backoff,
    )
