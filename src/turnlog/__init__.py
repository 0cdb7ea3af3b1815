"""turnlog: paused LLM-agent turns, durable and resumable exactly once, over Apache Kafka.

The public API is the names in ``__all__``; every other module is private and may change.
Start from :class:`Turnlog`::

    from turnlog import Settings, Turnlog

    async with Turnlog(Settings.from_env()) as tl:
        asked = {"questions": [{"question": "Which region?", "options": ["eu", "us"]}]}
        paused = await tl.pause(checkpoint, request=asked)
        answer = {"answers": [{"selections": ["eu"], "other": None}]}
        sent = await tl.answer(paused.token, answer, **paused.axes)
        print((await tl.outcome(sent.answer_id)).accepted)

The names are loaded on first use, so ``import turnlog`` stays cheap (the CLI and the pure
rooms import the package without a Kafka client or a store).

Entry point
    ``Turnlog`` -- one deployment: pause, answer, outcome, resumed, run_worker, checkpoints.
    ``Settings`` -- where and how (``Settings.from_env()`` reads ``TURNLOG_*``).
    ``AnswerOutcome`` -- what became of an answer: resumed, or rejected with its reason.
Paused turns
    ``TurnCheckpoint`` -- the continuable state of one paused turn.
    ``ReservedCall`` / ``captured_messages`` -- the asking round, captured into a checkpoint.
    ``Paused`` -- a durable pause: its token and the axes an answer must state.
    ``CallToPause`` -- one call of a pause of several (``Turnlog.pause_calls``).
    ``PublishedAnswer`` -- an answer on the log (its id, partition, offset).
Interactions (what a person may answer)
    ``Interaction`` / ``InteractionRegistry`` / ``default_interactions`` -- register your own.
    ``ASK_USER`` -- the built-in question interaction's name.
    ``APPROVE_TOOL_CALL`` -- approving a tool call: pause with ``approval_request``, answer with
    ``approve`` / ``edit`` / ``reject``; ``approved_call`` is the call a resumed turn runs,
    ``approved_calls`` every call a resumed turn of several calls runs.
Downstream
    ``ResumedTurns`` -- the async iterator of resumed turns; ``history_dicts`` its messages.
    ``Continuation`` -- a resumed turn claimed to continue once (``Turnlog.continue_turn``);
    ``AlreadyContinued`` / ``ContinuationRefused`` / ``ClaimTimeout`` -- why not.
    ``ResumedTurnTimeout`` -- ``Turnlog.resumed_turn`` (one thread's turn) found none in time.
    ``Continuation`` -- a resumed turn claimed by ``Turnlog.continue_turn``: continued once;
    ``AlreadyContinued`` / ``ContinuationRefused`` / ``ClaimTimeout`` when the claim is not won.
    ``TurnResumed`` / ``PauseExpired`` / ``AnswerRejected`` -- the records on the output topics.
Checkpoint service (seed 001)
    ``CheckpointService`` / ``CheckpointRef`` -- readiness, latest, history, safe boundaries.
Keys
    ``Keyring`` / ``write_keypair`` -- token keys, and writing a new pair into a keys directory.
Errors (all are ``TurnlogError``)
    ``Refused`` (``.refusal.reason``: a ``RefusalReason``), ``PauseInvalid``,
    ``BrokerUnavailable``, ``ConfigurationError``, ``SettingError``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# First, before any module of the resume path is imported: whether its compiled build is used.
from turnlog import _compiled  # noqa: F401
from turnlog._version import __version__

if TYPE_CHECKING:
    from turnlog.api import Paused, Turnlog
    from turnlog.consumers.continuation import (
        AlreadyContinued,
        ClaimTimeout,
        Continuation,
        ContinuationRefused,
    )
    from turnlog.consumers.outcomes import AnswerOutcome
    from turnlog.consumers.resumed import ResumedTurns, ResumedTurnTimeout, history_dicts
    from turnlog.contracts.approvals import (
        APPROVE_TOOL_CALL,
        approval_request,
        approve,
        approved_call,
        approved_calls,
        edit,
        reject,
    )
    from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
    from turnlog.contracts.events import AnswerRejected, PauseExpired, TurnResumed
    from turnlog.contracts.group import CallToPause
    from turnlog.contracts.interactions import (
        ASK_USER,
        Interaction,
        InteractionRegistry,
        default_interactions,
    )
    from turnlog.contracts.refusals import RefusalReason, Refused
    from turnlog.errors import (
        BrokerUnavailable,
        ConfigurationError,
        PauseInvalid,
        SettingError,
        TurnlogError,
    )
    from turnlog.producers.answers import PublishedAnswer
    from turnlog.projections.service import CheckpointRef, CheckpointService
    from turnlog.settings import Settings
    from turnlog.tokens import Keyring, write_keypair

#: Each public name and the private module it lives in.
_HOME: dict[str, str] = {
    # entry point
    "Turnlog": "turnlog.api",
    "AnswerOutcome": "turnlog.consumers.outcomes",
    "Settings": "turnlog.settings",
    # paused turns
    "TurnCheckpoint": "turnlog.contracts.checkpoint",
    "ReservedCall": "turnlog.contracts.checkpoint",
    "captured_messages": "turnlog.contracts.checkpoint",
    "Paused": "turnlog.api",
    "CallToPause": "turnlog.contracts.group",
    "PublishedAnswer": "turnlog.producers.answers",
    # interactions
    "Interaction": "turnlog.contracts.interactions",
    "InteractionRegistry": "turnlog.contracts.interactions",
    "default_interactions": "turnlog.contracts.interactions",
    "ASK_USER": "turnlog.contracts.interactions",
    "APPROVE_TOOL_CALL": "turnlog.contracts.approvals",
    "approval_request": "turnlog.contracts.approvals",
    "approve": "turnlog.contracts.approvals",
    "edit": "turnlog.contracts.approvals",
    "reject": "turnlog.contracts.approvals",
    "approved_call": "turnlog.contracts.approvals",
    "approved_calls": "turnlog.contracts.approvals",
    # downstream
    "ResumedTurns": "turnlog.consumers.resumed",
    "ResumedTurnTimeout": "turnlog.consumers.resumed",
    "history_dicts": "turnlog.consumers.resumed",
    "Continuation": "turnlog.consumers.continuation",
    "AlreadyContinued": "turnlog.consumers.continuation",
    "ContinuationRefused": "turnlog.consumers.continuation",
    "ClaimTimeout": "turnlog.consumers.continuation",
    "TurnResumed": "turnlog.contracts.events",
    "PauseExpired": "turnlog.contracts.events",
    "AnswerRejected": "turnlog.contracts.events",
    # checkpoint service
    "CheckpointService": "turnlog.projections.service",
    "CheckpointRef": "turnlog.projections.service",
    # keys
    "Keyring": "turnlog.tokens",
    "write_keypair": "turnlog.tokens",
    # errors
    "TurnlogError": "turnlog.errors",
    "Refused": "turnlog.contracts.refusals",
    "RefusalReason": "turnlog.contracts.refusals",
    "PauseInvalid": "turnlog.errors",
    "BrokerUnavailable": "turnlog.errors",
    "ConfigurationError": "turnlog.errors",
    "SettingError": "turnlog.errors",
}

__all__ = [  # noqa: RUF022 - grouped by use, as the docstring lists them
    # entry point
    "Turnlog",
    "AnswerOutcome",
    "Settings",
    # paused turns
    "TurnCheckpoint",
    "ReservedCall",
    "captured_messages",
    "Paused",
    "CallToPause",
    "PublishedAnswer",
    # interactions
    "Interaction",
    "InteractionRegistry",
    "default_interactions",
    "ASK_USER",
    "APPROVE_TOOL_CALL",
    "approval_request",
    "approve",
    "edit",
    "reject",
    "approved_call",
    "approved_calls",
    # downstream
    "ResumedTurns",
    "ResumedTurnTimeout",
    "history_dicts",
    "Continuation",
    "AlreadyContinued",
    "ContinuationRefused",
    "ClaimTimeout",
    "TurnResumed",
    "PauseExpired",
    "AnswerRejected",
    # checkpoint service
    "CheckpointService",
    "CheckpointRef",
    # keys
    "Keyring",
    "write_keypair",
    # errors
    "TurnlogError",
    "Refused",
    "RefusalReason",
    "PauseInvalid",
    "BrokerUnavailable",
    "ConfigurationError",
    "SettingError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'turnlog' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
