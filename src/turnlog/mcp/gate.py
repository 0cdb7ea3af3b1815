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

Why it sits beside the SDK's ``RequestStateBoundary`` rather than plugging in as a
``RequestStateCodec``: the boundary seals with one process-wide TTL (a pause's window is its
own, and may be days), and refuses every bad state with one frozen message where turnlog names
the rule; and a codec is synchronous, so it could not consult the log. The token is already
signed by keys every replica shares, so the gated tools' states pass the SDK's boundary
untouched (:class:`GatedStateBoundary`) and every other tool keeps the SDK's sealing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
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
    TextContent,
)

from turnlog.api import Turnlog
from turnlog.clock import utc_now
from turnlog.consumers.continuation import (
    AlreadyContinued,
    ContinuationRefused,
    default_claimant,
)
from turnlog.consumers.resumed import ResumedTurnTimeout
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_call
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.claims import PauseClaims
from turnlog.contracts.events import TurnResumed
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
from turnlog.mcp.results import RecordedResult, ResultLog, now_text
from turnlog.tokens.peek import parse_token

#: What a gated tool runs once approved: ``run(arguments, idempotency_key)``.
RunTool = Callable[[dict[str, Any], str], Awaitable[Any]]

_CALL_ID = "call-1"


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
    winner's result; ``poll_wait`` how long a state-only retry looks for a turn answered
    elsewhere before asking again. ``inbox_url`` (the inbox's address, as
    ``TURNLOG_INBOX_URL``) asks in URL mode instead: the client sends its person to the pause's
    inbox page (``<inbox_url>/pause/<token id>``), the decision is made there, and the client's
    retries -- whatever its URL elicitation result says -- look for it as a state alone would.
    Nothing lives in the process: any replica with the same
    settings and keys continues any pause. ``await gate.close()`` when the server stops.
    """

    def __init__(
        self,
        tl: Turnlog,
        server: str,
        *,
        window: timedelta | float | None = None,
        result_wait: float = 30.0,
        poll_wait: float = 1.0,
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
        self.poll_wait = poll_wait
        self.timeout = timeout
        self.claimant = claimant or default_claimant()
        self.results = ResultLog(tl.settings)
        self.tools: set[str] = set()
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
        """:meth:`call` with the state, the responses and the principal of ``ctx``'s request;
        a refusal becomes the JSON-RPC error ``-32602`` naming its reason (``data.reason``)."""
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
        recorded = await self.results.find(claims.thread_id, claims.token_id)
        if recorded is not None:
            return CallToolResult.model_validate(recorded.result)
        # In URL mode the decision is the inbox's: a response only says the page was opened.
        response = None if self.inbox_url else (input_responses or {}).get(APPROVAL_KEY)
        if response is not None:
            decision = decision_of(response)
            await self._answer(request_state, claims, tool, args, decision, principal)
        elif not await self._answered(claims):
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
            prompt=message or _question(tool, args),
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
        asked = message or _question(tool, args)
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

    async def _answer(
        self,
        token: str,
        claims: PauseClaims,
        tool: str,
        args: dict[str, Any],
        decision: Decision,
        principal: str | None,
    ) -> None:
        """The decision, through the seven steps; taken, or already consumed by another answer
        (the first on the log decides), else refused by the rule's name."""
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
            outcome = await self.tl.outcome(
                sent.answer_id, thread_id=claims.thread_id, timeout=self.timeout
            )
        except Refused as refused:
            raise StateRefused(refused.refusal.reason, refused.refusal.detail) from None
        if not outcome.accepted and outcome.reason != "already_consumed":
            detail = outcome.rejected.detail if outcome.rejected is not None else ""
            raise StateRefused(outcome.reason or "answer_rejected", detail)

    async def _answered(self, claims: PauseClaims) -> bool:
        """Whether the pause's turn was resumed (someone answered, here or elsewhere)."""
        try:
            await self.tl.peek_resumed_turn(
                claims.thread_id,
                token_id=claims.token_id,
                since=claims.issued_at,
                timeout=self.poll_wait,
            )
        except ResumedTurnTimeout:
            return False
        return True

    async def _continue(
        self, token: str, claims: PauseClaims, tool: str, run: RunTool
    ) -> CallToolResult:
        try:
            continuation = await self.tl.continue_turn(
                token, timeout=self.timeout, claimant=self.claimant
            )
        except AlreadyContinued as held:
            recorded = await self.results.find(
                claims.thread_id, claims.token_id, wait=self.result_wait
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
        call = approved_call(continuation.turn)
        if call is None:
            result = _rejected(continuation.turn, tool, claims.tool_call_id)
        else:
            result = await _run(run, dict(call["arguments"]), continuation.idempotency_key)
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
        await continuation.done()
        return result

    async def close(self) -> None:
        await self.results.close()


class GatedStateBoundary:
    """The SDK's ``RequestStateBoundary`` for every tool but the gated ones, whose state is a
    turnlog token the gate verifies itself (and names what it refuses)."""

    def __init__(self, inner: RequestStateBoundary, tools: Collection[str]) -> None:
        self.inner = inner
        self.tools = tools

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call" and (ctx.params or {}).get("name") in self.tools:
            return await call_next(ctx)
        return await self.inner(ctx, call_next)


def _question(tool: str, args: Mapping[str, Any]) -> str:
    shown = json.dumps(dict(args), ensure_ascii=False, sort_keys=True)
    return f"Approve {tool}({shown})?"


async def _run(run: RunTool, arguments: dict[str, Any], key: str) -> CallToolResult:
    """The tool's result as MCP's: a ``CallToolResult`` as is, text as text, anything else as
    JSON; an exception is the error result (it ran once; that is what it gave)."""
    try:
        value = await run(arguments, key)
    except Exception as exc:  # noqa: BLE001 -- the tool ran; its failure is its result
        return CallToolResult(
            content=[TextContent(type="text", text=f"{type(exc).__name__}: {exc}")], is_error=True
        )
    if isinstance(value, CallToolResult):
        return value
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)])


def _rejected(turn: TurnResumed, tool: str, call_id: str) -> CallToolResult:
    said = next(
        (
            str(m.get("content") or "")
            for m in turn.history
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ),
        "",
    )
    return CallToolResult(
        content=[TextContent(type="text", text=f"rejected: {tool} was not run. {said}".strip())]
    )


__all__ = ["ApprovalGate", "GatedStateBoundary", "RunTool"]
