"""``turnlog inbox token`` and the inbox verb's refusals that need no broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnlog.cli import app
from turnlog.cli import inbox as inbox_cli
from turnlog.inbox.auth import Viewer, ViewerTokens, viewer_keyring


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_token_mints_a_viewer_token_creating_the_viewer_key_once(tmp_path: Path) -> None:
    keys = str(tmp_path / "keys")
    code, out, err = run("--keys-dir", keys, "inbox", "token", "--name", "alice",
                         "--scope", "tenant-a", "--scope", "tenant-b")  # fmt: skip
    assert (code, err) == (0, "")
    viewers = ViewerTokens(viewer_keyring(tmp_path / "keys" / "viewers"))
    assert viewers.verify(out.strip()) == Viewer(
        "alice", frozenset({"tenant-a", "tenant-b"}), "turnlog-inbox"
    )
    code, again, _ = run("--keys-dir", keys, "inbox", "token", "--name", "bob", "--scope", "*")
    assert code == 0 and viewers.verify(again.strip()) == Viewer(
        "bob", frozenset({"*"}), "turnlog-inbox"
    )
    other = ViewerTokens(viewer_keyring(tmp_path / "keys" / "viewers"), issuer="x", audience="x")
    assert other.verify(again.strip()) is None  # another inbox's issuer


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--name", "a"], 2, "--scope"),
        (["--name", "a", "--scope", "x", "--hours", "0"], 2, "--hours must be above 0"),
        (["--name", " ", "--scope", "x"], 2, "needs a name"),
    ],
)
def test_token_refuses_in_one_line(tmp_path: Path, args: list[str], code: int, said: str) -> None:
    got, _, err = run("--keys-dir", str(tmp_path), "inbox", "token", *args)
    assert got == code and said in err
    if code == 2 and "Usage" not in err:
        assert len(err.strip().splitlines()) == 1


def test_serving_without_the_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inbox_cli, "_EXTRA_MODULES", ("starlette", "no_such_module_for_inbox"))
    code, _, err = run("inbox")
    assert code == 1
    assert err.strip() == f"error: {inbox_cli.EXTRA_MISSING}"
    assert "pip install 'turnlog[inbox]'" in err


def test_serving_refuses_a_bad_port() -> None:
    code, _, err = run("inbox", "--port", "70000")
    assert code == 2 and "--port must be 0..65535" in err


def test_turnlog_and_its_command_import_without_the_extra() -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'starlette', 'uvicorn', 'jinja2', 'multipart'}:\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import turnlog, turnlog.cli, turnlog.inbox.auth, turnlog.inbox.views\n"
        "print(sorted(m for m in sys.modules if m.startswith(('starlette', 'uvicorn'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocker], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_the_inbox_room_keeps_its_rules() -> None:
    """ARCHITECTURE.md's row: the web stack only in app/server/oidc_flow's own imports, and the
    room imported by nothing outside it but the inbox verb."""
    from tests.unit.test_architecture import PACKAGE, _imports, _modules

    web = {"starlette", "uvicorn", "jinja2", "multipart"}
    on_web, on_inbox = set(), set()
    for name, path in _modules().items():
        for imported, _ in _imports(path):
            if imported.split(".")[0] in web:
                on_web.add(name)
            if imported.startswith("turnlog.inbox") and not name.startswith("turnlog.inbox"):
                on_inbox.add(name)
    assert on_web == {"turnlog.inbox.app", "turnlog.inbox.server", "turnlog.inbox.oidc_flow"}
    assert on_inbox == {"turnlog.cli.inbox"}
    assert (PACKAGE / "inbox" / "templates" / "base.html").is_file()


def test_serving_checks_the_provider_settings_first(tmp_path: Path) -> None:
    code, _, err = run("--keys-dir", str(tmp_path), "inbox", "--oidc-issuer", "http://sso.example")
    assert code == 2 and "--oidc-issuer='http://sso.example': must be an https:// URL" in err
    bad_map = ("--oidc-issuer", "https://sso.example", "--oidc-scope-map", "groups")
    code, _, err = run("--keys-dir", str(tmp_path), "inbox", *bad_map)
    assert code == 2 and "--oidc-scope-map='groups': is not a JSON object" in err
    code, out, _ = run("inbox", "--help")
    assert code == 0 and "TURNLOG_INBOX_OIDC_ISSUER" in " ".join(out.split())
