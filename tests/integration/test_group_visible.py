"""A pause of several calls followed end to end from the command line, on the real broker
(issue 37, items 3 and 4, and the continuation claim made visible).

The agent pauses once for a question (call-1) and an approval (call-2). Each call is answered
by its own ``turnlog answer`` process: the question first, by ``--thread --call`` -- its
``--wait`` and ``tl.outcome()`` say *held*, naming the call still waiting, and ``show`` says
held -- then the approval, reached by ``--thread --call`` although the group's first call is
spent, decided with ``--approve`` (no hash computed by hand). Its ``--wait`` says resumed, the
first answer's ``outcome()`` now gives the group's resumed turn, and ``show`` says resumed.
``pending``, ``show`` and ``trail`` print what each call asks. Then the turn is claimed and
never said done: ``show``, ``pending`` and ``status`` name the holder, until done.

Before, ``--wait`` and ``outcome()`` timed out on the held answer, ``--thread --call call-2``
found no pending pause, ``show`` said held after the group resumed, and ``--approve`` did not
exist.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from tests.conftest import Names
from tests.deployment import ANSWER, REQUEST, sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.test_api import api_settings
from turnlog import Turnlog
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approve
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.group import CallToPause

THREAD = "group-visible"
ARGUMENTS = {"q": "billing\u202e"}  # a bidi override, to be marked
DEPLOY = approval_request("search", ARGUMENTS)


def _checkpoint() -> TurnCheckpoint:
    """The sample turn, its call-2 searching for ``ARGUMENTS``."""
    calls = [
        ReservedCall("call-1", "ask_user", json.loads(REQUEST)),
        ReservedCall("call-2", "search", ARGUMENTS),
    ]
    asked = captured_messages(
        [{"role": "user", "content": "Deploy billing."}], "Two things.", calls
    )
    return dataclasses.replace(sample_checkpoint(THREAD), messages=asked)


def _json(cli: Cli, *args: str) -> dict[str, Any]:
    found = cli.json(*args)
    assert isinstance(found, dict)
    return found


async def _run(cli: Cli, *args: str, check: int | None = 0) -> Any:
    return await asyncio.to_thread(cli, *args, check=check)


async def test_a_group_answered_call_by_call_from_the_cli_is_held_then_resumed_and_claimed(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    settings = api_settings(bootstrap, names, tmp_path)
    env = cli_env(bootstrap, names.prefix, names.app, tmp_path)
    cli = Cli({**env, "TURNLOG_PARTITIONS": "2", "TURNLOG_KEYS_DIR": str(settings.keys_dir)})
    async with Turnlog(settings) as tl:
        worker = asyncio.create_task(tl.run_worker())
        question, approval = await tl.pause_calls(
            _checkpoint(),
            [CallToPause("call-2", APPROVE_TOOL_CALL, json.dumps(DEPLOY)), CallToPause("call-1")],
        )

        # What each call asks, in pending's JSON and table (the override marked).
        listed = _json(cli, "pending")["pending"]
        asks = {row["call"]: row for row in listed}
        assert asks["call-1"]["asks"] == "ask_user: Which region? [eu / us]"
        assert (asks["call-2"]["tool"], asks["call-2"]["arguments"]) == (
            "search",
            '{"q": "billing⟨U+202E⟩"}',
        )
        table = cli.with_env(COLUMNS="200")("pending").stdout  # one line a call
        assert 'approve search {"q": "billing⟨U+202E⟩"}' in table and "\u202e" not in table

        # --approve decides approvals only, and instead of --response: one line each, exit 2.
        refused = cli("answer", "--thread", THREAD, "--call", "call-1", "--approve", check=2)
        assert "this one asks ask_user: answer it with --response JSON" in refused.stderr
        twice = cli("answer", "--thread", THREAD, "--approve", "--response", "{}", check=2)
        assert "answer takes --response JSON or one of --approve" in twice.stderr
        assert len(refused.lines) == len(twice.lines) == 1

        # The question first: held, waiting on call-2.
        held = await _run(
            cli, "answer", "--thread", THREAD, "--call", "call-1", "--response",
            json.dumps(ANSWER), "--wait", "--wait-timeout", "45", "--json",
        )  # fmt: skip
        first = json.loads(held.stdout)
        assert first["outcome"] == {
            "resumed": False,
            "held": True,
            "thread_id": THREAD,
            "waiting": ["call-2"],
        }
        outcome = await tl.outcome(first["answer_id"], thread_id=THREAD, timeout=45)
        assert outcome.held is not None and outcome.resumed is None
        assert outcome.accepted and outcome.waiting == ("call-2",)
        shown = _json(cli, "show", THREAD)["latest"]
        assert shown["state"] == "held" and shown["claim"] is None
        assert [(c["call"], c["state"]) for c in shown["calls"]] == [
            ("call-1", "held"),
            ("call-2", "pending"),
        ]
        assert [row["call"] for row in _json(cli, "pending")["pending"]] == ["call-2"]

        # The approval, reached by --thread --call and decided with --approve.
        resumed = await _run(
            cli, "answer", "--thread", THREAD, "--call", "call-2", "--approve", "--wait",
            "--wait-timeout", "45",
        )  # fmt: skip
        assert resumed.stdout.splitlines()[-1].startswith(f"resumed thread {THREAD}")
        outcome = await tl.outcome(first["answer_id"], thread_id=THREAD, timeout=45)
        assert outcome.resumed is not None and outcome.held is None
        [held_call, approved] = outcome.resumed.answers
        assert held_call["answer_id"] == first["answer_id"]
        assert json.loads(str(approved["response_json"])) == approve("search", ARGUMENTS)
        shown = _json(cli, "show", THREAD)["latest"]
        assert shown["state"] == "resumed"
        assert [c["state"] for c in shown["calls"]] == ["resumed", "resumed"]
        printed = cli("show", THREAD).stdout
        assert "held" not in printed and "approve search" in printed
        trail = cli("trail", THREAD).stdout
        assert "ask_user: Which region? [eu / us] -- call call-1" in trail
        assert 'approve search {"q": "billing⟨U+202E⟩"} -- call call-2' in trail

        # Claimed, not said done: the holder is visible in show, pending and status.
        claim = await tl.continue_turn(question.token, claimant="agent-a", timeout=45)
        assert claim.turn.answer_id == outcome.resumed.answer_id
        shown = _json(cli, "show", THREAD)["latest"]
        assert shown["claim"]["claimant"] == "agent-a"
        assert shown["claim"]["state"] == "claimed"
        assert shown["claim"]["claim_id"] == claim.claim_id
        line = f"checkpoint cp-1 resumed: claimed by agent-a at {shown['claim']['claimed_at']}"
        assert f"{line}, not finished (claim {claim.claim_id})" in cli("show", THREAD).stdout
        [open_claim] = _json(cli, "pending")["claimed_not_finished"]
        assert (open_claim["thread_id"], open_claim["claimant"]) == (THREAD, "agent-a")
        assert "claimed by agent-a" in cli("pending").stdout
        status = _json(cli, "status")
        assert status["claimed_not_finished"] == 1
        assert status["oldest_claimed_not_finished"]["claim_id"] == claim.claim_id
        assert "retake=True" in cli("status").stdout

        await claim.done()
        shown = _json(cli, "show", THREAD)["latest"]
        assert shown["claim"]["state"] == "finished"
        assert "continued by agent-a" in cli("show", THREAD).stdout
        assert _json(cli, "pending")["claimed_not_finished"] == []
        assert _json(cli, "status")["claimed_not_finished"] == 0
        trail = [line.split()[1] for line in cli("trail", THREAD).stdout.splitlines()]
        assert trail[-2:] == ["claimed", "finished"], trail
        assert approval.token_id != question.token_id
    assert worker.exception() is None
