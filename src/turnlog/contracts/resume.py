"""The resume contract for one answer, as a pure function: steps 1-5 and 7.

Step 6 -- consuming the token -- is the caller's, because on the log it is a Kafka transaction
(``TokenConsumed`` and ``TurnResumed`` committed with the answer's input offset). Everything that
can refuse happens here first, so a refused answer never spends its token; and the rehydrated
history is built before the consume, so no resumed turn can be emitted without it.

What the caller looks up, and why it may use unverified claims to do so: the pause record and the
token's ledger entry are found by the thread, checkpoint and token id read with
:func:`turnlog.tokens.peek.peek_claims`. This function then checks everything found against the
*verified* claims, so a forged token that points elsewhere is refused at step 1 and a lookup that
found the wrong record is refused at step 5.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_mismatch, approved_arguments
from turnlog.contracts.axes import Axes
from turnlog.contracts.claims import PauseClaims
from turnlog.contracts.events import (
    AnswerSubmitted,
    AskUserAnswered,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.contracts.interactions import ASK_USER, InteractionRegistry
from turnlog.contracts.ledger import LedgerEntry, Outcome
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused, refuse
from turnlog.contracts.rehydration import rehydrate


class Verifier(Protocol):
    """Checks a token and returns its claims, or raises ``Refused`` naming the rule."""

    def verify(self, token: str, now: datetime) -> PauseClaims: ...


def request_hash(request_json: str) -> str:
    """SHA-256 (hex) of the request's canonical JSON text: keys sorted, no spaces, UTF-8.

    Canonical, so that the same request hashes alike however a producer spaced or ordered it.
    Raises ``ValueError`` for text that is not JSON.
    """
    try:
        value = json.loads(request_json)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"a recorded request must be JSON text: {exc}") from None
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


#: Canonical hashes of recorded request texts, by text: the hash is a function of the text alone,
#: so a hit is exactly what :func:`request_hash` computes, and each answer's token claim is still
#: compared with it. Pauses that record the same text (one question put to many threads, an
#: answer refused and sent again) then skip the parse and canonical re-serialisation at step 3.
#: Bounded (at most 1024 texts of at most 4096 characters; emptied when full).
_REQUEST_HASHES: dict[str, str] = {}
_REQUEST_HASHES_MAX = 1024
_REQUEST_HASHED_CHARS = 4096


def _recorded_request_hash(request_json: str) -> str:
    """:func:`request_hash` of ``request_json``, remembered for texts seen before.

    Only successes are remembered: text that is not JSON raises ``ValueError`` every time.
    """
    found = _REQUEST_HASHES.get(request_json)
    if found is None:
        found = request_hash(request_json)
        if len(request_json) <= _REQUEST_HASHED_CHARS:
            if len(_REQUEST_HASHES) >= _REQUEST_HASHES_MAX:
                _REQUEST_HASHES.clear()
            _REQUEST_HASHES[request_json] = found
    return found


@dataclass(frozen=True, slots=True)
class PreparedResume:
    """An answer that passed every check, with what the consume (step 6) writes."""

    answer: AnswerSubmitted
    claims: PauseClaims
    pause: PauseRecorded
    response: Any
    observation: str
    history: tuple[dict[str, Any], ...]
    answered: AskUserAnswered | None

    def token_consumed(
        self, *, event_id: str, occurred_at: datetime, package_version: str
    ) -> TokenConsumed:
        return TokenConsumed(
            event_id=event_id,
            occurred_at=occurred_at,
            package_version=package_version,
            token_id=self.claims.token_id,
            answer_id=self.answer.answer_id,
            thread_id=self.claims.thread_id,
            checkpoint_id=self.claims.checkpoint_id,
            outcome=Outcome.RESUMED,
        )

    def turn_resumed(
        self, *, event_id: str, occurred_at: datetime, package_version: str
    ) -> TurnResumed:
        checkpoint = self.pause.checkpoint
        return TurnResumed(
            event_id=event_id,
            occurred_at=occurred_at,
            package_version=package_version,
            token_id=self.claims.token_id,
            answer_id=self.answer.answer_id,
            run_id=self.claims.run_id,
            session_id=self.claims.session_id,
            thread_id=self.claims.thread_id,
            checkpoint_id=self.claims.checkpoint_id,
            interrupt_id=self.claims.interrupt_id,
            tool_call_id=self.claims.tool_call_id,
            name=self.claims.interaction,
            prompt=checkpoint.prompt,
            response_json=self.answer.response_json,
            history=self.history,
            answered=self.answered,
        )


def is_replay(answer: AnswerSubmitted, ledger: LedgerEntry | None) -> bool:
    """Whether the token was already spent by this very answer (a publisher retry, or a re-read
    after an aborted transaction). Such an answer produces nothing: call this before
    :func:`prepare_resume`, which would otherwise refuse it as already consumed."""
    return (
        ledger is not None
        and ledger.outcome != Outcome.EXPIRED  # resumed, or held for its group
        and ledger.answer_id == answer.answer_id
    )


def missing_axis(answer: AnswerSubmitted) -> Refusal | None:
    """The first axis the answer leaves unstated, refused by its own name."""
    if answer.scope_hash and answer.session_id and answer.run_id and answer.call_id:
        return None  # every axis stated: the usual answer skips building the Axes
    return Axes.stated_by(answer).missing()


def mismatched_axis(answer: AnswerSubmitted, claims: PauseClaims) -> Refusal | None:
    """The first stated axis (or the routing thread) that disagrees with the token."""
    if (
        answer.scope_hash == claims.scope_hash
        and answer.session_id == claims.session_id
        and answer.run_id == claims.run_id
        and answer.call_id == claims.answered_call_id
        and answer.thread_id == claims.thread_id
    ):
        return None  # all agree: the usual answer skips building the Axes; any other, below
    mismatch = Axes.stated_by(answer).mismatch(Axes.of_claims(claims))
    if mismatch is not None:
        return mismatch
    if answer.thread_id != claims.thread_id:
        return Refusal(
            RefusalReason.THREAD_MISMATCH,
            f"the answer states another thread than its token, {claims.thread_id!r}",
        )
    return None


def _checkpoint_disagreement(pause: PauseFacts, claims: PauseClaims) -> list[str]:
    checkpoint = pause.checkpoint
    pairs = {
        "token_id": (pause.token_id, claims.token_id),
        "thread_id": (checkpoint.thread_id, claims.thread_id),
        "checkpoint_id": (checkpoint.checkpoint_id, claims.checkpoint_id),
        "run_id": (checkpoint.run_id, claims.run_id),
        "session_id": (checkpoint.session_id, claims.session_id),
        "scope_hash": (checkpoint.scope_hash, claims.scope_hash),
        "tool_call_id": (checkpoint.tool_call_id, claims.tool_call_id),
        "interrupt_id": (checkpoint.interrupt_id, claims.interrupt_id),
        "interaction": (pause.response_schema, claims.interaction),
    }
    return [name for name, (recorded, claimed) in pairs.items() if recorded != claimed]


def _answered_record(
    answer: AnswerSubmitted, claims: PauseClaims, response: Any
) -> AskUserAnswered | None:
    """The ``ask_user`` summary owed before the turn continues; ``None`` for any other
    interaction (it has no selections to report) and for an empty answer list."""
    if claims.interaction != ASK_USER or not response.get("answers"):
        return None
    answers = response["answers"]
    labels = tuple(label for entry in answers for label in entry["selections"])
    # submitted_at is the publisher's word; a clock behind the issuer's must not go negative.
    waited = max(0.0, (answer.submitted_at - claims.issued_at).total_seconds())
    return AskUserAnswered(
        selected_labels=labels,
        has_other=any(entry.get("other") is not None for entry in answers),
        time_to_answer_seconds=waited,
    )


def check_response(
    claims: PauseClaims,
    interactions: InteractionRegistry,
    response_json: str,
    request_json: str | None = None,
) -> Any:
    """Step 4 for the verified ``claims``: the response as its interaction's schema reads it, or
    :class:`Refused` (``interaction_unknown``, ``response_invalid``, ``approval_mismatch``,
    ``response_mismatch``). ``request_json``, the recorded request, binds it to what was asked
    (read once the schema fits, for an interaction that binds): the worker has it and decides;
    a publisher holding only the token runs this without it, before Kafka."""
    interaction = interactions.get(claims.interaction)
    response = interaction.validate(response_json)
    if claims.interaction == APPROVE_TOOL_CALL:
        mismatch = approval_mismatch(response, claims.tool_name, claims.arguments_hash)
        if mismatch is not None:
            raise Refused(mismatch)
    if request_json is not None:
        problem = interaction.mismatch(request_json, response)
        if problem is not None:
            raise refuse(RefusalReason.RESPONSE_MISMATCH, problem)
    return response


class CheckpointFacts(Protocol):
    """The checkpoint fields the contract checks a token against (a ``TurnCheckpoint``, or the
    same fields read without decoding the messages)."""

    @property
    def thread_id(self) -> str: ...
    @property
    def checkpoint_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def scope_hash(self) -> str: ...
    @property
    def tool_call_id(self) -> str: ...
    @property
    def interrupt_id(self) -> str: ...
    @property
    def prompt(self) -> str: ...


class PauseFacts(Protocol):
    """What steps 3 and 5 read of a recorded pause: a ``PauseRecorded``, or a pause whose
    checkpoint messages were left encoded (:mod:`turnlog.wire.skim`)."""

    @property
    def token_id(self) -> str: ...
    @property
    def request_json(self) -> str: ...
    @property
    def response_schema(self) -> str: ...
    @property
    def checkpoint(self) -> CheckpointFacts: ...


@dataclass(frozen=True, slots=True)
class CheckedResume:
    """An answer through steps 1-5: everything but the rebuilt history (step 7)."""

    claims: PauseClaims
    response: Any
    observation: str
    #: An approval's arguments (see :func:`~turnlog.contracts.rehydration.rehydrate`), else None.
    leave_open: str | None
    answered: AskUserAnswered | None


def check_resume(
    answer: AnswerSubmitted,
    *,
    verifier: Verifier,
    interactions: InteractionRegistry,
    pause: PauseFacts | None,
    ledger: LedgerEntry | None,
    now: datetime,
) -> Refusal | CheckedResume:
    """Steps 1-5 of :func:`prepare_resume`, in its order, with the same refusals; step 7 (the
    history) is the caller's, from the pause's messages decoded or still encoded."""
    missing = missing_axis(answer)
    if missing is not None:
        return missing
    try:
        claims = verifier.verify(answer.token, now)
    except Refused as refused:
        return refused.refusal
    mismatch = mismatched_axis(answer, claims)
    if mismatch is not None:
        return mismatch
    if pause is not None:
        try:
            recorded = _recorded_request_hash(pause.request_json)
        except ValueError as exc:
            return Refusal(RefusalReason.REQUEST_HASH_MISMATCH, str(exc))
        if recorded != claims.request_hash:
            return Refusal(
                RefusalReason.REQUEST_HASH_MISMATCH,
                "the recorded request is not the one the token was issued for",
            )
    try:
        interaction = interactions.get(claims.interaction)
        asked = None if pause is None else pause.request_json
        response = check_response(claims, interactions, answer.response_json, asked)
    except Refused as refused:
        return refused.refusal
    leave_open: str | None = None
    if claims.interaction == APPROVE_TOOL_CALL:
        leave_open = approved_arguments(response)
    if pause is None:
        return Refusal(
            RefusalReason.NO_RECORDED_TURN_STATE,
            f"no pause is recorded for thread {claims.thread_id!r}, checkpoint "
            f"{claims.checkpoint_id!r}; a turn rebuilt from nothing would receive an answer to a "
            "question it never asked",
        )
    disagree = _checkpoint_disagreement(pause, claims)
    if disagree:
        return Refusal(
            RefusalReason.CHECKPOINT_MISMATCH,
            f"the recorded pause and the token disagree on {', '.join(disagree)}",
        )
    if ledger is not None:
        if ledger.outcome == Outcome.EXPIRED:
            return Refusal(RefusalReason.PAUSE_EXPIRED, "the pause was expired by its owner")
        held = " (held for its pause's other calls)" if ledger.outcome == Outcome.HELD else ""
        spent = f"the token was spent by answer {ledger.answer_id!r}{held}"
        return Refusal(RefusalReason.ALREADY_CONSUMED, spent)
    return CheckedResume(
        claims=claims,
        response=response,
        observation=interaction.observation(response),
        leave_open=leave_open,
        answered=_answered_record(answer, claims, response),
    )


def prepare_resume(
    answer: AnswerSubmitted,
    *,
    verifier: Verifier,
    interactions: InteractionRegistry,
    pause: PauseRecorded | None,
    ledger: LedgerEntry | None,
    now: datetime,
) -> Refusal | PreparedResume:
    """Run the resume contract on ``answer``; the first rule that fails names the refusal.

    ``pause`` is the ``PauseRecorded`` stored for the token's thread and checkpoint (``None``
    when there is none -- the caller first makes sure it has applied the pauses partition up to
    the token's ``pause_offset``); ``ledger`` is the token's ledger entry, if any; ``now`` is
    the worker's clock, which decides the window (``submitted_at`` is the publisher's word).

    Order: the four axes are stated; 1 the token verifies and is in its window; 2 each axis
    matches it; 3 the recorded request hashes to its claim; 4 the response fits the interaction
    and what was asked; 5 the pause is recorded, is the token's, is unspent and can be
    continued; 7 the history is rebuilt. With no pause recorded, steps 3 and 4 have no request
    to read and the refusal comes at step 5, so every refusal is the earliest step that fails.
    """
    checked = check_resume(
        answer,
        verifier=verifier,
        interactions=interactions,
        pause=pause,
        ledger=ledger,
        now=now,
    )
    if isinstance(checked, Refusal):
        return checked
    if pause is None:  # check_resume refuses a missing pause; this tells the type checker
        raise RuntimeError("a checked resume has a pause")
    claims = checked.claims
    try:
        history = rehydrate(
            pause.checkpoint,
            claims.answered_call_id,
            checked.observation,
            leave_open=checked.leave_open,
        )
    except Refused as refused:
        return refused.refusal
    return PreparedResume(
        answer=answer,
        claims=claims,
        pause=pause,
        response=checked.response,
        observation=checked.observation,
        history=history,
        answered=checked.answered,
    )
