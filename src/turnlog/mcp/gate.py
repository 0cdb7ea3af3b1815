"""An MCP tool that waits for a person's approval through turnlog, and runs once.

The round trips of MCP 2026-07-28 (``InputRequiredResult``, the retry with ``input_responses``
and the echoed ``request_state``) mapped onto turnlog's pause, answer and continuation claim:

1. a first call pauses (a ``PauseRecorded`` on Kafka, seen by the inbox, the CLI, ``pending``)
   and returns ``input_required``: one form elicitation, and the pause's signed token as the
   ``request_state``;
2. a retry's state is verified (signature, issuer, audience; the window where it matters) and
   checked against the server, the tool, the arguments' digest and the principal -- refused by
   name as a JSON-RPC error, nothing run;
3. a result already recorded for the pause is returned as it was, whatever the retry carries;
4. ``input_responses`` are an answer through the seven-step contract (the same decision is the
   same answer id, so a repeated retry collapses onto the first); a state alone looks for a turn
   answered elsewhere, and asks again (``input_required``, the same elicitation) when none is;
5. the resumed turn is claimed (``Turnlog.continue_turn``): the winner runs the tool -- the
   approved call, edits applied -- records its result, then says done; every other retry reads
   the recorded result instead of running anything.

It sits beside the SDK's ``RequestStateBoundary`` (``boundary.py``), not inside it as a
``RequestStateCodec``: one process-wide TTL, one frozen refusal and a synchronous codec could
not carry a pause's own window, name the rule, or consult the log (docs/adapters/mcp.md).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateBoundary, authenticated_principal
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
)

from turnlog.api import Turnlog
from turnlog.clock import utc_now
from turnlog.consumers.continuation import (
    AlreadyContinued,
    Continuation,
    ContinuationRefused,
    default_claimant,
)
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_call
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.claims import PauseClaims
from turnlog.contracts.refusals import Refused
from turnlog.mcp.binding import (
    APPROVAL_KEY,
    DECISION_SCHEMA,
    Decision,
    StateRefused,
    check_binding,
    decision_of,
    principal_scope,
    server_session,
)
from turnlog.mcp.boundary import GatedStateBoundary
from turnlog.mcp.results import RecordedResult, ResultLog, now_text
from turnlog.mcp.shapes import RunTool, question, rejected, run_tool
from turnlog.tokens.peek import parse_token

_CALL_ID = "call-1"
#: Seconds an answering retry waits on its claim before it reads its answer's outcome too.
_CHECK_AFTER = 2.0

log = logging.getLogger(__name__)


class ApprovalGate:
    """The turnlog side of one MCP server's gated tools; one per server process::

        gate = ApprovalGate(tl, "deployer")
        gate.install(server, tools=["deploy"])   # their states pass the SDK's boundary as is

        @server.tool()
        async def deploy(service: str, region: str, ctx: Context) -> ...:
            return await gate.handle(ctx, "deploy", {"service": service, "region": region},
                                     run=lambda args, key: do_deploy(**args, key=key))

    ``window`` is how long the person has (the pause's token window; default the settings'
    ``token_ttl_seconds``); ``result_wait`` how long a retry that lost the claim waits for the
    winner's result. ``inbox_url`` (the inbox's address, as
    ``TURNLOG_INBOX_URL``) asks in URL mode instead: the client sends its person to the pause's
    inbox page (``<inbox_url>/pause/<token id>``), the decision is made there, and the client's
    retries -- whatever its URL elicitation result says -- look for it as a state alone would.
    Nothing lives in the process: any replica with the same settings and keys continues any
    pause. ``await gate.close()`` when the server stops.
    """

    def __init__(
        self,
        tl: Turnlog,
        server: str,
        *,
        window: timedelta | float | None = None,
        result_wait: float = 30.0,
        timeout: float = 30.0,
        claimant: str | None = None,
        inbox_url: str | None = None,
    ) -> None:
        if not server:
            raise ValueError("an ApprovalGate needs the server's name (it binds every state)")
        self.tl = tl
        self.server = server
        self.window = window
        self.result_wait = result_wait
        self.timeout = timeout
        self.claimant = claimant or default_claimant()
        self.results = ResultLog(tl.settings)
        self.tools: set[str] = set()
        self._finishing: set[asyncio.Future[None]] = set()
        self.inbox_url = inbox_url.rstrip("/") if inbox_url else None

    def install(self, server: MCPServer, *, tools: Collection[str]) -> None:
        """Let the named tools' states through the SDK's request-state boundary untouched
        (they are turnlog's signed tokens, checked here); every other tool keeps it."""
        self.tools.update(tools)
        chain = server.middleware
        for i, middleware in enumerate(chain):
            if isinstance(middleware, RequestStateBoundary):
                chain[i] = GatedStateBoundary(middleware, self.tools)
                return
            if isinstance(middleware, GatedStateBoundary):
                return
        raise ValueError("the server has no RequestStateBoundary to stand beside")

    async def handle(
        self,
        ctx: Context[Any, Any],
        tool: str,
        arguments: Mapping[str, Any],
        *,
        run: RunTool,
        message: str | None = None,
    ) -> CallToolResult | InputRequiredResult:
        """:meth:`call` with ``ctx``'s state, responses and principal; a refusal is the JSON-RPC
        error ``-32602`` naming its reason (``data.reason``)."""
        try:
            return await self.call(
                tool,
                arguments,
                run=run,
                request_state=ctx.request_state,
                input_responses=ctx.input_responses,
                principal=authenticated_principal(ctx.request_context),
                message=message,
            )
        except StateRefused as refused:
            raise MCPError(
                code=INVALID_PARAMS,
                message=str(refused),
                data={"reason": refused.reason, "detail": refused.detail},
            ) from None

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        run: RunTool,
        request_state: str | None,
        input_responses: Mapping[str, Any] | None,
        principal: str | None,
        message: str | None = None,
    ) -> CallToolResult | InputRequiredResult:
        """One round of the gated tool; :class:`StateRefused` names what was refused."""
        args = dict(arguments)
        if request_state is None:
            if input_responses:
                raise StateRefused("response_invalid", "input_responses without request_state")
            return await self._pause(tool, args, principal, message)
        claims = self._verify(request_state)
        check_binding(claims, server=self.server, tool=tool, arguments=args, principal=principal)
        # In URL mode the decision is the inbox's: a response only says the page was opened.
        response = None if self.inbox_url else (input_responses or {}).get(APPROVAL_KEY)
        decision = decision_of(response) if response is not None else None
        lookup = asyncio.ensure_future(
            self.results.find(claims.thread_id, claims.token_id, since=claims.issued_at)
        )
        # The answer goes out beside the lookup: one to a pause already continued is harmless
        # (the same decision is the same answer id; another is refused already_consumed).
        sending = (
            asyncio.ensure_future(
                self._send(request_state, claims, tool, args, decision, principal)
            )
            if decision is not None
            else None
        )
        try:
            recorded = await lookup
            if recorded is not None:
                return CallToolResult.model_validate(recorded.result)
            if sending is not None:
                return await self._continue(request_state, claims, tool, run, await sending)
        finally:
            await _settled(lookup)
            await _settled(sending, cancel=False)  # a publish is let finish, never cut off
        if not await self._answered(claims):
            if utc_now() >= claims.expires_at:
                raise StateRefused("token_expired", "the pause's window closed unanswered")
            return self._input_required(request_state, tool, args, message, claims.token_id)
        return await self._continue(request_state, claims, tool, run)

    # -- the rounds -------------------------------------------------------------------------------

    async def _pause(
        self, tool: str, args: dict[str, Any], principal: str | None, message: str | None
    ) -> InputRequiredResult:
        thread = f"mcp-{uuid.uuid4().hex}"
        checkpoint = TurnCheckpoint(
            run_id=thread,
            session_id=server_session(self.server),
            thread_id=thread,
            checkpoint_id="approval",
            scope_hash=principal_scope(principal),
            tool_call_id=_CALL_ID,
            name=APPROVE_TOOL_CALL,
            prompt=message or question(tool, args),
            messages=captured_messages(
                [{"role": "user", "content": f"MCP client call of {tool} on {self.server}"}],
                requests=[ReservedCall(_CALL_ID, tool, args)],
            ),
            created_at=utc_now(),
        )
        paused = await self.tl.pause(
            checkpoint,
            request=approval_request(tool, args),
            interaction=APPROVE_TOOL_CALL,
            ttl=self.window,
        )
        return self._input_required(paused.token, tool, args, message, paused.token_id)

    def _input_required(
        self, token: str, tool: str, args: dict[str, Any], message: str | None, token_id: str
    ) -> InputRequiredResult:
        asked = message or question(tool, args)
        params: ElicitRequestFormParams | ElicitRequestURLParams
        if self.inbox_url:
            params = ElicitRequestURLParams(message=asked, url=f"{self.inbox_url}/pause/{token_id}")
        else:
            params = ElicitRequestFormParams(message=asked, requested_schema=dict(DECISION_SCHEMA))
        return InputRequiredResult(
            input_requests={APPROVAL_KEY: ElicitRequest(params=params)}, request_state=token
        )

    def _verify(self, token: str) -> PauseClaims:
        """The token's claims, its signature, issuer and audience checked at the moment it was
        issued: a window that closed does not hide a result recorded in time."""
        try:
            parsed = parse_token(token)
            issued = parsed.payload.get("iat")
            at = datetime.fromtimestamp(issued, UTC) if isinstance(issued, int | float) else None
            return self.tl.verifier.verify_parsed(parsed, at or utc_now())
        except Refused as refused:
            raise StateRefused(refused.refusal.reason, refused.refusal.detail) from None

    async def _send(
        self,
        token: str,
        claims: PauseClaims,
        tool: str,
        args: dict[str, Any],
        decision: Decision,
        principal: str | None,
    ) -> str:
        """Publish the decision (checked before Kafka as any answer is); its answer id."""
        try:
            sent = await self.tl.answer(
                token,
                decision.response(tool, args),
                scope_hash=principal_scope(principal),
                session_id=server_session(self.server),
                run_id=claims.run_id,
                call_id=_CALL_ID,
                answer_id=decision.answer_id(claims.token_id),
                answered_by=principal,
            )
        except Refused as refused:
            raise StateRefused(refused.refusal.reason, refused.refusal.detail) from None
        return sent.answer_id

    async def _decided(self, answer_id: str, claims: PauseClaims) -> None:
        """Return once the answer is taken or already consumed by another (the first on the log
        decides); else the worker's refusal, by its rule's name."""
        outcome = await self.tl.outcome(answer_id, thread_id=claims.thread_id, timeout=self.timeout)
        if not outcome.accepted and outcome.reason != "already_consumed":
            detail = outcome.rejected.detail if outcome.rejected is not None else ""
            raise StateRefused(outcome.reason or "answer_rejected", detail)

    async def _answered(self, claims: PauseClaims) -> bool:
        """Whether the pause's turn was resumed (someone answered, here or elsewhere)."""
        return await self.results.resumed(claims.thread_id, claims.token_id, since=claims.issued_at)

    async def _claimed(self, token: str) -> Continuation:
        return await self.tl.continue_turn(token, timeout=self.timeout, claimant=self.claimant)

    async def _continue(
        self, token: str, claims: PauseClaims, tool: str, run: RunTool, answer_id: str = ""
    ) -> CallToolResult:
        """Claim the resumed turn and run the tool, or read the result of whoever holds it. With
        ``answer_id`` (this retry answered) and no claim decided in ``_CHECK_AFTER``, the
        answer's outcome is read beside it: refused, the turn never resumes, and the claim --
        still waiting for the turn, so never sent -- is given up."""
        claim = asyncio.ensure_future(self._claimed(token))
        check: asyncio.Future[None] | None = None
        try:
            if answer_id and not (await asyncio.wait({claim}, timeout=_CHECK_AFTER))[0]:
                check = asyncio.ensure_future(self._decided(answer_id, claims))
                await asyncio.wait({claim, check}, return_when=asyncio.FIRST_COMPLETED)
                if check.done() and not check.cancelled() and check.exception() is not None:
                    await check  # raises the refusal
            continuation = await claim
        except AlreadyContinued as held:
            recorded = await self.results.find(
                claims.thread_id, claims.token_id, since=claims.issued_at, wait=self.result_wait
            )
            if recorded is not None:
                return CallToolResult.model_validate(recorded.result)
            raise StateRefused(
                "already_continued",
                f"{held.refusal.detail}; no result recorded within {self.result_wait:g}s: it "
                "still runs, or its holder stopped (its side effect may have run)",
            ) from None
        except ContinuationRefused as refused:
            raise StateRefused(refused.refusal.reason, refused.refusal.detail) from None
        finally:
            await _settled(claim, check)
        call = approved_call(continuation.turn)
        if call is None:
            result = rejected(continuation.turn, tool, claims.tool_call_id)
        else:
            result = await run_tool(run, dict(call["arguments"]), continuation.idempotency_key)
        await self.results.record(
            RecordedResult(
                thread_id=claims.thread_id,
                token_id=claims.token_id,
                tool=tool,
                result=result.model_dump(mode="json", by_alias=True, exclude_none=True),
                claim_id=continuation.claim_id,
                claimant=continuation.claimant,
                recorded_at=now_text(),
            )
        )
        # Recorded, the result is what every retry gets: the claim's "done" need not hold the
        # caller up (a crash before it leaves a claim taken, with its result beside it).
        finishing = asyncio.ensure_future(self._finish(continuation))
        self._finishing.add(finishing)
        finishing.add_done_callback(self._finishing.discard)
        return result

    async def _finish(self, continuation: Continuation) -> None:
        try:
            await continuation.done()
        except Exception as exc:  # noqa: BLE001 -- the result is recorded; say it, go on
            log.warning("the claim %s was not said done: %s", continuation.claim_id, exc)

    async def close(self) -> None:
        """Say done for the claims still finishing, then stop the results producer."""
        if self._finishing:
            await asyncio.gather(*self._finishing, return_exceptions=True)
        await self.results.close()


async def _settled(*tasks: asyncio.Future[Any] | None, cancel: bool = True) -> None:
    """Wait for ``tasks`` (cancelled first, with ``cancel``); their outcome is not wanted, and
    is marked seen so that no error of theirs is reported as never retrieved."""
    live = [task for task in tasks if task is not None]
    if cancel:
        for task in live:
            task.cancel()
    if live:
        await asyncio.wait(live)
    for task in live:
        if not task.cancelled():
            task.exception()


__all__ = ["ApprovalGate", "RunTool"]
