"""The continuation claim, decided by the owner of the thread's partition (step 8).

A resumed turn on the resumed topic is a fact any number of readers see; running its next step
(the approved tool, the next model call) must happen once. So continuing is a claim, and the
claim is decided where answers are: a ``ContinuationRequested`` on the answers topic, on the
thread's partition, read by that partition's one owner and decided in its transaction against
the token ledger. The first claim of a resumed turn wins and is written on the token's ledger
row (its ``TokenConsumed``, compacted by token); every later one is refused by name with who
holds it. A pending claim in the open transaction is seen through ``pending``, as a duplicate
answer is, so two claims in one batch still give one winner.

Rules, in order:

- **Route by the record**: the key names the value's thread and claim, on the partition the
  thread maps to (``misrouted`` otherwise), as for answers.
- **A token, when given, is checked** -- signature, issuer, audience, and that it names the
  claimed thread and token -- but not its window: a turn may be continued long after its
  pause closed. A claim without a token is authorised by whoever may write the answers topic.
- **Only a resumed turn is claimed**: a token not spent, expired, or held for a group that
  still waits is ``not_resumed``. A held call's token finds its group's resumed turn: the claim
  is the group's, whichever call's token names it.
- **One holder**: ``claim`` wins only an unclaimed turn; ``retake`` takes a claim whose holder
  never said done (the caller was warned the side effect may have run), never a finished one;
  ``finish`` is accepted from the holder only (``claim_not_held`` otherwise). A request seen
  again (a publisher retry: same claim id and action) writes nothing new.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from turnlog.consumers.acceptance import Output
from turnlog.consumers.screening import ID_CHARS, clip, derived_event_id, event_meta
from turnlog.consumers.views import StoreView
from turnlog.contracts.events import AnswerRejected, ContinuationRequested
from turnlog.contracts.group import calls_of
from turnlog.contracts.ledger import ClaimState, LedgerEntry, Outcome
from turnlog.contracts.refusals import Refusal, RefusalReason, Refused
from turnlog.kafka.partitioning import answer_key, consumption_key, partition_for
from turnlog.kafka.reader import Record
from turnlog.kafka.topics import TopicSet
from turnlog.tokens import PauseClaims, TokenVerifier
from turnlog.tokens.peek import parse_token
from turnlog.wire.codec import encode
from turnlog.wire.direct import encode_token_consumed
from turnlog.wire.skim import SkimmedPause

log = logging.getLogger(__name__)

#: What a claim may ask.
ACTIONS = ("claim", "retake", "finish")


@dataclass
class ClaimDecision:
    """What one claim request comes to: its outputs, and its refusal if refused."""

    outputs: list[Output] = field(default_factory=list)
    refusal: Refusal | None = None
    granted: bool = False
    duplicate: bool = False
    thread_id: str | None = None
    claim_id: str | None = None


def _ms(moment: datetime) -> int:
    return int(moment.astimezone(UTC).timestamp() * 1000)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def holder_text(entry: LedgerEntry) -> str:
    """Who holds a resumed turn's claim, for a refusal and a status line."""
    state = "finished" if entry.claim_state == ClaimState.FINISHED else "not finished"
    return (
        f"continued by {entry.claimant or 'an unnamed claimant'} at "
        f"{_when(entry.claimed_at_ms)} (claim {entry.claim_id}, {state})"
    )


class ClaimDecider:
    """Decides claim requests for the partitions a worker owns; see the module docstring."""

    def __init__(
        self, *, topics: TopicSet, partitions: int, verifier: TokenVerifier, view: StoreView
    ) -> None:
        self.topics = topics
        self.partitions = partitions
        self.verifier = verifier
        self.view = view

    def decide(
        self,
        record: Record,
        request: ContinuationRequested,
        pending: dict[str, LedgerEntry],
        now: datetime,
    ) -> ClaimDecision:
        """The outputs of one claim request; ``pending`` gains the ledger row it writes."""
        misrouted = self._misrouted(record, request)
        if misrouted is not None:
            return self._refuse(record, request, misrouted, now, None)
        if request.action not in ACTIONS:
            refusal = Refusal(
                RefusalReason.ANSWER_UNPROCESSABLE,
                f"a claim's action is one of {', '.join(ACTIONS)}, not "
                f"{clip(request.action, 40)!r}",
            )
            return self._refuse(record, request, refusal, now, None)
        checked = self._check_token(request)
        if isinstance(checked, Refusal):
            return self._refuse(record, request, checked, now, None)
        found = self._resumed(request, pending)
        if isinstance(found, Refusal):
            return self._refuse(record, request, found, now, None)
        token_id, entry, checkpoint_id = found
        return self._apply(record, request, pending, now, token_id, entry, checkpoint_id)

    # -- the rules ----------------------------------------------------------------------------

    def _misrouted(self, record: Record, request: ContinuationRequested) -> Refusal | None:
        try:
            expected_key = answer_key(request.thread_id, request.claim_id)
        except (ValueError, TypeError, UnicodeEncodeError) as exc:
            return Refusal(RefusalReason.MISROUTED, f"the claim cannot be keyed: {exc}")
        if record.key != expected_key:
            return Refusal(
                RefusalReason.MISROUTED,
                "the record's key must be the claim's 'thread_id NUL claim_id', got "
                f"{clip(repr(record.key), 200)}",
            )
        expected = partition_for(request.thread_id, self.partitions)
        if expected != record.partition:
            return Refusal(
                RefusalReason.MISROUTED,
                f"thread {clip(request.thread_id, ID_CHARS)!r} maps to partition {expected} of "
                f"{self.partitions}, the claim is on partition {record.partition}",
            )
        return None

    def _check_token(self, request: ContinuationRequested) -> PauseClaims | Refusal | None:
        if not request.token:
            return None
        try:
            parsed = parse_token(request.token)
            # The window is not the claim's business: checked as of the token's own issue.
            iat = parsed.payload.get("iat")
            nbf = parsed.payload.get("nbf")
            moments = [v for v in (iat, nbf) if isinstance(v, int | float)]
            at = datetime.fromtimestamp(max(moments), UTC) if moments else datetime.now(UTC)
            claims = self.verifier.verify_parsed(parsed, at)
        except Refused as refused:
            return refused.refusal
        if claims.thread_id != request.thread_id:
            return Refusal(
                RefusalReason.THREAD_MISMATCH,
                f"the token is of thread {clip(claims.thread_id, ID_CHARS)!r}, the claim names "
                f"{clip(request.thread_id, ID_CHARS)!r}",
            )
        if request.token_id and claims.token_id != request.token_id:
            return Refusal(
                RefusalReason.TOKEN_INVALID,
                f"the token's id is {claims.token_id!r}, the claim names "
                f"{clip(request.token_id, ID_CHARS)!r}",
            )
        return claims

    def _row(self, token_id: str, pending: Mapping[str, LedgerEntry]) -> LedgerEntry | None:
        return pending.get(token_id) or self.view.ledger(token_id)

    def _resumed(
        self, request: ContinuationRequested, pending: Mapping[str, LedgerEntry]
    ) -> tuple[str, LedgerEntry, str] | Refusal:
        """The resumed turn's token, ledger row and checkpoint that ``request`` names."""
        token_id = request.token_id or ""
        thread = clip(request.thread_id, ID_CHARS)
        entry = self._row(token_id, pending) if token_id else None
        pause = self.view.pause(token_id) if token_id else None
        not_resumed = f"no resumed turn of thread {thread!r} for token {clip(token_id, ID_CHARS)!r}"
        if entry is None or entry.thread_id != request.thread_id:
            return Refusal(
                RefusalReason.NOT_RESUMED,
                f"{not_resumed}: it was not answered yet, or is unknown here",
            )
        if entry.outcome == Outcome.EXPIRED:
            return Refusal(RefusalReason.NOT_RESUMED, f"{not_resumed}: its pause expired")
        if pause is None:
            return Refusal(
                RefusalReason.NOT_RESUMED,
                f"{not_resumed}: its pause is no longer on record (forgotten or retired)",
            )
        if entry.outcome == Outcome.RESUMED:
            return token_id, entry, pause.checkpoint.checkpoint_id
        # Held: one call of a group; the group's turn is its call whose answer resumed it.
        decoded = pause.decode() if isinstance(pause, SkimmedPause) else pause
        waiting = []
        for call in calls_of(decoded):
            row = self._row(call.token_id, pending)
            if row is not None and row.outcome == Outcome.RESUMED:
                return call.token_id, row, decoded.checkpoint.checkpoint_id
            if row is None:
                waiting.append(call.tool_call_id or call.interrupt_id)
        return Refusal(
            RefusalReason.NOT_RESUMED,
            f"{not_resumed}: its answer is held while the group waits on "
            f"{', '.join(repr(clip(c, 80)) for c in waiting) or 'another call'}",
        )

    def _apply(
        self,
        record: Record,
        request: ContinuationRequested,
        pending: dict[str, LedgerEntry],
        now: datetime,
        token_id: str,
        entry: LedgerEntry,
        checkpoint_id: str,
    ) -> ClaimDecision:
        action, claim_id = request.action, request.claim_id
        thread = entry.thread_id
        if entry.claim_id == claim_id and (
            action != "finish" or entry.claim_state == ClaimState.FINISHED
        ):
            # The same request again (a publisher retry): its decision is on the log already.
            return ClaimDecision(duplicate=True, thread_id=thread, claim_id=clip(claim_id, 256))
        if action == "finish":
            if entry.claim_id != claim_id or not entry.claim_state:
                held = holder_text(entry) if entry.claimed else "not claimed by anyone"
                refusal = Refusal(
                    RefusalReason.CLAIM_NOT_HELD,
                    f"claim {clip(claim_id, ID_CHARS)!r} does not hold the resumed turn of "
                    f"thread {clip(thread, ID_CHARS)!r}: it is {held}",
                )
                return self._refuse(record, request, refusal, now, token_id)
            row = replace(entry, claim_state=ClaimState.FINISHED.value)
        else:
            taken = entry.claim_state == ClaimState.FINISHED or (
                action == "claim" and entry.claimed
            )
            if taken:
                refusal = Refusal(
                    RefusalReason.ALREADY_CONTINUED,
                    f"the resumed turn of thread {clip(thread, ID_CHARS)!r} (token {token_id}) "
                    f"was {holder_text(entry)}",
                )
                return self._refuse(record, request, refusal, now, token_id)
            if entry.claimed:
                log.warning(
                    "claim %s takes the resumed turn of thread %s from %s, who never said "
                    "done: its side effect may have run",
                    clip(claim_id, ID_CHARS), thread, clip(entry.claimant, 200),
                )  # fmt: skip
            row = replace(
                entry,
                claim_id=claim_id,
                claimant=request.claimant,
                claimed_at_ms=_ms(now),
                claim_state=ClaimState.CLAIMED.value,
            )
        pending[token_id] = row
        meta = event_meta(now, derived_event_id("claim", token_id, claim_id, action))
        value = encode_token_consumed(
            meta, token_id, row.answer_id, thread, checkpoint_id, Outcome(row.outcome).value,
            row.response_json, (row.claim_id, row.claimant, row.claimed_at_ms, row.claim_state),
        )  # fmt: skip
        return ClaimDecision(
            outputs=[(self.topics.consumptions, consumption_key(thread, token_id), value)],
            granted=True,
            thread_id=thread,
            claim_id=clip(claim_id, 256),
        )

    def _refuse(
        self,
        record: Record,
        request: ContinuationRequested,
        refusal: Refusal,
        now: datetime,
        token_id: str | None,
    ) -> ClaimDecision:
        claim_id = clip(request.claim_id, ID_CHARS)
        thread = clip(request.thread_id, ID_CHARS) or None
        event = AnswerRejected(
            **event_meta(
                now, derived_event_id("refused", record.topic, str(record.partition), claim_id)
            ),
            answer_id=claim_id,
            token_id=clip(token_id or request.token_id, ID_CHARS) or None,
            thread_id=thread,
            reason=refusal.reason.value,
            step=refusal.step,
            detail=clip(refusal.detail, 1000),
        )
        output = (self.topics.rejections, (thread or "").encode(), encode(event))
        return ClaimDecision(outputs=[output], refusal=refusal, thread_id=thread, claim_id=claim_id)
