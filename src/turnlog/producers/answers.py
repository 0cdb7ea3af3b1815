"""Publishing a person's answer.

The publisher checks what it can without the store -- every axis stated, the token's signature,
issuer, audience and window, the axes against the token -- and raises the refusal at once, so a
caller learns of a bad answer before it reaches the topic. The authoritative check stays with the
resume worker, which repeats all of it against the recorded pause.

An answer id may be chosen by the caller: a retry with the same id is the same record under
compaction and is consumed at most once, which is what makes "publish until acknowledged" safe.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaProducer

from turnlog import __version__
from turnlog.clock import utc_now
from turnlog.codec import encode
from turnlog.contracts.events import AnswerSubmitted
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.contracts.resume import mismatched_axis, missing_axis
from turnlog.errors import ConfigurationError
from turnlog.partitioning import answer_key, partition_for
from turnlog.settings import Settings
from turnlog.tokens import TokenVerifier, peek_claims
from turnlog.topics import TopicSet


@dataclass(frozen=True, slots=True)
class PublishedAnswer:
    answer: AnswerSubmitted
    partition: int
    offset: int

    @property
    def answer_id(self) -> str:
        return self.answer.answer_id


class AnswerPublisher:
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

    async def start(self) -> None:
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.bootstrap_servers,
            enable_idempotence=True,
            acks="all",
            client_id="turnlog-answer-publisher",
        )
        try:
            await producer.start()
            self._partitions = len(await producer.partitions_for(self.topics.answers))
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def __aenter__(self) -> AnswerPublisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

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
    ) -> AnswerSubmitted:
        """The answer event, unchecked. ``response`` may be JSON text or a JSON-able value."""
        response_json = response if isinstance(response, str) else json.dumps(response)
        try:
            thread = peek_claims(token).get("thread_id")
        except Refused:
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
        )

    def precheck(self, answer: AnswerSubmitted) -> None:
        """Raise :class:`Refused` for what is wrong without the store."""
        missing = missing_axis(answer)
        if missing is not None:
            raise Refused(missing)
        if self._verifier is None:
            raise ConfigurationError("checking an answer needs a token verifier (public keys)")
        claims = self._verifier.verify(answer.token, self._clock())
        mismatch = mismatched_axis(answer, claims)
        if mismatch is not None:
            raise Refused(mismatch)
        try:
            json.loads(answer.response_json)
        except ValueError as exc:
            raise Refused(Refusal(RefusalReason.RESPONSE_INVALID, f"not JSON: {exc}")) from None

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
    ) -> PublishedAnswer:
        """Check, then publish; a refusal raises :class:`Refused` and nothing is written."""
        answer = self.build(
            token,
            response,
            scope_hash=scope_hash,
            session_id=session_id,
            run_id=run_id,
            call_id=call_id,
            answer_id=answer_id,
        )
        self.precheck(answer)
        return await self.publish_unchecked(answer)

    async def publish_unchecked(self, answer: AnswerSubmitted) -> PublishedAnswer:
        """Publish without the pre-check (tools and tests; the worker still decides)."""
        await self.start()
        producer, partitions = self._producer, self._partitions
        if producer is None or partitions is None:
            raise ConfigurationError("the answer publisher is stopped")
        # An unreadable token still has to go somewhere for the worker to refuse it by name.
        thread = answer.thread_id or "-"
        partition = partition_for(thread, partitions)
        metadata = await producer.send_and_wait(
            self.topics.answers,
            encode(answer),
            key=answer_key(thread, answer.answer_id),
            partition=partition,
        )
        return PublishedAnswer(answer, partition, metadata.offset)
