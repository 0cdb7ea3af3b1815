"""One answer record in, the records its transaction must write out: the worker's per-answer rules.

Everything that decides what an answer produces lives here, apart from the run loop, ownership
and the transaction (:mod:`turnlog.consumers.worker`), so the rules can be tested without a
broker. Three rules of this module are what keeps the guarantee against hostile input:

- **Route by the record.** An answer is handled only on the partition its thread maps to, with
  its key and its value naming the same thread and answer; anything else is refused as
  ``misrouted``. Handling it elsewhere would write its consumption on a partition whose owner
  never looks there -- and the rightful owner could spend the same token again.
- **Nothing unverified reaches the broker.** The unverified token id may pick a ledger row to read
  from the local store (to recognise a retry); only a token whose signature verified may make
  the worker catch up its pauses partition, and only the partition the record is on -- which
  the worker owns, because it is reading it.
- **One record never stops a worker.** Any failure while handling a record becomes an
  ``AnswerRejected`` (``answer_unprocessable`` when no rule names it) committed with the offset,
  and every output is bounded so that it fits the topic: echoed fields and details are clipped,
  and an answer whose resumed turn would not fit is refused as ``answer_too_large``. A failure of
  the catch-up read, though, is the worker's own (its broker is unwell): it propagates, and the
  worker puts the batch back and retries.

It stays one module past the usual length on purpose: those rules and the order of the steps
that apply them (parse, read, verify, check, write) are audited together, and a split would put
the batch plumbing of :meth:`AnswerHandler.start_batch` and the rules it feeds in two places.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from turnlog.consumers import screening
from turnlog.consumers.acceptance import Accepted, Output, Verified, accept
from turnlog.consumers.claiming import ClaimDecider
from turnlog.consumers.screening import (
    DETAIL_CHARS,
    ID_CHARS,
    clip,
    derived_event_id,
    event_meta,
    jti_of,
    key_thread,
)
from turnlog.consumers.signatures import SignatureChecks
from turnlog.consumers.views import (
    BatchStoreView,
    CatchUp,
    ForgottenView,
    StoreView,
    SupersedeView,
)
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approved_arguments
from turnlog.contracts.events import (
    AnswerSubmitted,
    ContinuationRequested,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.group import (
    CallAnswer,
    Observed,
    calls_of,
    is_group,
    rehydrate_calls,
    view_for_token,
)
from turnlog.contracts.interactions import InteractionRegistry
from turnlog.contracts.ledger import LedgerEntry, Outcome
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.contracts.resume import is_replay, prepare_resume
from turnlog.errors import DecodeError
from turnlog.kafka.partitioning import consumption_key
from turnlog.kafka.reader import Record
from turnlog.kafka.topics import TopicSet
from turnlog.tokens import PauseClaims, TokenVerifier
from turnlog.tokens.peek import ParsedToken, parse_token
from turnlog.wire.codec import decode, encode
from turnlog.wire.skim import SkimmedPause, StoredPause, read_stored

log = logging.getLogger(__name__)

#: Decode refusals whose words name only how a record is framed: said in its rejection.
_FRAMING_REASONS = frozenset(
    {
        "not_single_object",
        "unknown_fingerprint",
        "unknown_schema_id",
        "unexpected_type",
        "trailing_bytes",
        "truncated_body",
    }
)
_NOT_AN_ANSWER = "the record is no AnswerSubmitted this build reads"

# Re-exported: the worker and the tests import these from here.
__all__ = ["DETAIL_CHARS", "AnswerHandler", "BatchStoreView", "Handled", "Output", "clip"]
__all__ += ["StoreView", "event_meta"]


@dataclass
class Handled:
    """What one record comes to: its outputs, and which of the counted outcomes it is."""

    outputs: list[Output] = field(default_factory=list)
    resumed: bool = False
    #: an answer to one call of a pause of several, kept until the last is answered
    held: bool = False
    duplicate: bool = False
    #: a repair request that wrote the missing half of an outcome
    repaired: bool = False
    refusal: Refusal | None = None
    #: a continuation claim granted (or its holder's "done" recorded): ``consumers/claiming.py``
    continued: bool = False
    #: For the worker's log line once committed (clipped; never the token).
    thread_id: str | None = None
    answer_id: str | None = None


@dataclass
class _Parsed:
    """An answer that is routed right, with its token parsed once (not yet verified)."""

    answer: AnswerSubmitted
    parsed: ParsedToken | Refused
    token_id: str | None
    #: The verification made ahead on the thread pool, if it was (an exception it raised
    #: other than a refusal is kept and raised where the verification would have run).
    ahead: PauseClaims | Exception | None = None


@dataclass
class _Claim:
    """A continuation claim read where answers are (``consumers/claiming.py`` decides it)."""

    request: ContinuationRequested


@dataclass
class _Forget:
    """A tombstone on the answers topic: only ``forget`` writes one there (the last of its
    tombstones, after the pauses' were acknowledged), so the pauses are caught up before the
    records after it are handled, and an answer published after a ``forget`` finds its thread
    forgotten even when the store still held the thread's pause (the worker reads the pauses
    only when it must)."""


@dataclass
class _Checked:
    """An answer that is routed right and not a replay, with its one token verification."""

    answer: AnswerSubmitted
    token_id: str | None
    ledger: LedgerEntry | None
    verified: PauseClaims | Refused


@dataclass
class StartedBatch:
    """A batch begun by :meth:`AnswerHandler.start_batch`: parsed, its store reads made, its
    signatures being checked."""

    records: Sequence[Record]
    first: list[_Parsed | _Claim | _Forget | Handled]
    prefetched: _Prefetched
    due: list[tuple[_Parsed, ParsedToken]]
    checks: Awaitable[list[PauseClaims | Exception]] | None


@dataclass
class _Prefetched:
    """One batch's store reads, by (unverified) token id; dropped after a catch-up."""

    ledgers: dict[str, LedgerEntry | None] = field(default_factory=dict)
    pauses: dict[str, StoredPause | bytes | None] = field(default_factory=dict)

    def clear(self) -> None:
        self.ledgers.clear()
        self.pauses.clear()


def _as_call(pause: PauseRecorded | SkimmedPause, token_id: str) -> PauseRecorded:
    """A pause of several calls as the token's own call sees it, decoded: its resume is
    rebuilt from the decoded messages (:meth:`AnswerHandler._finish_group`)."""
    decoded = pause.decode() if isinstance(pause, SkimmedPause) else pause
    return view_for_token(decoded, token_id)


def resumed_event_id(token_id: str | None, answer: AnswerSubmitted) -> str:
    """The ``event_id`` of the turn ``answer`` resumes: the same for every copy of it."""
    return derived_event_id("resumed", token_id or "", clip(answer.answer_id, ID_CHARS))


class AnswerHandler:
    """Applies the resume contract to one answer record; see the module docstring."""

    def __init__(
        self,
        *,
        topics: TopicSet,
        partitions: int,
        verifier: TokenVerifier,
        interactions: InteractionRegistry,
        view: StoreView,
        catch_up: CatchUp,
        max_record_bytes: int,
        verify_threads: int = 1,
        marker_wait_seconds: float = 3.0,
    ) -> None:
        self.topics = topics
        #: How long a verified token's pause may stay invisible past its offset (see
        #: :meth:`_until_visible`) before the answer is refused for a missing checkpoint.
        self.marker_wait_seconds = marker_wait_seconds
        self.partitions = partitions
        self.verifier = verifier
        self.interactions = interactions
        self.view = view
        self.catch_up = catch_up
        self.max_record_bytes = max_record_bytes
        self._signatures = SignatureChecks(verifier, verify_threads)
        self._claims = ClaimDecider(
            topics=topics, partitions=partitions, verifier=verifier, view=view
        )

    async def handle(
        self, record: Record, pending: dict[str, LedgerEntry], now: datetime
    ) -> Handled:
        """The outputs of ``record``; ``pending`` holds the tokens the open transaction spends
        (a duplicate inside the transaction is seen there) and gains this answer's."""
        return (await self.handle_batch([record], pending, now))[0]

    async def handle_batch(
        self, records: Sequence[Record], pending: dict[str, LedgerEntry], now: datetime
    ) -> list[Handled]:
        """:meth:`handle` of each record in order, with the store read once for the batch: every
        record is decoded and its token parsed first, then the ledger rows and pauses of all
        their (unverified) token ids are read in one go -- local reads, like the single ones."""
        return await self.finish_batch(self.start_batch(records, pending, now), pending, now)

    def start_batch(
        self, records: Sequence[Record], pending: Mapping[str, LedgerEntry], now: datetime
    ) -> StartedBatch:
        """The first half of :meth:`handle_batch`: decode, parse, read the store, and begin the
        batch's signature checks on the threads without waiting for them. The worker starts
        every partition's batch of a round before it finishes the first, so the checks of one
        run while the event loop's thread handles another. ``pending`` must be the mapping
        :meth:`finish_batch` is given (a retry it already holds needs no signature)."""
        first: list[_Parsed | _Claim | _Forget | Handled] = []
        for record in records:
            if record.value is None:
                first.append(_Forget())  # a tombstone: the thread was forgotten
                continue
            try:
                first.append(self._parse(record, record.value, now))
            except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
                first.append(self._unprocessable(record, exc, now))
        prefetched = self._prefetch(first)
        due = self._due(first, prefetched, pending)
        checks = self._signatures.start([token for _, token in due], now)
        return StartedBatch(records, first, prefetched, due, checks)

    async def finish_batch(
        self, started: StartedBatch, pending: dict[str, LedgerEntry], now: datetime
    ) -> list[Handled]:
        """The second half of :meth:`handle_batch`: each record's outputs, in order."""
        if started.checks is not None:
            outcomes = await started.checks
            for (checked, _), outcome in zip(started.due, outcomes, strict=True):
                checked.ahead = outcome
        handled: list[Handled] = []
        prefetched = started.prefetched
        for record, parsed in zip(started.records, started.first, strict=True):
            if isinstance(parsed, Handled):
                handled.append(parsed)
            elif isinstance(parsed, _Forget):
                # The worker's broker is unwell if this fails: the batch is retried.
                await self.catch_up(record.partition)
                prefetched.clear()  # the store has moved on
                handled.append(Handled())
            elif isinstance(parsed, _Claim):
                handled.append(self._claim(record, parsed.request, pending, now))
            else:
                handled.append(await self._handle(record, parsed, pending, now, prefetched))
        return handled

    def _claim(
        self,
        record: Record,
        request: ContinuationRequested,
        pending: dict[str, LedgerEntry],
        now: datetime,
    ) -> Handled:
        try:
            decided = self._claims.decide(record, request, pending, now)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)
        return Handled(
            outputs=decided.outputs,
            continued=decided.granted,
            duplicate=decided.duplicate,
            refusal=decided.refusal,
            thread_id=decided.thread_id,
            answer_id=decided.claim_id,
        )

    def _prefetch(self, first: Sequence[_Parsed | _Claim | _Forget | Handled]) -> _Prefetched:
        found = _Prefetched()
        view = self.view
        if not isinstance(view, BatchStoreView):
            return found
        ids = list({p.token_id: None for p in first if isinstance(p, _Parsed) and p.token_id})
        try:
            found.ledgers = dict(zip(ids, view.ledgers(ids), strict=True))
            found.pauses = dict(zip(ids, view.pause_values(ids), strict=True))
        except Exception:
            log.warning("the batch read of the store failed; reading per answer", exc_info=True)
            found.clear()
        return found

    @staticmethod
    def _due(
        first: Sequence[_Parsed | _Claim | _Forget | Handled],
        prefetched: _Prefetched,
        pending: Mapping[str, LedgerEntry],
    ) -> list[tuple[_Parsed, ParsedToken]]:
        """The tokens to check side by side (:mod:`turnlog.consumers.signatures`). A retry the
        ledger already recognises is left out (it needs no signature work); each outcome is
        used exactly where :meth:`_check` would have made it."""
        due = []
        for parsed in first:
            if not isinstance(parsed, _Parsed) or not isinstance(parsed.parsed, ParsedToken):
                continue
            token_id = parsed.token_id
            ledger = None if token_id is None else pending.get(token_id)
            if ledger is None and token_id is not None:
                ledger = prefetched.ledgers.get(token_id)
            if not is_replay(parsed.answer, ledger):
                due.append((parsed, parsed.parsed))
        return due

    def close(self) -> None:
        """Stop the signature threads, if any were started."""
        self._signatures.close()

    async def _handle(
        self,
        record: Record,
        parsed: _Parsed,
        pending: dict[str, LedgerEntry],
        now: datetime,
        prefetched: _Prefetched,
    ) -> Handled:
        try:
            checked = self._check(record, parsed, pending, now, prefetched)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)
        if isinstance(checked, Handled):
            return checked
        try:
            pause, stale = self._lookup(record, checked, prefetched)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)
        if stale:
            # Reading the log is the worker's own business: if it fails, the broker is unwell,
            # not the answer -- the error propagates and the batch is retried.
            await self.catch_up(record.partition)
            prefetched.clear()  # the store has moved on
            if isinstance(checked.verified, PauseClaims):
                await self._until_visible(record.partition, checked.verified)
        try:
            if stale and isinstance(checked.verified, PauseClaims):
                pause = self.view.pause(checked.verified.token_id)
                if pause is not None and is_group(pause):
                    pause = _as_call(pause, checked.verified.token_id)
            return self._finish(record, checked, pause, pending, now)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)

    # -- repairs ------------------------------------------------------------------------------

    async def repair(
        self,
        record: Record,
        resumed_on_log: frozenset[tuple[str, str]],
        pending: dict[str, LedgerEntry],
        now: datetime,
    ) -> Handled:
        """What a repair request (:mod:`turnlog.consumers.repair`) must write: the half of this
        answer's outcome that is missing, judged from the worker's own ledger and the resumed
        partition (``resumed_on_log``), never from the request.

        - spent by this answer and resumed: nothing (already whole);
        - spent by this answer, no resumed turn: the resumed turn, with the id it should have
          had (its token was checked when it was spent: it is rebuilt as of the answer's time);
        - resumed, not spent: the consumption, so the token can never resume again;
        - neither: an answer never handled -- handled now, as any answer read now would be.
        """
        if record.value is None:
            return Handled()
        try:
            parsed = self._parse(record, record.value, now)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the worker
            return self._unprocessable(record, exc, now)
        if isinstance(parsed, Handled):
            return parsed  # not a routed answer: refused as any such record is
        if isinstance(parsed, _Claim):
            return Handled()  # a claim is decided when read, never repaired
        answer, token_id = parsed.answer, parsed.token_id
        answer_id = clip(answer.answer_id, ID_CHARS)
        ledger = None
        if token_id is not None:
            ledger = pending.get(token_id) or self.view.ledger(token_id)
        spent = is_replay(answer, ledger)
        shown = token_id is not None and (token_id, answer_id) in resumed_on_log
        if not spent and not shown:
            return await self.handle(record, pending, now)
        whole = Handled(duplicate=True, thread_id=clip(answer.thread_id, ID_CHARS))
        if spent and shown:
            return whole
        stamp = getattr(record, "timestamp", 0)
        at = (
            datetime.fromtimestamp(stamp / 1000, UTC)
            if isinstance(stamp, int) and stamp > 0
            else now
        )
        token = parsed.parsed
        verified = token if isinstance(token, Refused) else self._verify(token, at)
        if spent and ledger is not None and ledger.outcome == Outcome.HELD:
            return whole  # held for its group: nothing of it goes on resumed yet
        checked = _Checked(answer, token_id, None, verified)
        pause, _ = self._lookup(record, checked, _Prefetched())
        outcome: Refusal | Accepted
        if isinstance(pause, PauseRecorded) and is_group(pause):
            grouped = self._group_outcome(checked, pause, None, pending, at)
            if isinstance(grouped, Refusal):
                outcome = grouped
            elif grouped[0].outcome != Outcome.RESUMED:
                return whole  # the group is not complete: nothing to repair
            elif isinstance(verified, Refused):
                outcome = verified.refusal
            else:
                outcome = Accepted(verified, grouped[1])
        else:
            outcome = accept(
                answer, verifier=Verified(verified), interactions=self.interactions,
                pause=pause, ledger=None, now=at, topics=self.topics,
                consumed_meta=event_meta(now),
                resumed_meta=event_meta(now, resumed_event_id(token_id, answer)),
            )  # fmt: skip
        if isinstance(outcome, Refusal):
            log.warning(
                "repair of answer %s on partition %d not made: %s (%s)",
                answer_id, record.partition, outcome.reason.value, outcome.detail,
            )  # fmt: skip
            return whole
        claims, outputs = outcome
        wanted = self.topics.resumed if spent else self.topics.consumptions
        if not spent:
            pending[claims.token_id] = LedgerEntry(
                Outcome.RESUMED, answer.answer_id, claims.thread_id
            )
        log.warning(
            "repaired answer %s on partition %d: wrote its %s", answer_id, record.partition,
            "resumed turn" if spent else "consumption",
        )  # fmt: skip
        return Handled(
            outputs=[o for o in outputs if o[0] == wanted],
            repaired=True,
            thread_id=claims.thread_id,
            answer_id=answer_id,
        )

    # -- the steps ----------------------------------------------------------------------------

    def _parse(self, record: Record, value: bytes, now: datetime) -> _Parsed | _Claim | Handled:
        try:
            answer = decode(value, AnswerSubmitted)
        except DecodeError as exc:
            if exc.reason == "unexpected_type":
                # Not an answer: a claim is the one other record the answers topic carries.
                try:
                    return _Claim(decode(value, ContinuationRequested))
                except DecodeError:
                    pass
            # The codec's words where they tell only the record's framing (a schema id, a
            # fingerprint, a length); its reason alone where they may quote what it holds.
            said = exc.detail if exc.reason in _FRAMING_REASONS else _NOT_AN_ANSWER
            refusal = Refusal(RefusalReason.ANSWER_UNDECODABLE, f"{exc.reason}: {said}")
            return self._reject(record, refusal, now, thread_id=key_thread(record.key))
        misrouted = screening.misrouted(record, answer, self.partitions)
        if misrouted is not None:
            return self._reject(record, misrouted, now, answer=answer)
        # The token is parsed once: its unverified id picks the ledger row (a retry is
        # recognised before any signature work), and the same parse is then verified.
        try:
            parsed: ParsedToken | Refused = parse_token(answer.token)
        except Refused as refused:
            parsed = refused
        token_id = jti_of(parsed.payload) if isinstance(parsed, ParsedToken) else None
        return _Parsed(answer, parsed, token_id)

    def _check(
        self,
        record: Record,
        parsed: _Parsed,
        pending: Mapping[str, LedgerEntry],
        now: datetime,
        prefetched: _Prefetched,
    ) -> _Checked | Handled:
        answer, token_id = parsed.answer, parsed.token_id
        ledger: LedgerEntry | None = None
        if token_id is not None:
            ledger = pending.get(token_id)
            if ledger is None:
                if token_id in prefetched.ledgers:
                    ledger = prefetched.ledgers[token_id]
                else:
                    ledger = self.view.ledger(token_id)
        if is_replay(answer, ledger):
            # A retry of the answer that resumed: nothing new.
            return Handled(
                duplicate=True,
                thread_id=clip(answer.thread_id, ID_CHARS),
                answer_id=clip(answer.answer_id, ID_CHARS),
            )
        token = parsed.parsed
        verified: PauseClaims | Refused
        if isinstance(token, Refused):
            verified = token
        elif parsed.ahead is None:
            verified = self._verify(token, now)
        elif isinstance(parsed.ahead, Refused | PauseClaims):
            verified = parsed.ahead
        else:
            raise parsed.ahead  # what the verification raised, handled as if raised here
        return _Checked(answer, token_id, ledger, verified)

    def _verify(self, parsed: ParsedToken, now: datetime) -> PauseClaims | Refused:
        try:
            return self.verifier.verify_parsed(parsed, now)
        except Refused as refused:
            return refused

    def _lookup(
        self, record: Record, checked: _Checked, prefetched: _Prefetched
    ) -> tuple[PauseRecorded | SkimmedPause | None, bool]:
        """The token's pause, and whether this partition's pauses must be caught up first (the
        answer may have overtaken its own pause) -- only ever for a verified token, and only
        the partition the record is on."""
        claims = checked.verified
        if isinstance(claims, Refused):
            return None, False
        pause: PauseRecorded | SkimmedPause | None
        if claims.token_id in prefetched.pauses:
            stored = prefetched.pauses[claims.token_id]
            pause = None if stored is None else read_stored(stored)
        else:
            pause = self.view.pause(claims.token_id)
        if pause is not None and is_group(pause):
            return _as_call(pause, claims.token_id), False
        if pause is not None or claims.thread_id != checked.answer.thread_id:
            return pause, False
        p = record.partition
        if claims.pause_partition not in (None, p):
            return None, False
        applied = self.view.pauses_applied(p)
        stale = claims.pause_offset is None or applied is None or applied <= claims.pause_offset
        return None, stale

    async def _until_visible(self, partition: int, claims: PauseClaims) -> None:
        """Catch up again until the verified token's pause offset is behind the store.

        A pause's ``commit_transaction`` returns once the coordinator has logged the commit;
        the marker that makes the record visible to a ``read_committed`` reader is written to
        pauses[p] a moment later. An answer sent as soon as ``pause`` returned can meet a
        partition whose stable end is still at the pause: one catch-up reads nothing new. The
        token is signed, so its offset is the recorder's; the wait is bounded, and a pause
        still invisible after it is refused by the usual rule."""
        target = claims.pause_offset
        if target is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.marker_wait_seconds
        delay = 0.01
        while True:
            applied = self.view.pauses_applied(partition)
            if applied is not None and applied > target:
                return
            if self.view.pause(claims.token_id) is not None or loop.time() + delay > deadline:
                return
            await asyncio.sleep(delay)  # backoff between reads of the log, not a wait for it
            delay = min(delay * 2, 0.25)
            await self.catch_up(partition)

    def _finish(
        self,
        record: Record,
        checked: _Checked,
        pause: PauseRecorded | SkimmedPause | None,
        pending: dict[str, LedgerEntry],
        now: datetime,
    ) -> Handled:
        if isinstance(pause, PauseRecorded) and is_group(pause):
            return self._finish_group(record, checked, pause, pending, now)
        outcome = accept(
            checked.answer,
            verifier=Verified(checked.verified),
            interactions=self.interactions,
            pause=pause,
            ledger=checked.ledger,
            now=now,
            topics=self.topics,
            consumed_meta=event_meta(now),
            # Named by its token and answer, so a repaired copy is the same event.
            resumed_meta=event_meta(now, resumed_event_id(checked.token_id, checked.answer)),
        )
        if isinstance(outcome, Refusal):
            if self._forgotten(checked, now):
                return self._forget_answer(record, checked, now)
            if outcome.reason == RefusalReason.NO_RECORDED_TURN_STATE:
                outcome = self._superseded(checked) or outcome
            return self._reject(record, outcome, now, answer=checked.answer)
        claims, outputs = outcome
        too_big = self._too_big(outputs)
        if too_big is not None:
            return self._reject(record, too_big, now, answer=checked.answer)
        answer_id = checked.answer.answer_id
        pending[claims.token_id] = LedgerEntry(Outcome.RESUMED, answer_id, claims.thread_id)
        # The INFO line is the worker's, once the transaction committed.
        log.debug(
            "answer %s resumes thread %s (partition %d, offset %d)",
            answer_id, claims.thread_id, record.partition, record.offset,
        )  # fmt: skip
        return Handled(
            outputs=outputs,
            resumed=True,
            thread_id=claims.thread_id,
            answer_id=clip(answer_id, ID_CHARS),
        )

    def _too_big(self, outputs: Sequence[Output]) -> Refusal | None:
        for topic, key, value in outputs:
            size = len(key) + len(value or b"")
            if size > self.max_record_bytes:
                return Refusal(
                    RefusalReason.ANSWER_TOO_LARGE,
                    f"its record on {topic} would be {size} bytes, over the limit of "
                    f"{self.max_record_bytes}; answer with a shorter response",
                )
        return None

    # -- a pause of several calls ---------------------------------------------------------------

    def _finish_group(
        self,
        record: Record,
        checked: _Checked,
        pause: PauseRecorded,
        pending: dict[str, LedgerEntry],
        now: datetime,
    ) -> Handled:
        """An answer to one call of a pause of several (``pause``: that call's view). Steps 1-5
        are the single call's; then the answer is held while another call of the group is
        still open, and the answer that completes the group resumes the turn once, every
        call's observation in the order of the calls (:mod:`turnlog.contracts.group`)."""
        outcome = self._group_outcome(checked, pause, checked.ledger, pending, now)
        if isinstance(outcome, Refusal):
            if outcome.reason == RefusalReason.NO_RECORDED_TURN_STATE:
                outcome = self._superseded(checked) or outcome
            return self._reject(record, outcome, now, answer=checked.answer)
        entry, outputs = outcome
        too_big = self._too_big(outputs)
        if too_big is not None:
            return self._reject(record, too_big, now, answer=checked.answer)
        pending[pause.token_id] = entry
        return Handled(
            outputs=outputs,
            resumed=entry.outcome == Outcome.RESUMED,
            held=entry.outcome == Outcome.HELD,
            thread_id=entry.thread_id,
            answer_id=clip(checked.answer.answer_id, ID_CHARS),
        )

    def _group_outcome(
        self,
        checked: _Checked,
        pause: PauseRecorded,
        ledger: LedgerEntry | None,
        pending: Mapping[str, LedgerEntry],
        now: datetime,
    ) -> Refusal | tuple[LedgerEntry, list[Output]]:
        """The ledger entry and outputs of an answer to one call of a group, or its refusal."""
        answer = checked.answer
        prepared = prepare_resume(
            answer,
            verifier=Verified(checked.verified),
            interactions=self.interactions,
            pause=pause,
            ledger=ledger,
            now=now,
        )
        if isinstance(prepared, Refusal):
            return prepared
        claims = prepared.claims
        calls = calls_of(pause)
        others: dict[str, LedgerEntry | None] = {}
        for call in calls:
            if call.token_id != claims.token_id:
                others[call.token_id] = pending.get(call.token_id) or self.view.ledger(
                    call.token_id
                )
        if any(e is not None and e.outcome == Outcome.EXPIRED for e in others.values()):
            return Refusal(
                RefusalReason.PAUSE_EXPIRED,
                "another call of this pause was expired by its owner: the turn can no longer "
                "resume",
            )
        topics = self.topics
        key = consumption_key(claims.thread_id, claims.token_id)
        if any(e is None for e in others.values()):
            held = TokenConsumed(
                **event_meta(now), token_id=claims.token_id, answer_id=answer.answer_id,
                thread_id=claims.thread_id, checkpoint_id=claims.checkpoint_id,
                outcome=Outcome.HELD, response_json=answer.response_json,
            )  # fmt: skip
            entry = LedgerEntry(
                Outcome.HELD, answer.answer_id, claims.thread_id, answer.response_json
            )
            return entry, [(topics.consumptions, key, encode(held))]
        observed: list[Observed] = []
        answers: list[dict[str, str]] = []
        for call in calls:
            call_id = call.tool_call_id or call.interrupt_id
            if call.token_id == claims.token_id:
                answer_id, response_json = answer.answer_id, answer.response_json
                response = prepared.response
            else:
                got = others[call.token_id]
                if got is None:  # every other call is held here (checked above)
                    raise RuntimeError("a group's call is neither held nor this answer's")
                answer_id, response_json = got.answer_id, got.response_json
                response = self.interactions.get(call.response_schema).validate(response_json)
            interaction = self.interactions.get(call.response_schema)
            leave_open = (
                approved_arguments(response) if call.response_schema == APPROVE_TOOL_CALL else None
            )
            observed.append(Observed(call_id, interaction.observation(response), leave_open))
            answers.append(
                CallAnswer(
                    call.tool_call_id, call.interrupt_id, call.token_id, answer_id,
                    call.response_schema, response_json,
                ).record()
            )  # fmt: skip
        try:
            history = rehydrate_calls(pause.checkpoint, observed)
        except Refused as refused:
            return refused.refusal
        resumed = TurnResumed(
            **event_meta(now, resumed_event_id(checked.token_id, answer)),
            token_id=claims.token_id, answer_id=answer.answer_id, run_id=claims.run_id,
            session_id=claims.session_id, thread_id=claims.thread_id,
            checkpoint_id=claims.checkpoint_id, interrupt_id=claims.interrupt_id,
            tool_call_id=claims.tool_call_id, name=claims.interaction,
            prompt=pause.checkpoint.prompt, response_json=answer.response_json,
            history=history, answered=prepared.answered, answers=tuple(answers),
        )  # fmt: skip
        consumed = prepared.token_consumed(**event_meta(now))
        entry = LedgerEntry(Outcome.RESUMED, answer.answer_id, claims.thread_id)
        return entry, [
            (topics.consumptions, key, encode(consumed)),
            (topics.resumed, claims.thread_id.encode(), encode(resumed)),
        ]

    # -- refusals -----------------------------------------------------------------------------

    def _unprocessable(self, record: Record, exc: Exception, now: datetime) -> Handled:
        log.warning(
            "answer at %s[%d]@%d could not be handled (%s); refusing it",
            record.topic, record.partition, record.offset, type(exc).__name__, exc_info=exc,
        )  # fmt: skip
        refusal = Refusal(
            # The exception's kind only (its words, logged above, may quote the answer).
            RefusalReason.ANSWER_UNPROCESSABLE,
            f"{type(exc).__name__} while handling it (the worker's log has the rest)",
        )
        return self._reject(record, refusal, now, thread_id=key_thread(record.key))

    def _forgotten(self, checked: _Checked, now: datetime) -> bool:
        """Whether the answer's thread was forgotten: asked of every refused answer (a pause
        found is never a forgotten thread's), whatever its token says."""
        view, thread = self.view, checked.answer.thread_id
        if not thread or not isinstance(view, ForgottenView):
            return False
        return view.forgotten(thread, int(now.timestamp() * 1000))

    def _forget_answer(self, record: Record, checked: _Checked, now: datetime) -> Handled:
        """``forgotten``, and the answer's record tombstoned in the same transaction (the
        answers topic is compacted: its text goes at the next cleaning); the rejection names
        the thread and the answer, never what it said."""
        refusal = Refusal(
            RefusalReason.FORGOTTEN,
            f"thread {clip(checked.answer.thread_id, ID_CHARS)!r} was forgotten (turnlog "
            "forget): its answers are not kept",
        )
        handled = self._reject(record, refusal, now, answer=checked.answer)
        if record.key is not None:  # routed right: the key is the answer's own
            handled.outputs.append((self.topics.answers, record.key, None))
        return handled

    def _superseded(self, checked: _Checked) -> Refusal | None:
        """``pause_superseded`` when the token's pause is gone because a newer pause of the
        same thread and checkpoint replaced it (not "nothing on record"), else ``None``."""
        claims = checked.verified
        if not isinstance(claims, PauseClaims) or not isinstance(self.view, SupersedeView):
            return None
        newer = self.view.superseding(claims.thread_id, claims.checkpoint_id, claims.token_id)
        if newer is None:
            return None
        return Refusal(
            RefusalReason.PAUSE_SUPERSEDED,
            f"a newer pause of thread {claims.thread_id!r}, checkpoint {claims.checkpoint_id!r}"
            f" (token {newer}) replaced this token's: answer the newer one",
        )

    def _reject(
        self,
        record: Record,
        refusal: Refusal,
        now: datetime,
        *,
        answer: AnswerSubmitted | None = None,
        thread_id: str | None = None,
    ) -> Handled:
        event = screening.rejection(record, refusal, now, answer=answer, thread_id=thread_id)
        log.debug(
            "answer %s is refused: %s (thread %s, partition %d, offset %d)",
            event.answer_id, event.reason, event.thread_id, record.partition, record.offset,
        )  # fmt: skip
        output = (self.topics.rejections, (event.thread_id or "").encode(), encode(event))
        return Handled(
            outputs=[output], refusal=refusal, thread_id=event.thread_id, answer_id=event.answer_id
        )
