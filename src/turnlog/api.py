"""The library's entry point: one object, built from :class:`Settings`, for the whole story.

An agent developer should not have to wire a keyring into an issuer and a verifier, open a store
and pick the worker's interactions by hand: :class:`Turnlog` does that once, from the settings and
the keys directory, and hands out the five things a program does with paused turns::

    asked = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
    async with Turnlog(Settings.from_env()) as tl:
        paused = await tl.pause(checkpoint, request=asked)              # the agent side
        sent = await tl.answer(paused.token, response, **paused.axes)   # the person's side
        outcome = await tl.outcome(sent.answer_id, timeout=30)          # resumed, or why not
        async with tl.continue_turn(paused.token) as c:                 # the continuing side,
            ...  # c.turn, once: a second continue_turn anywhere raises AlreadyContinued
        async with tl.resumed() as turns:                               # ... or a service loop
            async for turn in turns: ...
    # and somewhere, in one or more processes: await Turnlog(settings).run_worker()

Every part is lazy: a process that only answers never starts a pause producer, and pausing,
answering, outcomes and resumed turns open no local store (they are records on Kafka), so any
number of processes with one ``TURNLOG_STATE_DIR`` do them side by side. ``checkpoints`` is the
checkpoint service (seed 001) on a real driver -- the pause producer and a local store projected
from the pauses topic, opened by its first read.

It is one module, a little over the usual length, because it is the one object a program holds:
each verb is a few lines over the room that does it, and what a worker task's failure does to
the object's next call has to live with the object.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, overload

from turnlog.clock import utc_now
from turnlog.consumers.continuation import (
    Continuation,
    ContinuationRefused,
    ContinueCall,
    claim_request,
    decide,
    default_claimant,
)
from turnlog.consumers.outcomes import AnswerOutcome, read_outcome
from turnlog.consumers.resumed import ResumedTurns, read_thread_turn
from turnlog.consumers.worker import ResumeWorker
from turnlog.contracts.axes import Axes
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import PauseExpired, PauseRecorded, TokenConsumed, TurnResumed
from turnlog.contracts.group import CallToPause
from turnlog.contracts.interactions import InteractionRegistry, default_interactions
from turnlog.contracts.refusals import Refused
from turnlog.contracts.resume import check_response
from turnlog.errors import TurnlogError
from turnlog.kafka.outage import as_service
from turnlog.kafka.registry import prepare_wire
from turnlog.kafka.topics import TopicSet, warn_if_lone_replicas
from turnlog.producers.answers import AnswerPublisher, PublishedAnswer
from turnlog.producers.pauses import PauseRecorder
from turnlog.projections.driver import KafkaCheckpointDriver
from turnlog.projections.service import CheckpointService, LazyStoreDriver, TopicsOnly
from turnlog.projections.store import Store
from turnlog.settings import Settings
from turnlog.tokens import Keyring, PauseClaims, TokenIssuer, TokenVerifier
from turnlog.tokens.peek import parse_token

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Paused:
    """A durable pause: its ``token`` (hand it to whoever answers) and the ``axes`` an answer
    must state, with where it was written."""

    #: The signed pause token: whoever holds it may answer this pause, once.
    token: str
    #: The record written to the pauses topic (the checkpoint, the request, the token's window).
    pause: PauseRecorded
    #: Where the pause was written: its partition (its thread's) and offset on the pauses topic.
    partition: int
    offset: int
    #: The W3C traceparent on the pause record; pass it to :meth:`Turnlog.answer` so the answer
    #: and the resumed turn join the pause's trace.
    traceparent: str | None = None

    @property
    def token_id(self) -> str:
        """The token's id (its ``jti``), as ``turnlog pending`` lists it."""
        return self.pause.token_id

    @property
    def thread_id(self) -> str:
        """The paused turn's thread."""
        return self.pause.checkpoint.thread_id

    @property
    def axes(self) -> Axes:
        """The four axes an answer to this pause states: ``tl.answer(token, r, **paused.axes)``."""
        return Axes.of_pause(self.pause.checkpoint)


class TurnlogClosed(TurnlogError, RuntimeError):
    """A call on a :class:`Turnlog` after :meth:`Turnlog.close`, which names the call.

    Refused rather than served: a closed object that reopened a producer or a reader for a late
    call would hold a client nothing closes any more (before, ``pause`` did so silently).
    """

    def __init__(self, call: str) -> None:
        super().__init__(
            f"{call}: this Turnlog is closed; build a new one (a client opened now would "
            "never be closed)"
        )
        self.call = call


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class Turnlog:
    """One deployment of turnlog, as a program uses it. Build one per process, from settings.

    Keys come from ``settings.keys_dir`` (``turnlog keys new`` writes them there): a private key
    signs pause tokens, every key verifies them. ``interactions`` is what pauses may name and
    answers are checked against -- ``ask_user`` and ``approve_tool_call`` by default; register
    your own before the first pause or worker::

        tl = Turnlog(settings)
        tl.interactions.register("pick_date", {"type": "record", "name": "PickDate",
                                              "fields": [{"name": "date", "type": "string"}]})

    Use it as ``async with Turnlog(settings) as tl:`` (or call :meth:`close`): closing stops
    the workers it runs, the iterators it handed out (a loop over one ends), the continuations
    waiting in :meth:`resumed_turn` (:class:`TurnlogClosed`) and every client it opened; every
    call after it is refused with :class:`TurnlogClosed`.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        keyring: Keyring | None = None,
        interactions: InteractionRegistry | None = None,
        read_timeout: float = 30.0,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self.keyring = (
            keyring if keyring is not None else Keyring.from_directory(self.settings.keys_dir)
        )
        self.interactions = interactions if interactions is not None else default_interactions()
        self.topics = TopicSet.from_settings(self.settings)
        s = self.settings
        self.verifier = TokenVerifier(
            self.keyring,
            issuer=s.issuer,
            audience=s.audience,
            leeway=timedelta(seconds=s.token_leeway_seconds),
        )
        self._read_timeout = read_timeout
        self._driver: LazyStoreDriver | None = None
        self._checkpoints: CheckpointService | None = None
        self._recorder: PauseRecorder | None = None
        self._publisher: AnswerPublisher | None = None
        self._answered: dict[str, str] = {}
        self._workers: dict[ResumeWorker, asyncio.Task[None]] = {}
        self._worker_failure: BaseException | None = None
        self._iterators: list[ResumedTurns] = []
        #: The reads of :meth:`resumed_turn` under way: ``close`` ends them.
        self._continuations: set[asyncio.Future[TurnResumed | PauseExpired]] = set()
        self._closed = False

    @classmethod
    def from_env(cls, **overrides: Any) -> Turnlog:
        """``Turnlog(Settings.from_env(**overrides))``: ``TURNLOG_*`` variables, overrides win."""
        return cls(Settings.from_env(**overrides))

    async def __aenter__(self) -> Turnlog:
        self._check_open("async with")
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self._worker_failure = None  # the block's own error wins; the worker's was logged
        await self.close()

    # -- the agent side ---------------------------------------------------------------------------

    @property
    def checkpoints(self) -> CheckpointService:
        """The checkpoint service (seed 001) on Kafka and a local store::

            await tl.checkpoints.ensure_ready()          # lazy, locked, retried after a failure
            cp = await tl.checkpoints.latest("thread-7")  # newest checkpoint, or None
            every = await tl.checkpoints.list_checkpoints("thread-7")  # oldest first
            ref = tl.checkpoints.record_write(cp)         # a safe_boundary write is remembered
            tl.checkpoints.latest_safe_boundary("thread-7")

        :meth:`pause` records each write it makes here, so the safe boundaries of this process's
        pauses are known without a call.
        Readiness starts the producer only; the first read opens ``state_dir/checkpoints``, or
        the first free ``checkpoints-N`` beside it while other processes read through that one.
        """
        self._check_open("checkpoints")
        if self._checkpoints is None:
            issuer = TokenIssuer(
                self.keyring, issuer=self.settings.issuer, audience=self.settings.audience
            )
            recorder = PauseRecorder(
                self.settings, issuer, topics=self.topics, interactions=self.interactions
            )
            self._recorder = recorder
            reads = partial(
                KafkaCheckpointDriver,
                self.settings,
                TopicsOnly(self.topics),
                read_timeout=self._read_timeout,
            )
            self._driver = LazyStoreDriver(recorder, reads, self.settings.state_dir / "checkpoints")
            self._checkpoints = CheckpointService(self._driver)
        return self._checkpoints

    async def pause(
        self,
        checkpoint: TurnCheckpoint,
        *,
        request: Any = None,
        interaction: str | None = None,
        ttl: timedelta | float | None = None,
        traceparent: str | None = None,
        finalized: bool = True,
    ) -> Paused:
        """Record the paused turn and return its token (``.token``) and axes (``.axes``).

        ``request`` is what was asked (JSON text, or a value that becomes JSON); the token binds
        its hash. Left out, it is the arguments the model gave the paused call.
        ``interaction`` defaults to ``checkpoint.name``; ``ttl`` (seconds or a timedelta) to
        ``settings.token_ttl_seconds``; ``traceparent`` (W3C) to the current
        OpenTelemetry span's, else a new trace (``.traceparent``). Everything is checked before
        Kafka: :class:`~turnlog.errors.PauseInvalid` names the field that is wrong::

            paused = await tl.pause(checkpoint, request={"questions": [...]})
            send_to_the_person(paused.token, paused.axes)
        No local store is opened: processes sharing one state directory all pause.

        ``finalized=False`` writes the pause in the crash window, before the turn's state is
        complete: no token yet (``.token`` is empty) until ``tl.checkpoints.finalize(paused)``
        writes it again and returns it. A pause whose writer died before that is expired by its
        owner, reason ``unfinalized``, once older than ``settings.finalize_timeout_seconds``.
        """
        self._check_open("pause")
        service, driver, recorder = await self._pausing()
        window = timedelta(seconds=ttl) if isinstance(ttl, int | float) else ttl
        recorded = await recorder.record(
            checkpoint,
            request_json=None if request is None else _json_text(request),
            interaction=interaction,
            ttl=window,
            traceparent=traceparent,
            finalized=finalized,
        )
        driver.wrote(recorded.thread_id, recorded.partition, recorded.offset)
        service.record_write(checkpoint, finalized=finalized)
        return Paused(
            recorded.token,
            recorded.pause,
            recorded.partition,
            recorded.offset,
            recorded.traceparent,
        )

    async def _pausing(self) -> tuple[CheckpointService, LazyStoreDriver, PauseRecorder]:
        """What a pause is written with, made ready (the checkpoint service builds both)."""
        self._raise_worker_failure()
        service = self.checkpoints
        await service.ensure_ready()
        driver, recorder = self._driver, self._recorder
        if driver is None or recorder is None:  # built with the service above
            raise RuntimeError("no checkpoint driver")
        return service, driver, recorder

    async def pause_calls(
        self,
        checkpoint: TurnCheckpoint,
        calls: Sequence[CallToPause],
        *,
        ttl: timedelta | float | None = None,
        traceparent: str | None = None,
    ) -> tuple[Paused, ...]:
        """Pause once for several calls of the checkpoint's asking round that each wait on a
        person (two approvals, an approval and a question): one record, one token per call,
        returned in the order the model made the calls. Each call is answered on its own, with
        its own token and axes; the turn resumes once, when the last is answered, with every
        call's observation in order (a window closing expires the calls still open)::

            first, second = await tl.pause_calls(checkpoint, [
                CallToPause("call-1", APPROVE_TOOL_CALL, approval_request("deploy", args)),
                CallToPause("call-2", ASK_USER),
            ])
            await tl.answer(first.token, approve("deploy", args), **first.axes)
        """
        self._check_open("pause_calls")
        service, driver, recorder = await self._pausing()
        window = timedelta(seconds=ttl) if isinstance(ttl, int | float) else ttl
        recorded = await recorder.record_calls(
            checkpoint, calls, ttl=window, traceparent=traceparent
        )
        first = recorded[0]
        driver.wrote(first.thread_id, first.partition, first.offset)
        service.record_write(first.pause.checkpoint)
        return tuple(
            Paused(one.token, one.pause, one.partition, one.offset, one.traceparent)
            for one in recorded
        )

    # -- the person's side ------------------------------------------------------------------------

    async def answer(
        self,
        token: str,
        response: Any,
        *,
        scope_hash: str,
        session_id: str,
        run_id: str,
        call_id: str,
        answer_id: str | None = None,
        traceparent: str | None = None,
        answered_by: str | None = None,
        answered_by_issuer: str | None = None,
    ) -> PublishedAnswer:
        """Check the answer, then publish it; :class:`~turnlog.contracts.refusals.Refused`
        (``.refusal.reason``) and nothing written when the token, an axis or the response
        against its interaction's schema is wrong::

            sent = await tl.answer(token, {"answers": [{"selections": ["eu"], "other": None}]},
                                   **paused.axes)

        The four axes are never defaulted from the token: the answering side states them.
        Reusing ``answer_id`` on a retry makes the retry the same fact (consumed at most once).
        ``traceparent`` is the pause's (``paused.traceparent``): the answer joins its trace.
        ``answered_by`` is who answers, as the caller verified them (``answered_by_issuer``: who
        vouched for it, e.g. a sign-in's issuer): kept on the answer record, shown in the
        pause's trail (``turnlog trail``), never trusted by the worker.
        """
        self._check_open("answer")
        self._raise_worker_failure()
        if self._publisher is None:
            self._publisher = AnswerPublisher(self.settings, self.verifier, topics=self.topics)
        candidate = self._publisher.build(
            token,
            _json_text(response),
            scope_hash=scope_hash,
            session_id=session_id,
            run_id=run_id,
            call_id=call_id,
            answer_id=answer_id,
            answered_by=answered_by,
            answered_by_issuer=answered_by_issuer,
        )
        self._publisher.precheck(candidate)  # axes, size, token, axes against the token
        # Step 4 before Kafka: the response against the schema of the interaction the (verified)
        # token names -- the registry the workers answer against.
        claims = self.verifier.verify(token, utc_now())
        check_response(claims, self.interactions, candidate.response_json)
        sent = await self._publisher.publish_unchecked(candidate, traceparent=traceparent)
        self._answered[sent.answer_id] = sent.answer.thread_id
        return sent

    async def outcome(
        self, answer_id: str, *, thread_id: str | None = None, timeout: float = 30.0
    ) -> AnswerOutcome:
        """Wait until the worker has decided ``answer_id``: resumed, rejected with its reason, or
        -- an answer to one call of a pause of several -- held (``.held``, with the calls still
        waiting in ``.waiting``) until the last call is answered; asked again after that, the
        group's resumed turn. ``.accepted`` is true for resumed and held: the answer was taken.

        Reads the resumed, rejections and consumptions topics (``read_committed``) from their
        start -- only the thread's partition when the thread is known (an answer this object
        published, or ``thread_id``). Raises :class:`TimeoutError` after ``timeout`` seconds
        (no worker running, or the answer not yet handled)::

            result = await tl.outcome(sent.answer_id, timeout=30)
            if not result.accepted:
                print(result.reason, result.detail)
        """
        self._check_open("outcome")
        self._raise_worker_failure()
        thread = thread_id or self._answered.get(answer_id)
        return await read_outcome(
            self.settings, self.topics, answer_id, thread_id=thread, timeout=timeout
        )

    # -- the continuing side ----------------------------------------------------------------------

    def resumed(
        self,
        *,
        group_id: str | None = None,
        include_expired: bool = False,
        from_beginning: bool = True,
    ) -> ResumedTurns:
        """The resumed turns, as an async iterator in its own consumer group (default
        ``<application_id>.agents``); a turn's offset is committed once the loop body is done::

            async with tl.resumed() as turns:
                async for turn in turns:           # TurnResumed: turn.history holds the answer
                    await continue_agent(turn)

        ``include_expired`` also yields ``PauseExpired`` (a pause that closed unanswered).

        This is the loop of an agent service, over every thread's turns: a turn it passes over is
        committed with the rest. To continue one thread, use :meth:`resumed_turn`.
        """
        self._check_open("resumed")
        self._raise_worker_failure()
        turns = ResumedTurns(
            self.settings,
            group_id=group_id or f"{self.settings.application_id}.agents",
            topics=self.topics,
            include_expired=include_expired,
            from_beginning=from_beginning,
        )
        self._iterators.append(turns)
        return turns

    @overload
    async def resumed_turn(
        self,
        thread_id: str,
        *,
        token_id: str | None = ...,
        checkpoint_id: str | None = ...,
        since: datetime | None = ...,
        include_expired: Literal[False] = ...,
        timeout: float = ...,
        claimant: str | None = ...,
        retake: bool = ...,
    ) -> TurnResumed: ...

    @overload
    async def resumed_turn(
        self,
        thread_id: str,
        *,
        token_id: str | None = ...,
        checkpoint_id: str | None = ...,
        since: datetime | None = ...,
        include_expired: bool,
        timeout: float = ...,
        claimant: str | None = ...,
        retake: bool = ...,
    ) -> TurnResumed | PauseExpired: ...

    async def resumed_turn(
        self,
        thread_id: str,
        *,
        token_id: str | None = None,
        checkpoint_id: str | None = None,
        since: datetime | None = None,
        include_expired: bool = False,
        timeout: float = 30.0,
        claimant: str | None = None,
        retake: bool = False,
    ) -> TurnResumed | PauseExpired:
        """The resumed turn of one thread, claimed for this process: the turn to continue::

            turn = await tl.resumed_turn(paused.thread_id, token_id=paused.token_id,
                                         since=paused.pause.occurred_at, timeout=30)

        Which turn, and how it is read, as :meth:`peek_resumed_turn` (the read-only look);
        then the turn is claimed (:meth:`continue_turn`): a second call, in this process or
        any other, raises :class:`~turnlog.AlreadyContinued` naming who continues it, so the
        turn is continued once. The claim stays taken (``turnlog show`` says by whom); to
        say done when the step ran, or to hand the tool its idempotency key, use
        :meth:`continue_turn`. ``retake=True`` takes a claim whose holder never said done (its
        side effect may have run). A ``PauseExpired`` (``include_expired``) is returned as
        read: there is nothing to continue.
        """
        self._check_open("resumed_turn")
        turn = await self.peek_resumed_turn(
            thread_id, token_id=token_id, checkpoint_id=checkpoint_id, since=since,
            include_expired=include_expired, timeout=timeout,
        )  # fmt: skip
        if isinstance(turn, TurnResumed):
            await self._claim(
                turn.thread_id, turn.token_id, "", "retake" if retake else "claim",
                claimant, timeout,
            )  # fmt: skip
        return turn

    def continue_turn(
        self,
        token: str | TurnResumed,
        *,
        timeout: float = 30.0,
        retake: bool = False,
        claimant: str | None = None,
    ) -> ContinueCall:
        """Wait for the resumed turn of the pause ``token`` was issued for (for a pause of
        several calls, any call's token: the group's turn), then claim it -- continued once,
        whoever else tries::

            async with tl.continue_turn(paused.token) as c:
                deploy(**approved_call(c.turn).arguments, idempotency_key=c.idempotency_key)
            # leaving the block said done; or: c = await tl.continue_turn(token); ...; c.done()

        The claim is decided by the worker that owns the thread's partition, in a transaction
        against the token ledger, like an answer: the first claim wins; any other -- the same
        step run twice, two replicas, a retried job -- raises :class:`~turnlog.AlreadyContinued`
        naming who holds it and when, and must run nothing. A claim whose holder died before
        :meth:`Continuation.done` stays taken (``turnlog show``); ``retake=True`` takes it
        again, with a WARNING that its side effect may have run; a finished claim is never
        taken again. The token is checked here and by the worker (signature, issuer,
        audience; not its window: a turn may be continued after its pause closed);
        :class:`~turnlog.ContinuationRefused` names any other refusal, ``claimant`` (default
        ``host:pid``) is how others see this process. ``timeout`` bounds the wait for the turn
        (:class:`~turnlog.ResumedTurnTimeout`) and then for the decision
        (:class:`~turnlog.ClaimTimeout`).

        ``token`` may be a :class:`TurnResumed` instead -- a turn a :meth:`resumed` loop
        delivered, which a crash can deliver again: it is claimed as it is, without its token.
        """
        self._check_open("continue_turn")
        return ContinueCall(partial(self._continue, token, timeout, retake, claimant))

    async def _continue(
        self, token: str | TurnResumed, timeout: float, retake: bool, claimant: str | None
    ) -> Continuation:
        self._check_open("continue_turn")
        self._raise_worker_failure()
        if isinstance(token, TurnResumed):
            turn, thread_id, token_id, text = token, token.thread_id, token.token_id, ""
        else:
            claims = self._claims_of(token)
            thread_id, token_id, text = claims.thread_id, claims.token_id, token
            turn = await self.peek_resumed_turn(
                thread_id, token_id=token_id, since=claims.issued_at, timeout=timeout
            )
        if retake:
            log.warning(
                "taking the resumed turn of thread %s again: whoever held it never said done, "
                "and its side effect may have run",
                thread_id,
            )
        row = await self._claim(
            thread_id, token_id, text, "retake" if retake else "claim", claimant, timeout
        )
        return Continuation(turn, row, retaken=retake, finish=self._finish_claim)

    def _claims_of(self, token: str) -> PauseClaims:
        """The token's claims, its signature checked but not its window (a turn may be
        continued after its pause closed): a forged or foreign token goes no further."""
        try:
            parsed = parse_token(token)
            stamps = [parsed.payload.get("iat"), parsed.payload.get("nbf")]
            moments = [v for v in stamps if isinstance(v, int | float)]
            at = datetime.fromtimestamp(max(moments), UTC) if moments else utc_now()
            return self.verifier.verify_parsed(parsed, at)
        except Refused as refused:
            raise ContinuationRefused(refused.refusal) from None

    async def _claim(
        self,
        thread_id: str,
        token_id: str,
        token: str,
        action: str,
        claimant: str | None,
        timeout: float,
        claim_id: str | None = None,
    ) -> TokenConsumed:
        if self._publisher is None:
            self._publisher = AnswerPublisher(self.settings, self.verifier, topics=self.topics)
        request = claim_request(
            thread_id, token_id, action=action, claimant=claimant or default_claimant(),
            token=token, claim_id=claim_id,
        )  # fmt: skip
        return await decide(self.settings, self.topics, self._publisher, request, timeout=timeout)

    async def _finish_claim(self, continuation: Continuation) -> None:
        self._check_open("Continuation.done")
        await self._claim(
            continuation.turn.thread_id, continuation.token_id, "", "finish",
            continuation.claimant, self._read_timeout, claim_id=continuation.claim_id,
        )  # fmt: skip

    @overload
    async def peek_resumed_turn(
        self,
        thread_id: str,
        *,
        token_id: str | None = ...,
        checkpoint_id: str | None = ...,
        since: datetime | None = ...,
        include_expired: Literal[False] = ...,
        timeout: float = ...,
    ) -> TurnResumed: ...

    @overload
    async def peek_resumed_turn(
        self,
        thread_id: str,
        *,
        token_id: str | None = ...,
        checkpoint_id: str | None = ...,
        since: datetime | None = ...,
        include_expired: bool,
        timeout: float = ...,
    ) -> TurnResumed | PauseExpired: ...

    async def peek_resumed_turn(
        self,
        thread_id: str,
        *,
        token_id: str | None = None,
        checkpoint_id: str | None = None,
        since: datetime | None = None,
        include_expired: bool = False,
        timeout: float = 30.0,
    ) -> TurnResumed | PauseExpired:
        """The resumed turn of one thread, read and not claimed -- to look at it (a dashboard,
        a test, a log), never to continue it: :meth:`resumed_turn` and :meth:`continue_turn`
        claim it first, so that it is continued once::

            turn = await tl.peek_resumed_turn(paused.thread_id, token_id=paused.token_id,
                                              since=paused.pause.occurred_at, timeout=30)

        A continuation of one thread (a request handler, a one-shot script) reads the thread's
        partition of the resumed topic, ``read_committed``, with no consumer group: it commits
        and skips nothing, so another thread's turn beside it is still delivered to
        :meth:`resumed`'s loop, and any number of calls for different threads wait side by side.

        Which turn: ``token_id``'s (the one turn of that pause), else the thread's newest on the
        log -- of ``checkpoint_id``, if given -- else the first to arrive. It is a read, not a
        take: called again, it returns the same turn, and a group loop gets it too. A thread
        that pauses again
        passes the new pause's ``token_id``, or the previous turn is the newest. ``since`` (an
        aware datetime, e.g. ``paused.pause.occurred_at``) starts the read at the records
        written from then on instead of the partition's beginning: a week's retention is read
        otherwise. ``include_expired`` returns the thread's ``PauseExpired`` too.

        :class:`~turnlog.ResumedTurnTimeout` (a :class:`TimeoutError`) when no such turn came
        within ``timeout`` seconds; :class:`TurnlogClosed` when this object closes meanwhile.
        """
        self._check_open("peek_resumed_turn")
        self._raise_worker_failure()
        read = asyncio.ensure_future(
            read_thread_turn(
                self.settings,
                self.topics,
                thread_id,
                token_id=token_id,
                checkpoint_id=checkpoint_id,
                since=since,
                include_expired=include_expired,
                timeout=timeout,
            )
        )
        self._continuations.add(read)
        try:
            return await read
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and read.cancelled() and not (task and task.cancelling()):
                raise TurnlogClosed("peek_resumed_turn") from None  # close() ended the read
            raise
        finally:
            self._continuations.discard(read)

    async def run_worker(self, *, until: asyncio.Event | None = None, standby: int = 0) -> None:
        """Run a resume worker (state under ``state_dir/worker``) until ``until`` is set, this
        object closes, or the task is cancelled -- each a graceful stop: the batch finishes,
        commits, and the worker leaves its group::

            worker = asyncio.create_task(tl.run_worker())

        Several workers, in this process or others, share the answers' partitions; each holds
        its store read-write, so needs a state directory of its own (else a ``StoreError``
        naming the owner). A worker stopped by an error (its store held, the broker away past
        its budget) logs one ERROR line and raises it; run as a task of its own, which nothing
        awaits, its error is raised once more by this object's next call -- ``pause``,
        ``answer``, ``outcome``, ``resumed``, ``run_worker`` -- or else by :meth:`close`, so
        that it never dies unseen while answers wait for it.

        ``standby`` (0-8): keep warm, read-only copies of the partitions other workers own --
        that many copies of each, on workers started with a ``standby`` -- so that a dead
        owner's partitions are taken over from a copy rather than restored from the log
        (``turnlog worker --standby``).
        """
        self._check_open("run_worker")
        if isinstance(standby, bool) or not isinstance(standby, int) or not 0 <= standby <= 8:
            raise ValueError(f"standby must be a whole number 0-8, not {standby!r}")
        self._raise_worker_failure()
        path = self.settings.state_dir / "worker"
        if any(not task.done() for task in self._workers.values()):
            raise RuntimeError(f"a worker of this Turnlog already uses {path}")
        detached = _is_own_task()
        try:
            # The store first: a store another worker holds is refused at once, not after a
            # wait on the broker. Then first contact -- a service's: a broker down when the
            # worker starts is waited out for broker_timeout_seconds, as an outage would be,
            # before any client exists -- and one WARNING line when a restart can lose a resume.
            store = Store.open(path)
            try:
                with as_service("resume worker"):
                    await warn_if_lone_replicas(self.settings, self.topics)
                    # The registry wire's schemas, before any client exists: a refusal is one
                    # line.
                    await prepare_wire(self.settings, self.topics)
            except BaseException:
                store.close()
                raise
        except Exception as exc:
            self._worker_failed(exc, detached)
            raise
        worker = ResumeWorker(
            self.settings,
            store=store,
            verifier=self.verifier,
            interactions=self.interactions,
            topics=self.topics,
            clock=utc_now,
            standbys=standby,
        )
        task = asyncio.ensure_future(worker.run())
        self._workers[worker] = task
        watch = asyncio.ensure_future(until.wait()) if until is not None else None
        if watch is not None:
            watch.add_done_callback(lambda _: worker.request_stop())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            worker.request_stop()
            await task
            raise
        except Exception as exc:
            self._worker_failed(exc, detached)
            raise
        finally:
            if watch is not None:
                watch.cancel()
            self._workers.pop(worker, None)
            store.close()

    def _worker_failed(self, exc: BaseException, detached: bool) -> None:
        log.error("the resume worker of this Turnlog stopped: %s: %s", type(exc).__name__, exc)
        if detached:
            self._worker_failure = exc

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise TurnlogClosed(call)

    def _raise_worker_failure(self) -> None:
        failure, self._worker_failure = self._worker_failure, None
        if failure is not None:
            raise failure

    async def close(self) -> None:
        """Stop the workers, the resumed iterators, the continuations waiting and every client;
        then raise a worker task's error that nothing raised yet (:meth:`run_worker`).
        Idempotent; any other call afterwards is refused (:class:`TurnlogClosed`)."""
        self._closed = True
        for read in list(self._continuations):
            read.cancel()
        if self._continuations:
            await asyncio.wait(self._continuations)
        for worker, task in list(self._workers.items()):
            worker.request_stop()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        for turns in self._iterators:
            await turns.stop()
        self._iterators.clear()
        if self._publisher is not None:
            await self._publisher.stop()
        if self._checkpoints is not None:
            await self._checkpoints.close()
            self._checkpoints, self._driver, self._recorder = None, None, None
        self._raise_worker_failure()


def _is_own_task() -> bool:
    """Whether the running task was made for this ``run_worker`` call (``create_task``): then
    no caller awaits it inline, and its error needs another way out."""
    task = asyncio.current_task()
    coro = task.get_coro() if task is not None else None
    return getattr(coro, "cr_code", None) is Turnlog.run_worker.__code__


__all__ = ["AnswerOutcome", "Continuation", "Paused", "Turnlog", "TurnlogClosed"]
