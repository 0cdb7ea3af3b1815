"""Viewer tokens and CSRF tokens: who may look at the inbox, and that a POST came from its page."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from turnlog.errors import ConfigurationError
from turnlog.inbox.auth import ALL_SCOPES, Csrf, SignOuts, Viewer, ViewerTokens, viewer_keyring
from turnlog.tokens import Keyring, generate_ed25519

NOW = datetime.now(UTC)


def _b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def tokens(kid: str = "v1", **kw: str) -> ViewerTokens:
    return ViewerTokens(Keyring.ed25519(kid, generate_ed25519(kid)[0]), **kw)


def test_a_minted_token_names_the_viewer_and_their_scopes() -> None:
    viewers = tokens()
    token = viewers.mint("alice", ["tenant-a", "tenant-b", ""], ttl=timedelta(hours=1), now=NOW)
    viewer = viewers.verify(token)
    assert viewer == Viewer("alice", frozenset({"tenant-a", "tenant-b"}), "turnlog-inbox")
    assert viewer.identity == ("turnlog-inbox", "alice", ("tenant-a", "tenant-b"))
    assert viewer.expires_at == datetime.fromtimestamp(
        int((NOW + timedelta(hours=1)).timestamp()), UTC
    )
    assert viewer.may_answer("tenant-a") and not viewer.may_answer("tenant-c")
    assert Viewer("ops", frozenset({ALL_SCOPES})).may_answer("anything")


@pytest.mark.parametrize(
    "forge",
    [
        "another key under the same kid",
        "another issuer",
        "expired",
        "no scopes",
        "alg none",
        "HS256 with the public key",
        "not a jwt",
        "unknown kid",
    ],
)
def test_anything_but_a_valid_viewer_token_is_nobody(forge: str) -> None:
    viewers = tokens()
    if forge == "another key under the same kid":
        token = tokens().mint("mallory", ["*"], ttl=timedelta(hours=1), now=NOW)
    elif forge == "another issuer":
        token = tokens(issuer="elsewhere", audience="elsewhere").mint(
            "m", ["*"], ttl=timedelta(hours=1), now=NOW
        )
        viewers = ViewerTokens(viewers.keyring)
    elif forge == "expired":
        token = viewers.mint("m", ["*"], ttl=timedelta(seconds=1), now=NOW - timedelta(hours=1))
    elif forge == "no scopes":
        key = viewers.keyring.signing_key()
        claims = {"iss": viewers.issuer, "aud": viewers.audience, "sub": "m", "iat": 0,
                  "exp": int((NOW + timedelta(hours=1)).timestamp()), "scopes": []}  # fmt: skip
        token = jwt.encode(claims, key.signing, algorithm="EdDSA", headers={"kid": "v1"})  # type: ignore[arg-type]
    elif forge == "alg none":
        claims = {"iss": viewers.issuer, "aud": viewers.audience, "sub": "m", "iat": 0,
                  "exp": int((NOW + timedelta(hours=1)).timestamp()), "scopes": ["*"]}  # fmt: skip
        token = jwt.encode(claims, None, algorithm="none", headers={"kid": "v1"})
    elif forge == "HS256 with the public key":
        public_pem = viewers.keyring.signing_key().verifying.public_bytes(  # type: ignore[union-attr]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        claims = {"iss": viewers.issuer, "aud": viewers.audience, "sub": "m", "iat": 0,
                  "exp": int((NOW + timedelta(hours=1)).timestamp()), "scopes": ["*"]}  # fmt: skip
        head = _b64({"alg": "HS256", "kid": "v1", "typ": "JWT"}) + "." + _b64(claims)
        mac = hmac.new(public_pem, head.encode(), hashlib.sha256).digest()
        token = head + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    elif forge == "not a jwt":
        token = "hello"
    else:
        token = tokens(kid="v2").mint("m", ["*"], ttl=timedelta(hours=1), now=NOW)
    assert viewers.verify(token) is None


def test_minting_refuses_what_would_be_useless() -> None:
    viewers = tokens()
    with pytest.raises(ConfigurationError, match="scope"):
        viewers.mint("alice", [], ttl=timedelta(hours=1), now=NOW)
    with pytest.raises(ConfigurationError, match="name"):
        viewers.mint(" ", ["a"], ttl=timedelta(hours=1), now=NOW)
    with pytest.raises(ConfigurationError, match="positive"):
        viewers.mint("alice", ["a"], ttl=timedelta(0), now=NOW)
    verifying_only = ViewerTokens(Keyring([viewers.keyring.signing_key()]))
    with pytest.raises(ConfigurationError, match="only verifies"):
        verifying_only.mint("alice", ["a"], ttl=timedelta(hours=1), now=NOW)


def test_the_viewer_keyring_is_created_only_when_asked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="turnlog inbox token"):
        viewer_keyring(tmp_path / "viewers")
    ring = viewer_keyring(tmp_path / "viewers", create=True)
    assert ring.signing_kid == "viewer-1"
    assert sorted(p.name for p in (tmp_path / "viewers").iterdir()) == [
        "viewer-1.private.pem",
        "viewer-1.public.pem",
    ]
    again = viewer_keyring(tmp_path / "viewers", create=True)  # kept, never replaced
    token = ViewerTokens(ring).mint("a", ["x"], ttl=timedelta(hours=1), now=NOW)
    assert ViewerTokens(again).verify(token) == Viewer("a", frozenset({"x"}), "turnlog-inbox")


def test_a_csrf_token_is_bound_to_its_session_and_secret() -> None:
    csrf = Csrf(b"k" * 32)
    token = csrf.token("session-1")
    assert csrf.check("session-1", token)
    assert not csrf.check("session-2", token)
    assert not csrf.check("session-1", None)
    assert not csrf.check("", csrf.token(""))
    assert not csrf.check("session-1", token[:-1] + ("0" if token[-1] != "0" else "1"))
    assert not Csrf(b"j" * 32).check("session-1", token)
    assert Csrf().token("s") != Csrf().token("s")  # a fresh secret per running inbox


def test_a_sign_out_holds_until_the_credential_expires_or_signs_in_again() -> None:
    now = [NOW]
    outs = SignOuts(lambda: now[0])
    viewer = Viewer("a", frozenset({"x"}), expires_at=NOW + timedelta(minutes=5))
    outs.sign_out("token-a", viewer)
    outs.sign_out("token-b", Viewer("b", frozenset({"x"})))  # the hook says no expiry
    assert "token-a" in outs and "token-b" in outs and "token-c" not in outs
    outs.sign_in("token-b")
    assert "token-b" not in outs
    now[0] = NOW + timedelta(minutes=6)  # past token-a's expiry: nothing left to refuse
    assert "token-a" not in outs
