"""``turnlog inbox`` set up for the team's OpenID Connect provider by its ``TURNLOG_INBOX_OIDC_*``
variables alone, no viewer keys, against the real broker: a provider access token is a viewer
as a ``Bearer``, and a sign-in through the code flow with PKCE (followed here over HTTP as a
browser would) ends in a session that shows the viewer's list. The provider is the local one of
:mod:`tests.oidc_provider` (its docstring says why not a packaged one)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import uuid
from pathlib import Path

import httpx

from tests.oidc_provider import LocalProvider, serve_provider
from turnlog import write_keypair
from turnlog.projections.store import Store

BIN = Path(sys.executable).parent


async def test_the_inbox_verb_signs_in_at_the_provider(bootstrap: str, tmp_path: Path) -> None:
    write_keypair(tmp_path / "keys", "inbox-oidc")
    Store.open(tmp_path / "state" / "projection").close()
    (tmp_path / "secret").write_text("s3cret-of-the-inbox\n")
    users = {"alice": {"roles": ["inbox-operators"]}}
    with serve_provider(LocalProvider(users=users)) as idp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLOG_")}
        env.update(
            TURNLOG_BOOTSTRAP_SERVERS=bootstrap,
            TURNLOG_TOPIC_PREFIX=f"oidc{uuid.uuid4().hex[:8]}.",
            TURNLOG_STATE_DIR=str(tmp_path / "state"),
            TURNLOG_KEYS_DIR=str(tmp_path / "keys"),
            TURNLOG_INBOX_OIDC_ISSUER=idp.issuer,
            TURNLOG_INBOX_OIDC_CLIENT_ID=idp.client_id,
            TURNLOG_INBOX_OIDC_CLIENT_SECRET_FILE=str(tmp_path / "secret"),
            TURNLOG_INBOX_OIDC_AUDIENCE=idp.api_audience,
            TURNLOG_INBOX_OIDC_SCOPES_CLAIM="roles",
            TURNLOG_INBOX_OIDC_SCOPE_MAP=json.dumps({"inbox-operators": "*"}),
            TURNLOG_INBOX_OIDC_NAME="Local IdP",
            PYTHONUNBUFFERED="1",
            COLUMNS="200",
        )
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "turnlog"), "inbox", "--port", "0",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        assert proc.stdout is not None
        seen: list[str] = []
        try:
            while not (found := re.search(r"inbox on (http://\S+)/ reading", "".join(seen))):
                line = await asyncio.wait_for(proc.stdout.readline(), 60)
                assert line, "the inbox ended early:\n" + "".join(seen)
                seen.append(line.decode())
            url = found.group(1)
            idp.redirect_uris.append(f"{url}/login/callback")
            bearer = {"Authorization": f"Bearer {idp.token_for('alice')}"}
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                page = await http.get("/", headers=bearer)
                assert (
                    page.status_code == 200 and "Signed in as <strong>alice</strong>" in page.text
                )
                assert "Sign in with Local IdP" in (await http.get("/login")).text
                going = await http.get("/login/provider")
                assert going.status_code == 303
                params = dict(httpx.URL(going.headers["location"]).params)
                async with httpx.AsyncClient() as browser_at_idp:
                    back = await browser_at_idp.post(
                        f"{idp.issuer}/authorize", data={**params, "username": "alice"}
                    )
                assert back.status_code == 302
                done = await http.get(back.headers["location"])
                assert done.status_code == 200 and "Signed in" in done.text
                listed = await http.get("/")
                assert listed.status_code == 200 and "Waiting for you" in listed.text
            proc.send_signal(signal.SIGINT)
            rest = await asyncio.wait_for(proc.stdout.read(), 60)
            assert await proc.wait() == 0, "".join(seen) + rest.decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
