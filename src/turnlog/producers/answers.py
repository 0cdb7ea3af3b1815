"""Publishing a person's answer.

The publisher checks what it can without the store -- every axis stated, the token's signature,
issuer, audience and window, the axes against the token -- and raises the refusal at once, so a
caller learns of a bad answer before it reaches the topic. The authoritative check stays with the
resume worker, which repeats all of it against the recorded pause.

An answer id may be chosen by the caller: a retry with the same id is the same record under
compaction and is consumed at most once, which is what makes "publish until acknowledged" safe --
and what lets the publisher ride out a broker outage by sending the same record again
(:func:`~turnlog.producers.pauses.ride_out`) until ``Settings.broker_timeout_seconds`` is spent.

Sizes are bounded here too: an answer whose encoded value is over ``Settings.max_answer_bytes``
is refused (``answer_too_large``) before Kafka, because its resumed turn repeats the response
beside the whole checkpoint history and must still fit one record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from turnlog._version import __version__
from turnlog.clock import utc_now
from turnlog.contracts.events import AnswerSubmitted, ContinuationRequested
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused, refuse
from turnlog.contracts.resume import mismatched_axis, missing_axis
from turnlog.errors import ConfigurationError
from turnlog.kafka import clients
from turnlog.kafka.lifecycle import Lifecycle
from turnlog.kafka.outage import (
    abandon,
    attempt_timeout,
    is_outage,
    request_timeout_ms,
    ride_out,
    stop_producer,
)
from turnlog.kafka.partitioning import answer_key, partition_for
from turnlog.kafka.registry import prepare_wire
from turnlog.kafka.topics import TopicSet
from turnlog.observability import tracing
from turnlog.settings import Settings
from turnlog.tokens import TokenVerifier, peek_claims
from turnlog.wire.codec import encode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PublishedAnswer:
    answer: AnswerSubmitted
    partition: int
    offset: int
    #: The W3C traceparent on the answer record (a child of the one it was given).
    traceparent: str | None = None

    @property
    def answer_id(self) -> str:
        return self.answer.answer_id


class AnswerPublisher(Lifecycle):
    def __init__(
        self,
        settings: Settings,
        verifier: TokenVerifier | None,
        *,
        topics: TopicSet | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.topics = topics or TopicSet.from_settings(settings)
        self._verifier = verifier
        self._clock = clock
        self._producer: AIOKafkaProducer | None = None
        self._partitions: int | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Start the producer, riding out an unreachable broker. Concurrent first calls share
        one producer: the second waits on the lock and finds it started."""
        await ride_out(
            self._open,
            settings=self.settings,
            who="publisher",
            timeout=attempt_timeout(self.settings),
        )

    async def _open(self) -> tuple[AIOKafkaProducer, int]:
        async with self._lock:
            if self._producer is not None and self._partitions is not None:
                return self._producer, self._partitions
            await prepare_wire(self.settings, self.topics)
            producer = clients.producer(
                self.settings,
                enable_idempotence=True,
                acks="all",
                client_id="turnlog-answer-publisher",
                request_timeout_ms=request_timeout_ms(self.settings),
            )
            partitions = await clients.started(producer, self.topics.answers)
            self._producer, self._partitions = producer, partitions
            return producer, partitions

    async def _discard(self, producer: AIOKafkaProducer) -> None:
        """Drop a producer a send failed or timed out on; the retry starts a new one (the
        broker may be gone, and an idempotent producer waits for it forever)."""
        async with self._lock:
            if self._producer is producer:
                self._producer, self._partitions = None, None
        await abandon(producer)

    async def stop(self) -> None:
        async with self._lock:
            producer, self._producer, self._partitions = self._producer, None, None
        if producer is not None:
            await stop_producer(producer, patience=attempt_timeout(self.settings))

    def build(
        self,
        token: str,
        response: Any,
        *,
        scope_hash: str | None,
        session_id: str | None,
        run_id: str | None,
        call_id: str | None,
        answer_id: str | None = None,
        answered_by: str | None = None,
        answered_by_issuer: str | None = None,
    ) -> AnswerSubmitted:
        """The answer event, unchecked. ``response`` may be JSON text or a JSON-able value;
        ``answered_by`` (and who vouched for it, ``answered_by_issuer``) is who sends it, as
        this publisher verified them: kept on the record for the pause's trail."""
        response_json = response if isinstance(response, str) else json.dumps(response)
        try:
            thread = peek_claims(token).get("thread_id")
        except (Refused, RecursionError):
            thread = None
        now = self._clock()
        return AnswerSubmitted(
            event_id=uuid.uuid4().hex,
            occurred_at=now,
            package_version=__version__,
            answer_id=answer_id or uuid.uuid4().hex,
            token=token,
            thread_id=thread if isinstance(thread, str) else "",
            scope_hash=scope_hash,
            session_id=session_id,
            run_id=run_id,
            call_id=call_id,
            response_json=response_json,
            submitted_at=now,
            answered_by=answered_by,
            answered_by_issuer=answered_by_issuer,
        )

    def precheck(self, answer: AnswerSubmitted) -> None:
        """Raise :class:`Refused` for what is wrong without the store."""
        missing = missing_axis(answer)
        if missing is not None:
            raise Refused(missing)
        self.check_size(answer)
        if self._verifier is None:
            raise ConfigurationError("checking an answer needs a token verifier (public keys)")
        try:
            claims = self._verifier.verify(answer.token, self._clock())
        except RecursionError:
            raise refuse(RefusalReason.TOKEN_INVALID, "the token is nested too deeply") from None
        mismatch = mismatched_axis(answer, claims)
        if mismatch is not None:
            raise Refused(mismatch)
        try:
            json.loads(answer.response_json)
        except RecursionError:
            raise refuse(
                RefusalReason.RESPONSE_INVALID, "the response is JSON nested too deeply to read"
            ) from None
        except ValueError as exc:
            raise Refused(Refusal(RefusalReason.RESPONSE_INVALID, f"not JSON: {exc}")) from None

    def check_size(self, answer: AnswerSubmitted) -> None:
        """``answer_too_large`` for an answer whose encoded value is over the limit."""
        limit = self.settings.max_answer_bytes
        try:
            size = len(encode(answer))
        except (TypeError, ValueError) as exc:
            raise refuse(RefusalReason.ANSWER_UNDECODABLE, f"cannot be encoded: {exc}") from None
        if size > limit:
            raise refuse(
                RefusalReason.ANSWER_TOO_LARGE,
                f"the answer is {size} bytes encoded, over the limit of {limit} bytes "
                "(TURNLOG_MAX_ANSWER_BYTES)",
            )

    async def publish(
        self,
        token: str,
        response: Any,
        *,
        scope_hash: str | None,
        session_id: str | None,
        run_id: str | None,
        call_id: str | None,
        answer_id: str | None = None,
        traceparent: str | tracing.TraceParent | None = None,
        answered_by: str | None = None,
        answered_by_issuer: str | None = None,
    ) -> PublishedAnswer:
        """Check, then publish; a refusal raises :class:`Refused` and nothing is written.

        ``traceparent`` is the pause's (``RecordedPause.traceparent``): the answer record's
        header is a child of it, so the answer joins the pause's trace.
        """
        answer = self.build(
            token,
            response,
            scope_hash=scope_hash,
            session_id=session_id,
            run_id=run_id,
            call_id=call_id,
            answer_id=answer_id,
            answered_by=answered_by,
            answered_by_issuer=answered_by_issuer,
        )
        self.precheck(answer)
        return await self.publish_unchecked(answer, traceparent=traceparent)

    async def publish_unchecked(
        self, answer: AnswerSubmitted, *, traceparent: str | tracing.TraceParent | None = None
    ) -> PublishedAnswer:
        """Publish without the pre-check (tools and tests; the worker still decides).

        Retried while the broker is unreachable: the same key and answer id each time, so a
        send that did reach the log before its acknowledgement was lost is the same fact.
        The record's ``traceparent`` header is a child of ``traceparent`` (a malformed one is
        ignored), else the current OpenTelemetry span's, else a new trace's.
        """
        parent = tracing.parse(traceparent)
        trace = tracing.child_of(parent) if parent is not None else tracing.start()
        # An unreadable token still has to go somewhere for the worker to refuse it by name.
        thread = answer.thread_id or "-"
        # The framing the settings name before the first encode (the registry wire's ids).
        await prepare_wire(self.settings, self.topics)
        partition, offset = await self._send(thread, answer.answer_id, encode(answer), trace)
        return PublishedAnswer(answer, partition, offset, str(trace))

    async def publish_claim(self, request: ContinuationRequested) -> tuple[int, int]:
        """Publish a continuation claim (``consumers/claiming.py``) beside the answers, keyed
        and partitioned as an answer of its thread; its partition and offset. Retried while
        the broker is unreachable, with the same key: a retry is the same request."""
        await prepare_wire(self.settings, self.topics)
        return await self._send(
            request.thread_id, request.claim_id, encode(request), tracing.start()
        )

    async def _send(
        self, thread: str, record_id: str, value: bytes, trace: tracing.TraceParent
    ) -> tuple[int, int]:
        key = answer_key(thread, record_id)

        async def attempt() -> tuple[int, int]:
            producer, partitions = await self._open()
            partition = partition_for(thread, partitions)
            try:
                metadata = await producer.send_and_wait(
                    self.topics.answers, value, key=key, partition=partition, headers=trace.header()
                )
            except asyncio.CancelledError:
                await self._discard(producer)  # timed out: the broker is gone, or too slow
                raise
            except Exception as exc:
                if is_outage(exc):
                    await self._discard(producer)
                elif producer is not self._producer:
                    # Another send's outage replaced the producer under this one: retry too.
                    raise KafkaConnectionError(f"the producer was restarted: {exc}") from exc
                raise
            return partition, int(metadata.offset)

        return await ride_out(
            attempt, settings=self.settings, who="publisher", timeout=attempt_timeout(self.settings)
        )
