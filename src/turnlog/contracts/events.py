"""The facts turnlog writes to Kafka, as frozen values.

One class per Avro schema in ``schemas/`` (the wire contract); the mapping between these values
and Avro records lives in one place, :mod:`turnlog.wire.codec`. Every event carries an ``event_id``,
the moment it happened (``occurred_at``, aware UTC) and the writer's ``package_version``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.messages import normalize_message

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    event_id: str
    occurred_at: datetime
    package_version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseRecorded(Event):
    """A turn stopped before dispatching a human interaction; its token may now be handed out.

    ``request_json`` is the paused request as recorded (its hash is the token's ``request_hash``
    claim); ``response_schema`` is the interaction name whose registered schema the answer must
    satisfy; ``expires_at`` closes the window.

    ``group`` is set when the asking round made several calls that each wait on a person: every
    one of them, in the order of the calls, as ``PausedCall`` mappings (``tool_call_id``,
    ``interrupt_id``, ``token_id``, ``request_json``, ``request_hash``, ``response_schema``),
    each with its own token. The top-level fields are then the first call's. Empty: a pause of
    one call, as every pause was before groups (see :mod:`turnlog.contracts.group`).
    """

    checkpoint: TurnCheckpoint
    token_id: str
    request_json: str
    request_hash: str
    response_schema: str
    expires_at: datetime
    group: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerSubmitted(Event):
    """A person's answer to a pause, as stated by whoever published it.

    The four axes are optional on the wire on purpose: an answer that leaves one out must still be
    readable so that the resume worker can refuse it *by name* rather than fail to decode it.
    ``thread_id`` comes from the token and only routes the record; it is never trusted.
    """

    answer_id: str
    token: str
    thread_id: str
    scope_hash: str | None
    session_id: str | None
    run_id: str | None
    call_id: str | None
    response_json: str
    submitted_at: datetime
    #: Who sent it, as the publisher verified them (the inbox: its viewer's subject and issuer);
    #: kept for the pause's trail, never trusted by the worker. ``None``: the publisher did not say.
    answered_by: str | None = None
    answered_by_issuer: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenConsumed(Event):
    """The one final record of a token: spent by an answer (``resumed``), by an answer to one call
    of a group whose other calls still wait (``held``: its ``response_json`` is kept here until
    the last call is answered), or by its window closing (``expired``)."""

    token_id: str
    answer_id: str
    thread_id: str
    checkpoint_id: str
    outcome: str  # "resumed" | "held" | "expired"
    response_json: str = ""
    #: The continuation claim of a resumed turn (:class:`ContinuationRequested`): who holds it,
    #: since when, and whether its holder said done. Empty until someone claims the turn.
    claim_id: str = ""
    claimant: str = ""
    claimed_at_ms: int = 0
    claim_state: str = ""  # "" | "claimed" | "finished"


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerRejected(Event):
    """An answer the resume contract refused: ``reason`` names the rule, ``step`` its step."""

    answer_id: str
    token_id: str | None
    thread_id: str | None
    reason: str
    step: int
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseExpired(Event):
    """A pause closed unanswered; its token can no longer resume. ``reason``: its window closed
    (``window_closed``), or its write was never finalized (``unfinalized``: the crash window)."""

    token_id: str
    thread_id: str
    checkpoint_id: str
    run_id: str
    session_id: str
    tool_call_id: str
    expires_at: datetime
    reason: str = "window_closed"


@dataclass(frozen=True, slots=True)
class AskUserAnswered:
    """The typed-surface record owed before an ``ask_user`` resume continues."""

    selected_labels: tuple[str, ...]
    has_other: bool
    time_to_answer_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResumed(Event):
    """A resumed turn, ready for any worker: the rehydrated history already holds the answer."""

    token_id: str
    answer_id: str
    run_id: str
    session_id: str
    thread_id: str
    checkpoint_id: str
    interrupt_id: str
    tool_call_id: str
    name: str
    prompt: str
    response_json: str
    history: tuple[Mapping[str, Any], ...] = field(default=())
    answered: AskUserAnswered | None = None
    #: A turn that waited on several calls: each call's answer (``CallAnswer`` mappings:
    #: ``tool_call_id``, ``interrupt_id``, ``token_id``, ``answer_id``, ``name``,
    #: ``response_json``), in the order of the calls; the top-level answer is the last one.
    answers: tuple[Mapping[str, Any], ...] = ()
    #: A sealed turn (the worker's ``TURNLOG_SEAL``): the content fields above are empty and
    #: this holds them encrypted under the turn's own key on the keys topic
    #: (:mod:`turnlog.wire.sealing`); readers of turnlog open it before handing the turn out.
    sealed: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", tuple(normalize_message(m) for m in self.history))
        if type(self.answers) is not tuple:
            object.__setattr__(self, "answers", tuple(self.answers))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuationRequested(Event):
    """A claim on a resumed turn (``action`` ``claim``), a stale claim taken again
    (``retake``), or its holder saying done (``finish``): written beside the answers, on the
    thread's partition, so the partition's one owner decides it in a transaction against the
    token ledger, as it decides answers. Reading a resumed turn is no permission to continue it:
    two readers would both run the approved call. ``token`` is the pause token when the claimant
    holds it (checked); ``thread_id`` and ``token_id`` are never trusted before that check and
    the ledger agree."""

    claim_id: str
    thread_id: str
    token_id: str
    action: str  # "claim" | "retake" | "finish"
    claimant: str
    token: str = ""


AnyEvent = (
    PauseRecorded
    | AnswerSubmitted
    | TokenConsumed
    | AnswerRejected
    | PauseExpired
    | TurnResumed
    | ContinuationRequested
)
