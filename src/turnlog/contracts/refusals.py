"""The names of every rule that can refuse an answer, and the step of the resume contract each
belongs to.

The name is the whole interface: it is what ``AnswerRejected.reason`` carries, what a log line
says and what an exception holds, so an operator reading any of the three learns the same rule.
The step (1-5) tells which part of the contract refused; every one of them comes before the token
is consumed (step 6), which is why a refused answer always leaves its pause resumable. Step 8 is
the claim on a resumed turn (``consumers/claiming.py``): continuing it is decided once too, and a
refused claim names its rule the same way.

The four ``axis_missing_*`` names belong to step 2 but are checked before anything else: an
unstated axis is a malformed answer, and checking it first means no key is touched for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from turnlog.errors import TurnlogError


class RefusalReason(StrEnum):
    """A refusal's name; the value is the snake_case text written on the log."""

    # step 1: the answer and its token can be read, authenticated and are inside their window
    ANSWER_UNDECODABLE = "answer_undecodable"
    #: the record is not on the partition its thread maps to, or its key names another thread
    #: than its value: handling it there would spend the token where its owner never looks
    MISROUTED = "misrouted"
    #: handling the record failed in a way no rule names (a bug, a claim of an absurd type);
    #: refused so that one record never stops a worker
    ANSWER_UNPROCESSABLE = "answer_unprocessable"
    TOKEN_INVALID = "token_invalid"
    TOKEN_UNKNOWN_KEY = "token_unknown_key"
    TOKEN_WRONG_ISSUER = "token_wrong_issuer"
    TOKEN_WRONG_AUDIENCE = "token_wrong_audience"
    TOKEN_EXPIRED = "token_expired"
    TOKEN_NOT_YET_VALID = "token_not_yet_valid"
    # step 2: every axis is stated and matches the token
    AXIS_MISSING_SCOPE = "axis_missing_scope"
    AXIS_MISSING_SESSION = "axis_missing_session"
    AXIS_MISSING_RUN = "axis_missing_run"
    AXIS_MISSING_CALL = "axis_missing_call"
    SCOPE_MISMATCH = "scope_mismatch"
    SESSION_MISMATCH = "session_mismatch"
    RUN_MISMATCH = "run_mismatch"
    CALL_MISMATCH = "call_mismatch"
    THREAD_MISMATCH = "thread_mismatch"
    # step 3: the recorded request is the one the token was issued for
    REQUEST_HASH_MISMATCH = "request_hash_mismatch"
    # step 4: the response is one the interaction accepts
    INTERACTION_UNKNOWN = "interaction_unknown"
    RESPONSE_INVALID = "response_invalid"
    #: the response fits the schema but does not answer what the pause asked: a selection not
    #: offered, a question unanswered or answered twice, free text where none is taken
    RESPONSE_MISMATCH = "response_mismatch"
    #: an approval decides on another call (tool or arguments) than the one the pause asked about
    APPROVAL_MISMATCH = "approval_mismatch"
    #: the answer, or the turn it would resume, could not be written within the topic's limits
    ANSWER_TOO_LARGE = "answer_too_large"
    # step 5: the recorded turn exists, is the token's, can be continued and is still unspent
    NO_RECORDED_TURN_STATE = "no_recorded_turn_state"
    #: a newer pause of the same thread and checkpoint replaced the token's: answer that one
    PAUSE_SUPERSEDED = "pause_superseded"
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    ASKING_ROUND_MISSING = "asking_round_missing"
    ALREADY_CONSUMED = "already_consumed"
    PAUSE_EXPIRED = "pause_expired"
    #: the answer's thread was forgotten (``turnlog forget``): nothing of it is kept, and the
    #: answer's own record is tombstoned with the refusal -- checked whatever the token says
    FORGOTTEN = "forgotten"
    # after the seven steps: continuing the resumed turn is a claim, decided once
    #: no resumed turn for that token on that thread (not answered yet, held, expired, unknown)
    NOT_RESUMED = "not_resumed"
    #: another claimant continues (or continued) the resumed turn
    ALREADY_CONTINUED = "already_continued"
    #: a claim said done by someone who does not hold it
    CLAIM_NOT_HELD = "claim_not_held"

    @property
    def step(self) -> int:
        """The step of the resume contract this rule belongs to."""
        return _STEPS[self]


_STEPS: dict[RefusalReason, int] = {
    RefusalReason.ANSWER_UNDECODABLE: 1,
    RefusalReason.MISROUTED: 1,
    RefusalReason.ANSWER_UNPROCESSABLE: 1,
    RefusalReason.TOKEN_INVALID: 1,
    RefusalReason.TOKEN_UNKNOWN_KEY: 1,
    RefusalReason.TOKEN_WRONG_ISSUER: 1,
    RefusalReason.TOKEN_WRONG_AUDIENCE: 1,
    RefusalReason.TOKEN_EXPIRED: 1,
    RefusalReason.TOKEN_NOT_YET_VALID: 1,
    RefusalReason.AXIS_MISSING_SCOPE: 2,
    RefusalReason.AXIS_MISSING_SESSION: 2,
    RefusalReason.AXIS_MISSING_RUN: 2,
    RefusalReason.AXIS_MISSING_CALL: 2,
    RefusalReason.SCOPE_MISMATCH: 2,
    RefusalReason.SESSION_MISMATCH: 2,
    RefusalReason.RUN_MISMATCH: 2,
    RefusalReason.CALL_MISMATCH: 2,
    RefusalReason.THREAD_MISMATCH: 2,
    RefusalReason.REQUEST_HASH_MISMATCH: 3,
    RefusalReason.INTERACTION_UNKNOWN: 4,
    RefusalReason.RESPONSE_INVALID: 4,
    RefusalReason.RESPONSE_MISMATCH: 4,
    RefusalReason.APPROVAL_MISMATCH: 4,
    RefusalReason.ANSWER_TOO_LARGE: 4,
    RefusalReason.NO_RECORDED_TURN_STATE: 5,
    RefusalReason.PAUSE_SUPERSEDED: 5,
    RefusalReason.CHECKPOINT_MISMATCH: 5,
    RefusalReason.ASKING_ROUND_MISSING: 5,
    RefusalReason.ALREADY_CONSUMED: 5,
    RefusalReason.PAUSE_EXPIRED: 5,
    RefusalReason.FORGOTTEN: 5,
    RefusalReason.NOT_RESUMED: 8,
    RefusalReason.ALREADY_CONTINUED: 8,
    RefusalReason.CLAIM_NOT_HELD: 8,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused answer: the rule's name and a sentence for the person reading the log.

    The step is derived from the name rather than stored, so the two can never disagree.
    """

    reason: RefusalReason
    detail: str

    @property
    def step(self) -> int:
        return self.reason.step

    def __str__(self) -> str:
        return f"{self.reason.value} (step {self.step}): {self.detail}"


class Refused(TurnlogError):
    """Raised where a refusal has to travel as an exception (token verification, rehydration)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal

    @property
    def reason(self) -> RefusalReason:
        return self.refusal.reason

    @property
    def detail(self) -> str:
        return self.refusal.detail


def refuse(reason: RefusalReason, detail: str) -> Refused:
    """The exception for ``reason``; a shorthand so raise sites read as the rule they apply."""
    return Refused(Refusal(reason, detail))
