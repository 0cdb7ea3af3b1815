"""Pause tokens: round trips, hostile tokens refused by name, key rotation, key loading."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.contracts.refusals import RefusalReason, Refused
from turnlog.errors import ConfigurationError
from turnlog.tokens import (
    ENV_HS256_SECRET,
    ENV_SIGNING_KEY_PEM,
    ENV_SIGNING_KID,
    Keyring,
    PauseClaims,
    TokenIssuer,
    TokenKey,
    TokenVerifier,
    generate_ed25519,
    peek_claims,
    write_keypair,
)

ISSUER = "turnlog"
AUDIENCE = "turnlog-answers"
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)
LEEWAY = timedelta(seconds=5)
SECRET = b"s" * 32

PRIVATE_A, PUBLIC_A = generate_ed25519("key-a")
PRIVATE_B, PUBLIC_B = generate_ed25519("key-b")
RING_A = Keyring.ed25519("key-a", PRIVATE_A)


def claims(**changes: Any) -> PauseClaims:
    values: dict[str, Any] = {
        "token_id": "tok-1",
        "scope_hash": "scope-tenant-a",
        "session_id": "sess-1",
        "run_id": "run-1",
        "tool_call_id": "call-1",
        "interrupt_id": "int-1",
        "thread_id": "thread-1",
        "checkpoint_id": "cp-1",
        "interaction": "ask_user",
        "request_hash": "ab" * 32,
        "issued_at": T0,
        "not_before": T0,
        "expires_at": T0 + timedelta(days=1),
    }
    values.update(changes)
    return PauseClaims(**values)


def issuer(ring: Keyring = RING_A, **kw: str) -> TokenIssuer:
    return TokenIssuer(ring, issuer=kw.get("issuer", ISSUER), audience=kw.get("audience", AUDIENCE))


def verifier(ring: Keyring = RING_A) -> TokenVerifier:
    return TokenVerifier(ring, issuer=ISSUER, audience=AUDIENCE, leeway=LEEWAY)


def refused_as(
    token: str, reason: RefusalReason, *, ring: Keyring = RING_A, now: datetime = NOW
) -> None:
    with pytest.raises(Refused) as caught:
        verifier(ring).verify(token, now)
    assert caught.value.reason is reason, caught.value


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], payload: dict[str, Any], signature: bytes | None = None) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    return f"{signing_input}.{b64(signature or b'')}"


def payload_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


TOKEN = issuer().issue(claims())


# -- round trips ----------------------------------------------------------------------------


def test_issued_token_verifies_to_the_same_claims() -> None:
    assert verifier().verify(TOKEN, NOW) == claims()


def test_pause_location_claims_round_trip_and_are_optional() -> None:
    located = claims(pause_partition=3, pause_offset=41)
    assert verifier().verify(issuer().issue(located), NOW) == located
    assert "pause_offset" not in payload_of(TOKEN)
    assert verifier().verify(TOKEN, NOW).pause_offset is None


def test_header_names_the_key_and_its_algorithm() -> None:
    header = jwt.get_unverified_header(TOKEN)
    assert header["kid"] == "key-a"
    assert header["alg"] == "EdDSA"


def test_claims_are_whole_utc_seconds_and_must_be_aware() -> None:
    c = claims(issued_at=T0.replace(microsecond=999), not_before=T0.replace(microsecond=5))
    assert c.issued_at == T0
    with pytest.raises(ValueError):
        claims(issued_at=T0.replace(tzinfo=None))
    with pytest.raises(ValueError):
        claims(expires_at=T0)
    with pytest.raises(ValueError):
        claims(tool_call_id="", interrupt_id="")


def test_answered_call_falls_back_to_the_interrupt() -> None:
    assert claims().answered_call_id == "call-1"
    assert claims(tool_call_id="").answered_call_id == "int-1"


def test_hs256_keyring_round_trips() -> None:
    ring = Keyring.hs256("shared", SECRET)
    token = issuer(ring).issue(claims())
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    assert verifier(ring).verify(token, NOW) == claims()


def test_short_hs256_secret_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        Keyring.hs256("shared", b"short")


# -- the window, against the passed-in clock ---------------------------------------------------


def test_expired_token_is_refused() -> None:
    refused_as(TOKEN, RefusalReason.TOKEN_EXPIRED, now=T0 + timedelta(days=1) + LEEWAY)


def test_expiry_allows_the_leeway() -> None:
    edge = T0 + timedelta(days=1) + LEEWAY - timedelta(seconds=1)
    assert verifier().verify(TOKEN, edge) == claims()


def test_token_not_yet_valid_is_refused() -> None:
    refused_as(TOKEN, RefusalReason.TOKEN_NOT_YET_VALID, now=T0 - LEEWAY - timedelta(seconds=1))


def test_not_before_allows_the_leeway() -> None:
    assert verifier().verify(TOKEN, T0 - LEEWAY) == claims()


def test_naive_now_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        verifier().verify(TOKEN, NOW.replace(tzinfo=None))


# -- hostile tokens ------------------------------------------------------------------------------


def test_alg_none_is_refused() -> None:
    token = forge({"alg": "none", "kid": "key-a", "typ": "JWT"}, payload_of(TOKEN))
    refused_as(token, RefusalReason.TOKEN_INVALID)


def test_hs256_signed_with_the_raw_public_key_is_refused() -> None:
    public = serialization.load_pem_public_key(PUBLIC_A)
    secret = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    token = jwt.encode(payload_of(TOKEN), secret, algorithm="HS256", headers={"kid": "key-a"})
    refused_as(token, RefusalReason.TOKEN_INVALID)


def test_hs256_signed_with_the_public_key_pem_is_refused() -> None:
    header = {"alg": "HS256", "kid": "key-a", "typ": "JWT"}
    signing_input = (
        f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload_of(TOKEN)).encode())}"
    )
    mac = hmac.new(PUBLIC_A, signing_input.encode(), hashlib.sha256).digest()
    refused_as(f"{signing_input}.{b64(mac)}", RefusalReason.TOKEN_INVALID)


def test_eddsa_token_under_an_hs256_kid_is_refused() -> None:
    ring = Keyring.hs256("key-a", SECRET)
    refused_as(TOKEN, RefusalReason.TOKEN_INVALID, ring=ring)


def test_payload_changed_after_signing_is_refused() -> None:
    header, _, signature = TOKEN.split(".")
    changed = {**payload_of(TOKEN), "thread_id": "thread-of-someone-else"}
    refused_as(
        f"{header}.{b64(json.dumps(changed).encode())}.{signature}", RefusalReason.TOKEN_INVALID
    )


def test_token_from_another_keyring_with_the_same_kid_is_refused() -> None:
    other = Keyring.ed25519("key-a", PRIVATE_B)
    refused_as(issuer(other).issue(claims()), RefusalReason.TOKEN_INVALID)


def test_unknown_kid_is_refused() -> None:
    other = Keyring.ed25519("key-b", PRIVATE_B)
    refused_as(issuer(other).issue(claims()), RefusalReason.TOKEN_UNKNOWN_KEY)


def test_token_without_kid_is_refused() -> None:
    token = jwt.encode(payload_of(TOKEN), PRIVATE_A, "EdDSA")
    refused_as(token, RefusalReason.TOKEN_INVALID)


def test_wrong_issuer_is_refused() -> None:
    refused_as(issuer(issuer="someone-else").issue(claims()), RefusalReason.TOKEN_WRONG_ISSUER)


def test_wrong_audience_is_refused() -> None:
    refused_as(issuer(audience="another-app").issue(claims()), RefusalReason.TOKEN_WRONG_AUDIENCE)


@pytest.mark.parametrize("claim", ["interaction", "thread_id", "jti", "exp", "nbf", "iat", "aud"])
def test_a_missing_claim_is_refused(claim: str) -> None:
    payload = payload_of(TOKEN)
    del payload[claim]
    key = PRIVATE_A
    refused_as(
        jwt.encode(payload, key, "EdDSA", headers={"kid": "key-a"}), RefusalReason.TOKEN_INVALID
    )


@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("thread_id", 7),
        ("exp", "tomorrow"),
        ("iat", True),
        ("pause_offset", "9"),
        ("pause_offset", -1),
    ],
)
def test_a_claim_of_the_wrong_type_is_refused(claim: str, value: Any) -> None:
    payload = {**payload_of(TOKEN), claim: value}
    key = PRIVATE_A
    refused_as(
        jwt.encode(payload, key, "EdDSA", headers={"kid": "key-a"}), RefusalReason.TOKEN_INVALID
    )


@pytest.mark.parametrize(
    "garbage", ["", "x", "a.b", "a.b.c", "...", "\u00e9.\u00e9.\u00e9", TOKEN + "."]
)
def test_garbage_is_refused_as_invalid(garbage: str) -> None:
    refused_as(garbage, RefusalReason.TOKEN_INVALID)


def test_header_kid_of_the_wrong_type_is_refused() -> None:
    header = {"alg": "EdDSA", "kid": ["key-a"], "typ": "JWT"}
    refused_as(forge(header, payload_of(TOKEN), b"x" * 64), RefusalReason.TOKEN_INVALID)


_SIGNED_LENGTH = TOKEN.rindex(".")
_STEP_ONE = {r for r in RefusalReason if r.step == 1}


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=_SIGNED_LENGTH - 1),
    replacement=st.characters(codec="utf-8"),
)
def test_any_changed_character_of_the_signed_part_is_refused(index: int, replacement: str) -> None:
    if TOKEN[index] == replacement:
        replacement = "A" if TOKEN[index] != "A" else "B"
    tampered = TOKEN[:index] + replacement + TOKEN[index + 1 :]
    try:
        verifier().verify(tampered, NOW)
    except Refused as refused:
        assert refused.reason in _STEP_ONE
    else:
        pytest.fail(f"a token changed at {index} was accepted")


# -- rotation ----------------------------------------------------------------------------------


def test_previous_key_verifies_while_in_the_ring_and_not_after() -> None:
    old_token = issuer(RING_A).issue(claims())
    rotated = RING_A.with_key(TokenKey.ed25519_private("key-b", PRIVATE_B), sign=True)
    assert rotated.signing_kid == "key-b"
    assert verifier(rotated).verify(old_token, NOW) == claims()
    new_token = issuer(rotated).issue(claims(token_id="tok-2"))
    assert jwt.get_unverified_header(new_token)["kid"] == "key-b"

    retired = rotated.without("key-a")
    refused_as(old_token, RefusalReason.TOKEN_UNKNOWN_KEY, ring=retired)
    assert verifier(retired).verify(new_token, NOW).token_id == "tok-2"


def test_the_signing_key_cannot_be_removed() -> None:
    with pytest.raises(ConfigurationError):
        RING_A.without("key-a")


def test_one_kid_with_two_keys_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        RING_A.with_key(TokenKey.ed25519_public("key-a", PUBLIC_B))


def test_verification_only_ring_cannot_issue() -> None:
    ring = Keyring([TokenKey.ed25519_public("key-a", PUBLIC_A)])
    assert verifier(ring).verify(TOKEN, NOW) == claims()
    with pytest.raises(ConfigurationError):
        issuer(ring)


# -- loading keys ----------------------------------------------------------------------------


def test_write_keypair_then_load_the_directory(tmp_path: Path) -> None:
    private, public = write_keypair(tmp_path, "k1")
    assert private.name == "k1.private.pem" and public.name == "k1.public.pem"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    ring = Keyring.from_directory(tmp_path)
    assert ring.signing_kid == "k1"
    token = issuer(ring).issue(claims())
    assert verifier(Keyring.from_directory(tmp_path)).verify(token, NOW) == claims()


def test_write_keypair_never_overwrites(tmp_path: Path) -> None:
    write_keypair(tmp_path, "k1")
    before = (tmp_path / "k1.private.pem").read_bytes()
    with pytest.raises(ConfigurationError):
        write_keypair(tmp_path, "k1")
    assert (tmp_path / "k1.private.pem").read_bytes() == before


@pytest.mark.parametrize("kid", ["", "a/b", "../up", "a.b", "x" * 65])
def test_unsafe_kids_are_refused(kid: str) -> None:
    with pytest.raises(ConfigurationError):
        generate_ed25519(kid)


def test_directory_with_several_private_keys_needs_a_signing_kid(tmp_path: Path) -> None:
    write_keypair(tmp_path, "old")
    write_keypair(tmp_path, "new")
    with pytest.raises(ConfigurationError):
        Keyring.from_directory(tmp_path)
    ring = Keyring.from_directory(tmp_path, signing_kid="new")
    assert ring.signing_kid == "new" and ring.kids == ("new", "old")


def test_directory_of_public_keys_only_verifies(tmp_path: Path) -> None:
    (tmp_path / "key-a.public.pem").write_bytes(PUBLIC_A)
    ring = Keyring.from_directory(tmp_path)
    assert ring.signing_kid is None
    assert verifier(ring).verify(TOKEN, NOW) == claims()


def test_directory_refuses_misnamed_and_mismatched_keys(tmp_path: Path) -> None:
    (tmp_path / "k.pem").write_bytes(PUBLIC_A)
    with pytest.raises(ConfigurationError):
        Keyring.from_directory(tmp_path)
    (tmp_path / "k.pem").unlink()
    (tmp_path / "k.private.pem").write_bytes(PRIVATE_A)
    (tmp_path / "k.public.pem").write_bytes(PUBLIC_B)
    with pytest.raises(ConfigurationError):
        Keyring.from_directory(tmp_path)


def test_missing_or_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        Keyring.from_directory(tmp_path / "absent")
    with pytest.raises(ConfigurationError):
        Keyring.from_directory(tmp_path)


def test_from_env_ed25519() -> None:
    ring = Keyring.from_env({ENV_SIGNING_KID: "key-a", ENV_SIGNING_KEY_PEM: PRIVATE_A.decode()})
    assert verifier(ring).verify(issuer(ring).issue(claims()), NOW) == claims()
    assert verifier(ring).verify(TOKEN, NOW) == claims()


def test_from_env_hs256() -> None:
    ring = Keyring.from_env({ENV_SIGNING_KID: "shared", ENV_HS256_SECRET: SECRET.decode()})
    assert ring.signing_key().algorithm == "HS256"


@pytest.mark.parametrize(
    "env",
    [
        {},
        {ENV_SIGNING_KEY_PEM: PRIVATE_A.decode()},
        {ENV_SIGNING_KID: "k", ENV_SIGNING_KEY_PEM: PRIVATE_A.decode(), ENV_HS256_SECRET: "s" * 32},
        {ENV_SIGNING_KID: "k", ENV_SIGNING_KEY_PEM: PUBLIC_A.decode()},
        {ENV_SIGNING_KID: "k", ENV_SIGNING_KEY_PEM: "not a pem"},
    ],
)
def test_from_env_refuses_incomplete_or_contradictory_settings(env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        Keyring.from_env(env)


def test_from_env_with_a_keys_directory(tmp_path: Path) -> None:
    write_keypair(tmp_path, "old")
    write_keypair(tmp_path, "new")
    chosen = Keyring.from_env({ENV_SIGNING_KID: "new"}, keys_dir=tmp_path)
    assert chosen.signing_kid == "new"
    own = Keyring.from_env(
        {ENV_SIGNING_KID: "key-a", ENV_SIGNING_KEY_PEM: PRIVATE_A.decode()}, keys_dir=tmp_path
    )
    assert own.signing_kid == "key-a" and own.kids == ("key-a", "new", "old")


# -- peeking -------------------------------------------------------------------------------------


def test_peek_reads_routing_claims_without_any_key() -> None:
    stranger = issuer(Keyring.ed25519("key-b", PRIVATE_B)).issue(claims(thread_id="t-9"))
    peeked = peek_claims(stranger)
    assert peeked["thread_id"] == "t-9"
    refused_as(stranger, RefusalReason.TOKEN_UNKNOWN_KEY)


def test_peek_refuses_garbage_by_name() -> None:
    with pytest.raises(Refused) as caught:
        peek_claims("not-a-token")
    assert caught.value.reason is RefusalReason.TOKEN_INVALID


@pytest.mark.parametrize("token", [None, 7, b"a.b.c", ["a", "b", "c"]])
def test_a_token_that_is_not_text_is_refused_by_name(token: Any) -> None:
    """Whatever a caller hands in (the compiled build checks annotated types on entry, so these
    entry points take any object and refuse it themselves)."""
    from turnlog.tokens import peek

    for read in (peek_claims, peek.parse_token, lambda t: peek.unverified_part(t, 0)):
        with pytest.raises(Refused) as caught:
            read(token)
        assert caught.value.reason is RefusalReason.TOKEN_INVALID
    refused_as(token, RefusalReason.TOKEN_INVALID)


# -- the Ed25519 check itself: libsodium decides as cryptography does ---------------------------

_ED_PRIVATE, _ED_PUBLIC = generate_ed25519("k1")


def _cryptography_verdict(public: Any, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        public.verify(signature, message)
    except InvalidSignature:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    message=st.binary(max_size=600),
    tamper=st.sampled_from(["none", "signature_bit", "message_bit", "random", "length"]),
    where=st.integers(min_value=0, max_value=10_000),
    noise=st.binary(min_size=0, max_size=70),
)
def test_the_ed25519_check_gives_cryptographys_verdict(
    message: bytes, tamper: str, where: int, noise: bytes
) -> None:
    """The worker checks Ed25519 signatures through libsodium (``TokenKey.check``); for real
    signatures and every kind of tampering it must say what ``cryptography`` says."""
    private = serialization.load_pem_private_key(_ED_PRIVATE, password=None)
    key = TokenKey.ed25519_private("k1", _ED_PRIVATE)
    public = private.public_key()  # type: ignore[union-attr]
    signature = private.sign(message)  # type: ignore[union-attr, call-arg]
    if tamper == "signature_bit":
        i = where % (len(signature) * 8)
        signature = bytearray(signature)
        signature[i // 8] ^= 1 << (i % 8)
        signature = bytes(signature)
    elif tamper == "message_bit" and message:
        i = where % (len(message) * 8)
        changed = bytearray(message)
        changed[i // 8] ^= 1 << (i % 8)
        message = bytes(changed)
    elif tamper == "random":
        signature = (noise * 64)[:64] if noise else bytes(64)
    elif tamper == "length":
        signature = signature[: where % 64] if where % 2 else signature + noise[:1] + b"\x00"
    expected = _cryptography_verdict(public, signature, message)
    assert key.check(signature, message) is expected
    assert expected is (tamper == "none" or (tamper == "message_bit" and not message))


def test_a_public_only_key_checks_like_its_private_half() -> None:
    private = TokenKey.ed25519_private("k1", _ED_PRIVATE)
    public = TokenKey.ed25519_public("k1", _ED_PUBLIC)
    signature = private.signing.sign(b"input")  # type: ignore[union-attr]
    assert public.check(signature, b"input") and private.check(signature, b"input")
    assert not public.check(signature, b"other input")


def test_decoded_headers_are_shared_read_only_and_the_cache_stays_bounded() -> None:
    from turnlog.tokens import peek

    def compact(header: dict[str, Any], payload: dict[str, Any]) -> str:
        def part(value: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

        return f"{part(header)}.{part(payload)}.AAAA"

    first = peek.parse_token(compact({"alg": "EdDSA", "kid": "k1"}, {"jti": "a"}))
    again = peek.parse_token(compact({"alg": "EdDSA", "kid": "k1"}, {"jti": "b"}))
    assert first.header is again.header and again.payload == {"jti": "b"}
    with pytest.raises(TypeError):
        first.header["kid"] = "k2"  # type: ignore[index]
    for n in range(peek._HEADERS_MAX * 3):
        token = compact({"alg": "EdDSA", "kid": f"k{n}"}, {"jti": "c"})
        assert peek.parse_token(token).header["kid"] == f"k{n}"
        assert len(peek._HEADERS) <= peek._HEADERS_MAX
    # A header that does not decode is refused every time, and never kept.
    for _ in range(2):
        with pytest.raises(Refused) as refused:
            peek.parse_token("bm90IGpzb24." + compact({}, {"jti": "d"}).split(".", 1)[1])
        assert refused.value.refusal.reason is RefusalReason.TOKEN_INVALID
    assert "bm90IGpzb24" not in peek._HEADERS


def test_no_keys_says_how_to_make_one(tmp_path: Path) -> None:
    """Issue 37: a worker or an agent without keys was told what is missing, never that
    ``turnlog keys new`` makes it."""
    (tmp_path / "empty").mkdir()
    for attempt in (
        lambda: Keyring.from_env({}),
        lambda: Keyring.from_directory(tmp_path / "none"),
        lambda: Keyring.from_directory(tmp_path / "empty"),
    ):
        with pytest.raises(ConfigurationError) as caught:
            attempt()
        assert "`turnlog keys new`" in str(caught.value), caught.value
