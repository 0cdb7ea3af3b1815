"""The inbox attacked from outside (issue 29), where only a real browser or a real server shows it.

- in Chromium (the deployment of ``test_inbox_browser``: a real broker, projector, worker and
  inbox): a stale session follows its login link in; a spoofed approval and question read as
  they are (the rendered ``innerText``), and approving approves the very values shown; a hidden
  second line of a command is in sight; the page says when its session ended;
- over HTTP against the same inbox: an answer's outcome is for its sender, not a namesake of
  another tenant;
- a real uvicorn in a process of its own: 400 MB of sign-in form is refused and the process's
  peak memory does not grow (``VmHWM``), with and without a ``Content-Length``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.deployment import sample_checkpoint
from tests.integration import test_inbox_browser as browser
from tests.integration.test_inbox_browser import QUESTION, Inbox, _checkpoint, _resumed, _until
from tests.unit.test_inbox_views import SPOOFED
from turnlog.audit.trail import read_trail
from turnlog.clock import utc_now
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approved_call
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages

#: The deployment of the browser tests, one for this module.
inbox = browser.inbox

ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024
#: The section of a pause's page showing the call awaiting approval.
CALL = "section[aria-labelledby=call-h]"


def _token(inbox: Inbox, name: str, scopes: list[str], *, seconds: float = 3600) -> str:
    """A viewer token with ``seconds`` left (its window began an hour ago)."""
    ttl = timedelta(hours=1, seconds=seconds)
    return inbox.viewers.mint(name, scopes, ttl=ttl, now=utc_now() - timedelta(hours=1))


def _call(thread: str, tool: str, arguments: Any) -> TurnCheckpoint:
    """A turn paused on ``tool(arguments)`` awaiting approval."""
    call = ReservedCall("call-tool", tool, arguments)
    return dataclasses.replace(
        sample_checkpoint(thread),
        tool_call_id=call.id,
        name=APPROVE_TOOL_CALL,
        messages=captured_messages([{"role": "user", "content": "Go."}], "Calling.", [call]),
    )


async def test_a_stale_session_follows_its_login_link_into_the_inbox(inbox: Inbox) -> None:
    context = await inbox.browser.new_context()
    try:
        stale = _token(inbox, "pat", ["tenant-a"], seconds=-60)
        await context.add_cookies([{"name": "turnlog_session", "value": stale, "url": inbox.url}])
        page = await context.new_page()
        await page.goto(f"{inbox.url}/login#token={_token(inbox, 'pat', ['tenant-a'])}")
        await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
        # And pasting a token into the form, the stale cookie back in place, works alike.
        await context.add_cookies([{"name": "turnlog_session", "value": stale, "url": inbox.url}])
        await page.goto(f"{inbox.url}/login")
        await page.get_by_label("Viewer token").fill(_token(inbox, "pat", ["tenant-a"]))
        await page.get_by_role("button", name="Log in").click()
        await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
    finally:
        await context.close()


async def test_a_spoofed_approval_reads_as_it_is_and_approves_what_it_says(inbox: Inbox) -> None:
    cp = _call(inbox.thread("spoofed-transfer"), "transfer_funds", SPOOFED)
    paused = await inbox.pause(cp, approval_request("transfer_funds", SPOOFED), APPROVE_TOOL_CALL)
    question = {"questions": [{"question": "Delete the \u202etseT database?"}]}
    asked = await inbox.pause(sample_checkpoint(inbox.thread("spoofed-question")), question)
    context = await inbox.context(["tenant-a"])
    try:
        page = await context.new_page()
        await page.goto(f"{inbox.url}/pause/{paused.token_id}")
        shown = {}
        for row in await page.locator(CALL + " .arguments > div").all():
            shown[await row.locator("dt").inner_text()] = await row.locator("dd").inner_text()
        assert shown == {
            "to_account": "DE00 1111 ⟨U+202E⟩9999 0000",
            "amount_eur": "100⟨U+202E⟩00001",
            "recipient": "bob@⟨U+202E⟩moc.live⟨U+202C⟩.example.com",
        }
        warning = page.locator("#hidden-warning")
        await expect(warning).to_be_visible()
        await expect(warning).to_contain_text("U+202C, U+202E")
        body = await page.locator("body").inner_text()
        assert not re.search("[\u202a-\u202e\u2066-\u2069]", body)
        await page.screenshot(path=str(browser.SHOTS / "inbox-detail-spoofed.png"), full_page=True)
        # "Approve as shown" approves the real values -- which are what the page showed.
        await page.get_by_label("Approve as shown").check()
        await page.get_by_role("button", name="Send answer").click()
        await expect(page.locator("#outcome")).to_have_text(
            "sent: the agent runs the call", timeout=45_000
        )
        approved = approved_call(await _resumed(inbox, paused.token_id))
        assert approved is not None and approved["arguments"] == SPOOFED

        await page.goto(f"{inbox.url}/pause/{asked.token_id}")
        legend = await page.locator("fieldset legend .question").inner_text()
        assert legend == "Delete the ⟨U+202E⟩tseT database?"
        assert await page.title() == "Delete the ⟨U+202E⟩tseT database? · turnlog"
        await expect(page.locator("#hidden-warning")).to_contain_text("this question")
    finally:
        await context.close()


async def test_a_command_s_hidden_second_line_is_in_sight(inbox: Inbox) -> None:
    cmd = {"cmd": "ls -la\nrm -rf /"}
    cp = _call(inbox.thread("hidden-line"), "run_shell", cmd)
    paused = await inbox.pause(cp, approval_request("run_shell", cmd), APPROVE_TOOL_CALL)
    context = await inbox.context(["tenant-a"])
    try:
        page = await context.new_page()
        await page.goto(f"{inbox.url}/pause/{paused.token_id}")
        value = page.locator(CALL + " .arguments dd")
        await expect(value).to_be_visible()
        assert await value.inner_text() == "ls -la\nrm -rf /"  # rendered, nothing to unfold
        await expect(page.get_by_role("group", name="Decision on run_shell")).to_be_visible()
        await page.goto(inbox.url)
        row = page.locator(f"li.pause[data-token='{paused.token_id}']")
        await expect(row).to_contain_text("9 more characters on 1 more line")
    finally:
        await context.close()


async def test_the_page_says_when_its_session_ended(inbox: Inbox) -> None:
    context = await inbox.browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(f"{inbox.url}/login#token={_token(inbox, 'pat', ['tenant-a'], seconds=3)}")
        await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
        ended = page.locator("#session-ended")
        await expect(ended).to_be_hidden()
        await expect(ended).to_be_visible(timeout=10_000)  # the stream ended at the expiry
        await expect(ended).to_contain_text("sign in again")
    finally:
        await context.close()


async def test_an_outcome_is_for_its_sender_not_a_namesake_of_another_tenant(
    inbox: Inbox,
) -> None:
    paused = await inbox.pause(_checkpoint(inbox.thread("namesake"), "tenant-a"), QUESTION)
    json_ = {"Accept": "application/json"}

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    alice_a = _token(inbox, "alice", ["tenant-a"])
    async with httpx.AsyncClient(base_url=inbox.url, timeout=60) as http:

        async def projected() -> bool:
            shown = await http.get(f"/pause/{paused.token_id}", headers=bearer(alice_a))
            return shown.status_code == 200

        await _until(projected, "the pause to reach the inbox's projection")
        page = await http.get(f"/pause/{paused.token_id}", headers=bearer(alice_a))
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert found
        sent = await http.post(
            f"/pause/{paused.token_id}/answer",
            data={"csrf": found.group(1), "q0": "eu"},
            headers={**json_, **bearer(alice_a)},
        )
        assert sent.status_code == 202, sent.text
        answer_id = sent.json()["answer_id"]
        url = f"/answers/{answer_id}?wait=0"
        for name, scopes in (("alice", ["tenant-b"]), ("alice", ["*"]), ("bob", ["tenant-a"])):
            other = await http.get(url, headers={**json_, **bearer(_token(inbox, name, scopes))})
            assert other.status_code == 404, (name, scopes, other.text)
        # Another token of the same person and tenant (a new login) still reads it.
        again = _token(inbox, "alice", ["tenant-a"], seconds=7200)
        mine = await http.get(f"/answers/{answer_id}?wait=20", headers={**json_, **bearer(again)})
        assert mine.status_code == 200 and mine.json()["state"] in {"resumed", "waiting"}
    # The answer record names its sender as the sign-in verified them (issue 29, item 4).
    trail = await read_trail(inbox.settings, paused.thread_id, token_id=paused.token_id)
    [answered] = [e for e in trail if e.what == "answered"]
    assert (answered.answer_id, answered.answered_by) == (answer_id, "alice")
    assert answered.answered_by_issuer == "turnlog-inbox"


# -- a real server's memory under a huge sign-in body ----------------------------------------------


def _peak_kb(pid: int) -> int:
    """The process's peak resident size so far (``VmHWM``), in kB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    assert found, status
    return int(found.group(1))


@contextlib.contextmanager
def _served(tmp: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.inbox_server_proc", str(tmp)],
        cwd=ROOT,
        env={**os.environ},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("port "), line
        yield proc, int(line.split()[1])
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _attack(port: int, *, fields: int, chunked: bool) -> tuple[str, int]:
    """POST /login with ``fields`` multipart fields of 1 MB, as fast as the server takes them;
    the reply's status line and how many body bytes the server took before it stopped us."""
    head = '--B\r\nContent-Disposition: form-data; name="f{}"\r\n\r\n'
    part = b"x" * MB + b"\r\n"
    total = sum(len(head.format(n)) + len(part) for n in range(fields)) + len("--B--\r\n")
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    reply = bytearray()
    replied = threading.Event()

    def read() -> None:
        with contextlib.suppress(OSError):
            while b"\r\n" not in reply:
                got = sock.recv(4096)
                if not got:
                    break
                reply.extend(got)
        replied.set()

    reader = threading.Thread(target=read, daemon=True)
    sent = 0
    try:
        sock.sendall(
            f"POST /login HTTP/1.1\r\nHost: inbox\r\n{framing}\r\n"
            "Content-Type: multipart/form-data; boundary=B\r\n\r\n".encode()
        )
        reader.start()
        with contextlib.suppress(OSError):  # the server closing on us is the point
            for n in range(fields):
                for piece in (head.format(n).encode(), part):
                    if replied.is_set():
                        break
                    data = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece
                    sock.sendall(data)
                    sent += len(piece)
            if not replied.is_set():
                sock.sendall(b"7\r\n--B--\r\n\r\n0\r\n\r\n" if chunked else b"--B--\r\n")
        reader.join(timeout=60)
    finally:
        sock.close()
    return bytes(reply).split(b"\r\n", 1)[0].decode(errors="replace"), sent


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_huge_sign_in_body_is_refused_and_memory_does_not_grow(
    tmp_path: Path, chunked: bool
) -> None:
    """The attack of issue 29: 400 fields of 1 MB, unauthenticated, to ``POST /login`` (it took
    the inbox from 88 MB to 482 MB). Refused with 413, and the server's peak memory stays put."""
    with _served(tmp_path) as (proc, port):
        httpx.get(f"http://127.0.0.1:{port}/login").raise_for_status()  # warmed up
        before = _peak_kb(proc.pid)
        status, sent = _attack(port, fields=400, chunked=chunked)
        after = _peak_kb(proc.pid)
        print(
            f"\n{'chunked' if chunked else 'content-length'}: {status!r}, sent {sent / MB:.1f} MB"
            f" before the server stopped it; peak RSS {before / 1024:.1f} MB -> "
            f"{after / 1024:.1f} MB"
        )
        assert status.startswith("HTTP/1.1 413 "), (status, sent)
        assert after - before < 16 * 1024, (before, after)
        # Still serving, and a sign-in of its size still works.
        assert httpx.get(f"http://127.0.0.1:{port}/login").status_code == 200
