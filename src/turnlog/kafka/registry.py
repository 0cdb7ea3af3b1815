"""The schema registry wire: turnlog's schemas in a Confluent-compatible schema registry.

With ``TURNLOG_WIRE=registry`` (``Settings.wire``) a process writes its records in the
registry's framing -- ``00``, the 4-byte big-endian schema id, the Avro body -- so that tools
that read typed Avro through a registry (Kafka UI, ksqlDB, Connect sinks, Flink SQL, any
client's ``AvroDeserializer``) read them without a turnlog decoder. At start,
:func:`prepare_wire` registers each record type's schema history under the topic-record subject
``<topic>-dev.turnlog.<Name>`` (oldest version first, so the registry checks each step), sets
the subject's compatibility to ``BACKWARD`` where no level is set yet, and hands the ids to the
codec (:func:`turnlog.wire.codec.use_registry`). Registering a schema the subject already holds
returns its id, so every start is the same calls.

With a ``schema_registry_url`` and the default wire, a process still reads registry-framed
records (a topic being switched over): an id it has not seen is fetched once
(``GET /schemas/ids/{id}``) and kept; an id the registry does not have is refused as
``unknown_schema_id``, as any undecodable record is.

Only the REST calls every Confluent-compatible registry serves are used: ``POST
/subjects/{subject}/versions``, ``GET /schemas/ids/{id}``, ``GET``/``PUT /config/{subject}``
and ``GET /subjects``. A registry that cannot be reached, that refuses a schema (incompatible
with what the subject holds) or a credential is one :class:`SchemaRegistryRefused` line at
start, never retried in a loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Final

from turnlog.errors import SchemaRegistryRefused
from turnlog.kafka.topics import TopicSet
from turnlog.wire import codec

__all__ = [
    "RECORDS",
    "RegistryClient",
    "prepare_wire",
    "read_through",
    "subject_name",
]

#: The record types each topic carries, by the topic's role (``TopicSet`` names).
RECORDS: Final[Mapping[str, tuple[str, ...]]] = {
    "pauses": ("PauseRecorded",),
    "answers": ("AnswerSubmitted",),
    "consumptions": ("TokenConsumed",),
    "resumed": ("TurnResumed", "PauseExpired"),
    "rejections": ("AnswerRejected",),
}
#: The compatibility a subject turnlog creates is given: each schema version reads the
#: records of the one before (TurnResumed v1 -> v2, AnswerSubmitted v1 -> v2).
COMPATIBILITY: Final = "BACKWARD"
_CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"


def subject_name(topic: str, name: str) -> str:
    """The topic-record subject of record type ``name`` on ``topic``."""
    return f"{topic}-{codec.NAMESPACE}.{name}"


class RegistryClient:
    """The few REST calls turnlog makes, over the standard library, each refusal one line."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self._headers = {"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE}
        if parts.username is not None:
            pair = f"{urllib.parse.unquote(parts.username)}:"
            pair += urllib.parse.unquote(parts.password or "")
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        #: The registry's address without its credentials: what messages name.
        self.base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers=self._headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read() or b"null")
            except ValueError:
                answer = None
            if exc.code in (401, 403):
                raise SchemaRegistryRefused(
                    "not_authorized", f"{self.base} answered {exc.code} to {method} {path}"
                ) from None
            return exc.code, answer
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryRefused("unreachable", f"{self.base}: {reason}") from None

    def check(self) -> None:
        """One call that a reachable registry answers (``GET /subjects``)."""
        status, _ = self._call("GET", "/subjects")
        if status != 200:
            raise SchemaRegistryRefused(
                "bad_response", f"{self.base} answered {status} to GET /subjects"
            )

    def compatibility(self, subject: str) -> str | None:
        """The subject's own compatibility level, or ``None`` when it has none set."""
        status, answer = self._call("GET", f"/config/{_quote(subject)}")
        if status == 200 and isinstance(answer, dict):
            level = answer.get("compatibilityLevel") or answer.get("compatibility")
            return str(level) if level else None
        return None

    def set_compatibility(self, subject: str, level: str) -> None:
        status, answer = self._call("PUT", f"/config/{_quote(subject)}", {"compatibility": level})
        if status != 200 and self.compatibility(subject) is None:
            # (Another process may have set it between the two calls: then it is set.)
            raise SchemaRegistryRefused(
                "bad_response", f"{subject}: PUT /config answered {status}: {_said(answer)}"
            )

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``, registered if the subject lacks it."""
        status, answer = self._call(
            "POST", f"/subjects/{_quote(subject)}/versions", {"schema": schema}
        )
        if status == 200 and isinstance(answer, dict) and isinstance(answer.get("id"), int):
            return int(answer["id"])
        if status == 409:
            raise SchemaRegistryRefused(
                "incompatible", f"{subject} refused the schema: {_said(answer)}"
            )
        raise SchemaRegistryRefused(
            "bad_response", f"{subject}: registering answered {status}: {_said(answer)}"
        )

    def schema_text(self, schema_id: int) -> str | None:
        """The schema registered under ``schema_id``, or ``None`` when the registry has none."""
        status, answer = self._call("GET", f"/schemas/ids/{schema_id}")
        if status == 404:
            return None
        if status == 200 and isinstance(answer, dict) and isinstance(answer.get("schema"), str):
            return str(answer["schema"])
        raise SchemaRegistryRefused(
            "bad_response", f"GET /schemas/ids/{schema_id} answered {status}: {_said(answer)}"
        )


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _said(answer: Any) -> str:
    if isinstance(answer, dict) and answer.get("message"):
        return " ".join(str(answer["message"]).split())
    return json.dumps(answer)[:200]


#: The settings each process has prepared, so that its several clients call the registry once.
_PREPARED: set[tuple[str, str, str]] = set()
#: One preparation at a time in a process (its recorder and worker start together).
_PREPARING: list[asyncio.Lock] = []


def read_through(settings: Any) -> None:
    """Let this process read registry-framed records when a registry is set, with no call to
    the registry now: each schema id is asked for when a record first carries it, then kept.
    For readers that never write (the CLI's ``tail``, ``trail``, ``audit``, ``turns``): what
    they read decodes whichever framing it has. Writing keeps to :func:`prepare_wire`."""
    url = settings.schema_registry_url
    if not url or codec.registry_set():
        return
    timeout = min(float(settings.connect_timeout_seconds), 10.0)
    codec.use_registry(RegistryClient(url, timeout=timeout).schema_text)


async def prepare_wire(settings: Any, topics: TopicSet | None = None) -> None:
    """Set the codec up for ``settings.wire`` and ``settings.schema_registry_url``: nothing for
    the default wire without a registry; registering every record type's schemas for the
    registry wire; a reachability check and id lookups for a reader with a registry.
    :class:`SchemaRegistryRefused` (one line) when the registry cannot be used."""
    url = settings.schema_registry_url
    if not url:
        return
    topics = topics if topics is not None else TopicSet.from_settings(settings)
    key = (url, settings.wire, topics.prefix)
    if key in _PREPARED:
        return
    if not _PREPARING:
        _PREPARING.append(asyncio.Lock())
    async with _PREPARING[0]:
        if key in _PREPARED:
            return
        timeout = min(float(settings.connect_timeout_seconds), 10.0)
        client = RegistryClient(url, timeout=timeout)
        await asyncio.to_thread(_prepare, client, settings.wire, topics)
        _PREPARED.add(key)


def _prepare(client: RegistryClient, wire: str, topics: TopicSet) -> None:
    if wire != "registry":
        client.check()
        codec.use_registry(client.schema_text)
        return
    write_ids: dict[str, int] = {}
    known: dict[int, str] = {}
    for role, names in RECORDS.items():
        topic = getattr(topics, role)
        for name in names:
            subject = subject_name(topic, name)
            if client.compatibility(subject) is None:
                client.set_compatibility(subject, COMPATIBILITY)
            for schema in codec.versions_of(name):
                text = json.dumps(schema, separators=(",", ":"))
                schema_id = client.register(subject, text)
                known[schema_id] = text
            write_ids[name] = schema_id
    codec.use_registry(client.schema_text, write_ids, known)


def forget_prepared() -> None:
    """Forget what :func:`prepare_wire` did (tests that switch a process's wire)."""
    _PREPARED.clear()
    codec.use_single_object()
