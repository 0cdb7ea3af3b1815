"""``turnlog inbox --demo`` as a newcomer runs it (``make inbox-demo``), against the real broker:
it prints where to go and how to log in, the page lists the demo viewer's three pauses (not the
other tenant's), an answer given there resumes its turn (the stand-in agent prints it), and
Ctrl-C stops it cleanly, deleting the topics it made."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx

from turnlog.kafka.topics import admin_client
from turnlog.settings import Settings

BIN = Path(sys.executable).parent


async def _line(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> re.Match[str]:
    while True:
        raw = await stream.readline()
        if not raw:
            raise AssertionError("the demo ended early:\n" + "".join(seen))
        line = raw.decode()
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found


async def test_the_inbox_demo_serves_answers_and_cleans_up(bootstrap: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLOG_")}
    env.update(TURNLOG_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1", COLUMNS="200")
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "turnlog"), "inbox", "--demo", "--port", "0",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        prefix = (
            await asyncio.wait_for(_line(proc.stdout, r"topic prefix (\S+)\.$", seen), 90)
        ).group(1)
        link = await asyncio.wait_for(
            _line(proc.stdout, r"link: (\S+)/login#token=(\S+)", seen), 30
        )
        url, token = link.group(1), link.group(2)
        bearer = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=url, headers=bearer, timeout=30) as http:
            page = (await http.get("/")).text
            assert "3 waiting" in page
            assert "Deploy the billing service to which region?" in page
            assert "approve issue_refund" in page and "globex" not in page
            refund = re.search(r'href="/pause/([0-9a-f]{32})">approve issue_refund', page)
            assert refund is not None
            detail = (await http.get(f"/pause/{refund.group(1)}")).text
            csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', detail)
            assert csrf is not None
            sent = await http.post(
                f"/pause/{refund.group(1)}/answer",
                data={"csrf": csrf.group(1), "decision": "approve"},
                headers={"Accept": "application/json"},
            )
            assert sent.status_code == 202, sent.text
            answer_id = sent.json()["answer_id"]
            outcome = await http.get(
                f"/answers/{answer_id}?wait=25", headers={"Accept": "application/json"}
            )
            assert outcome.json()["state"] == "resumed"
        said = await asyncio.wait_for(
            _line(proc.stdout, r"^resumed (refund-a1042-\S+): (.*)", seen), 30
        )
        assert "approved" in said.group(2)
        proc.send_signal(signal.SIGINT)
        rest = await asyncio.wait_for(proc.stdout.read(), 60)
        assert await proc.wait() == 0, "".join(seen) + rest.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    admin = admin_client(Settings(bootstrap_servers=bootstrap))
    await admin.start()
    try:
        left = [t for t in await admin.list_topics() if t.startswith(prefix)]
    finally:
        await admin.close()
    assert left == []
