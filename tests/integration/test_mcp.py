"""turnlog.mcp on the real broker, through the MCP SDK's own client (in-memory transport).

The server is examples/mcp_server.py's (the page shows it): ``deploy`` waits for a
person's approval. Each ``Turnlog`` has clients of its own, so two servers over two of them are
two replicas as far as Kafka is concerned, sharing nothing in memory. What is checked: the
first call pauses on the log and hands out the pause's token as ``request_state``; two
retries at once through two replicas answer and continue once -- the tool ran once, both got the
same result, and so does a third retry and a state-only one; a state alone before anyone
answered asks again, and after an answer from the CLI returns the result; a tampered, foreign,
other-arguments, other-deployment or expired state is refused by name and nothing runs.
"""

from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, TextContent

from tests.conftest import Names
from tests.integration.cli_support import Cli, cli_env
from tests.integration.test_api import api_settings
from turnlog import Turnlog, approve, write_keypair
from turnlog.clock import utc_now
from turnlog.mcp import APPROVAL_KEY, ApprovalGate, StateRefused
from turnlog.tokens import peek_claims

ROOT = Path(__file__).resolve().parents[2]
ARGS = {"service": "api", "region": "eu-west-1"}


def _load(path: str = "examples/mcp_server.py") -> ModuleType:
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def _approve(decision: str = "approve") -> dict[str, Any]:
    return {APPROVAL_KEY: ElicitResult(action="accept", content={"decision": decision})}


async def _retry(
    client: Client, state: str, responses: dict[str, Any] | None, args: dict[str, str] = ARGS
) -> CallToolResult | InputRequiredResult:
    return await client.session.call_tool(
        "deploy", args, input_responses=responses, request_state=state, allow_input_required=True
    )


async def _refused(client: Client, state: str, args: dict[str, str] = ARGS) -> str:
    with pytest.raises(MCPError) as refused:
        await _retry(client, state, _approve(), args)
    data = refused.value.error.data
    assert isinstance(data, dict), refused.value
    return str(data["reason"])


async def _first(client: Client) -> InputRequiredResult:
    first = await client.session.call_tool("deploy", ARGS, allow_input_required=True)
    assert isinstance(first, InputRequiredResult), first
    assert first.input_requests is not None and list(first.input_requests) == [APPROVAL_KEY]
    assert first.request_state is not None
    return first


async def test_two_retries_at_once_through_two_replicas_run_the_tool_once_and_agree(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    log = tmp_path / "deploy.log"
    example = _load()
    async with Turnlog(settings) as tl, Turnlog(settings) as a, Turnlog(settings) as b:
        worker = asyncio.create_task(tl.run_worker())
        server_a, gate_a = example.build_server(a, log)
        server_b, gate_b = example.build_server(b, log)
        async with Client(server_a) as one, Client(server_b) as two:
            first = await _first(one)
            state = first.request_state
            assert state is not None
            # The state is the pause's token: the pause is on the log like any other.
            claims = peek_claims(state)
            assert (claims["tool_name"], claims["interaction"]) == ("deploy", "approve_tool_call")
            results = await asyncio.gather(
                _retry(one, state, _approve()), _retry(two, state, _approve())
            )
            assert all(isinstance(r, CallToolResult) for r in results), results
            texts = {_text(r) for r in results if isinstance(r, CallToolResult)}
            assert texts == {"deployed api to eu-west-1"}
            assert log.read_text().splitlines() == ["deployed api to eu-west-1"]
            # Again, with the responses and with the state alone: the recorded result.
            for again in (await _retry(two, state, _approve()), await _retry(one, state, None)):
                assert isinstance(again, CallToolResult) and _text(again) in texts
            assert log.read_text().splitlines() == ["deployed api to eu-west-1"]
        await gate_a.close()
        await gate_b.close()
    await asyncio.wait_for(worker, 30)  # it stopped with the Turnlog, cleanly


async def test_the_pages_client_in_band_and_by_hand(
    bootstrap: str, names: Names, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    log = tmp_path / "deploy.log"
    client = _load("docs/snippets/mcp_client.py")
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        server, gate = _load().build_server(tl, log)
        # The SDK's own loop: the elicitation callback is the person, in band.
        done = await client.deploy_in_band(server)
        assert _text(done) == "deployed api to eu-west-1" and not done.is_error
        assert (
            'Approve deploy({"region": "eu-west-1", "service": "api"})?' in capsys.readouterr().out
        )
        rejected = await client.deploy_by_hand(server, "reject")
        assert _text(rejected).startswith("rejected: deploy was not run.")
        assert log.read_text().splitlines() == ["deployed api to eu-west-1"]
        await gate.close()
    await asyncio.wait_for(worker, 30)  # it stopped with the Turnlog, cleanly


async def test_two_retries_with_different_decisions_give_one_decision_to_both(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    log = tmp_path / "deploy.log"
    example = _load()
    async with Turnlog(settings) as tl, Turnlog(settings) as other:
        worker = asyncio.create_task(tl.run_worker())
        server_a, gate_a = example.build_server(tl, log)
        server_b, gate_b = example.build_server(other, log)
        async with Client(server_a) as one, Client(server_b) as two:
            state = (await _first(one)).request_state
            assert state is not None
            results = await asyncio.gather(
                _retry(one, state, _approve("approve")), _retry(two, state, _approve("reject"))
            )
            texts = [_text(r) for r in results if isinstance(r, CallToolResult)]
            assert len(texts) == 2 and texts[0] == texts[1], results
            ran = log.read_text().splitlines() if log.exists() else []
            if texts[0].startswith("rejected"):
                assert ran == []
            else:
                assert ran == ["deployed api to eu-west-1"] == texts[:1]
        await gate_a.close()
        await gate_b.close()
    await asyncio.wait_for(worker, 30)  # it stopped with the Turnlog, cleanly


async def test_a_state_alone_asks_again_until_the_cli_answers_then_returns_the_result(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    log = tmp_path / "deploy.log"
    cli = Cli(cli_env(bootstrap, names.prefix, names.app, tmp_path)).with_env(
        TURNLOG_PARTITIONS=str(settings.partitions)
    )
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        server, gate = _load().build_server(tl, log)
        async with Client(server) as client:
            state = (await _first(client)).request_state
            assert state is not None
            # Nobody answered: the same elicitation again, with the same state (the SDK's
            # client then asks its person in band instead of giving up after ~2 s of polling).
            again = await _retry(client, state, None)
            assert isinstance(again, InputRequiredResult) and again.request_state == state
            assert again.input_requests is not None and APPROVAL_KEY in again.input_requests
            assert not log.exists()
            # Answered elsewhere: the CLI, as a person with the token would.
            claims = peek_claims(state)
            await asyncio.to_thread(  # the worker runs on this loop: the CLI must not block it
                cli, "answer", state, "--approve", "--scope", str(claims["scope_hash"]),
                "--session", str(claims["session_id"]), "--run", str(claims["run_id"]),
                "--call", str(claims["tool_call_id"]), "--wait",
            )  # fmt: skip
            done = await _retry(client, state, None)
            assert isinstance(done, CallToolResult) and _text(done) == "deployed api to eu-west-1"
            assert log.read_text().splitlines() == ["deployed api to eu-west-1"]
        await gate.close()
    await asyncio.wait_for(worker, 30)  # it stopped with the Turnlog, cleanly


async def test_tampered_foreign_and_expired_states_are_refused_by_name_and_nothing_runs(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    log = tmp_path / "deploy.log"
    # Another deployment: its own keys (same issuer and audience), its own pauses.
    write_keypair(tmp_path / "other-keys", "other-kid")
    elsewhere = replace(settings, keys_dir=tmp_path / "other-keys")
    example = _load()
    async with Turnlog(settings) as tl, Turnlog(elsewhere) as foreign:
        worker = asyncio.create_task(tl.run_worker())
        server, gate = example.build_server(tl, log)
        short = ApprovalGate(tl, "deployer", window=timedelta(seconds=1))
        foreign_server, foreign_gate = example.build_server(foreign, log)
        async with Client(server) as client, Client(foreign_server) as other:
            state = (await _first(client)).request_state
            assert state is not None
            head, body, signature = state.split(".")
            flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
            assert await _refused(client, f"{head}.{body}.{flipped}") == "token_invalid"
            other_args = {**ARGS, "region": "us-east-1"}
            assert await _refused(client, state, other_args) == "state_request_mismatch"
            foreign_state = (await _first(other)).request_state
            assert foreign_state is not None
            assert await _refused(client, foreign_state) == "token_unknown_key"
            # A pause of this deployment made by another server: foreign.
            billing = ApprovalGate(tl, "billing")
            theirs = await billing.call(
                "deploy", ARGS, run=_never, request_state=None, input_responses=None,
                principal=None,
            )  # fmt: skip
            await billing.close()
            assert isinstance(theirs, InputRequiredResult) and theirs.request_state
            assert await _refused(client, theirs.request_state) == "state_foreign"
            # One made for another principal: refused to this one.
            not_ours = await short.call(
                "deploy", ARGS, run=_never, request_state=None, input_responses=None,
                principal="someone",
            )  # fmt: skip
            assert isinstance(not_ours, InputRequiredResult) and not_ours.request_state
            assert await _refused(client, not_ours.request_state) == "state_principal_mismatch"
            # Its window closes unanswered. Inside the clock leeway an answer passes the check
            # before Kafka, and the worker refuses it (the pause expired); past the leeway, a
            # state alone or an answer is refused at once. The condition is the clock itself.
            expires = float(peek_claims(not_ours.request_state)["exp"])
            await asyncio.sleep(max(0.0, expires + 1.5 - utc_now().timestamp()))
            with pytest.raises(StateRefused) as late:
                await short.call(
                    "deploy", ARGS, run=_never, request_state=not_ours.request_state,
                    input_responses=_approve(), principal="someone",
                )  # fmt: skip
            assert late.value.reason == "pause_expired", late.value
            leeway = timedelta(seconds=settings.token_leeway_seconds)
            closes = expires + leeway.total_seconds() + 1 - utc_now().timestamp()
            await asyncio.sleep(max(0.0, closes))
            for responses in (None, _approve()):
                with pytest.raises(StateRefused) as expired:
                    await short.call(
                        "deploy", ARGS, run=_never, request_state=not_ours.request_state,
                        input_responses=responses, principal="someone",
                    )  # fmt: skip
                assert expired.value.reason == "token_expired", expired.value
        await gate.close()
        await short.close()
        await foreign_gate.close()
    assert not log.exists()
    await asyncio.wait_for(worker, 30)  # it stopped with the Turnlog, cleanly


async def _never(arguments: dict[str, Any], key: str) -> str:
    raise AssertionError(f"ran {arguments} under {key}")


async def test_in_url_mode_the_person_decides_on_the_inbox_page_and_retries_look_for_it(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    ran: list[dict[str, Any]] = []

    async def deploy(arguments: dict[str, Any], key: str) -> str:
        ran.append(arguments)
        return "deployed"

    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        gate = ApprovalGate(tl, "deployer", inbox_url="https://inbox.example/")
        rounds = {"run": deploy, "principal": None}
        first = await gate.call("deploy", ARGS, request_state=None, input_responses=None, **rounds)
        assert isinstance(first, InputRequiredResult) and first.request_state is not None
        state = first.request_state
        assert first.input_requests is not None
        asked = first.input_requests[APPROVAL_KEY].params
        token_id = peek_claims(state)["jti"]
        assert (asked.mode, asked.url) == ("url", f"https://inbox.example/pause/{token_id}")
        # The client says it opened the page: no decision in that, so it is asked again.
        opened = {APPROVAL_KEY: ElicitResult(action="accept")}
        again = await gate.call(
            "deploy", ARGS, request_state=state, input_responses=opened, **rounds
        )
        assert isinstance(again, InputRequiredResult) and ran == []
        # The inbox answers (as its POST does: the pause's token and axes).
        claims = peek_claims(state)
        sent = await tl.answer(
            state, approve("deploy", ARGS), scope_hash=claims["scope_hash"],
            session_id=claims["session_id"], run_id=claims["run_id"],
            call_id=claims["tool_call_id"],
        )  # fmt: skip
        assert (await tl.outcome(sent.answer_id, timeout=45)).accepted
        done = await gate.call(
            "deploy", ARGS, request_state=state, input_responses=opened, **rounds
        )
        assert isinstance(done, CallToolResult) and _text(done) == "deployed" and ran == [ARGS]
        await gate.close()
    await asyncio.wait_for(worker, 30)  # it stopped with the Turnlog, cleanly
