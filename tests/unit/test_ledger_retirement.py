"""The bounded ledger: a row is retired only once its token can no longer be spent.

The rule (``contracts/ledger.py``) is checked against the verifier itself: whatever the window,
leeway and margin, a token whose row is retirable is refused by the clock. The store's side: a
spent pause is found by deadline in the spent index, a retired row leaves the ledger and that
index, the expiry sweep does not expire its pause again, and a store rebuilt from the same
records in another order holds the same content.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.contracts.ledger import retirable, retire_before_ms
from turnlog.contracts.refusals import RefusalReason, Refused
from turnlog.projections import layout
from turnlog.projections.batch import Batch
from turnlog.projections.store import Store
from turnlog.tokens import Keyring, PauseClaims, TokenIssuer, TokenVerifier, generate_ed25519

PRIVATE, _ = generate_ed25519("key-r")
RING = Keyring.ed25519("key-r", PRIVATE)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def token_expiring(expires_at: datetime) -> str:
    claims = PauseClaims(
        token_id="tok-r", scope_hash="s", session_id="sess", run_id="run", tool_call_id="call",
        interrupt_id="int", thread_id="t", checkpoint_id="cp", interaction="ask_user",
        request_hash="ab" * 32, issued_at=T0, not_before=T0, expires_at=expires_at,
    )  # fmt: skip
    return TokenIssuer(RING, issuer="i", audience="a").issue(claims)


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(min_value=1, max_value=10**6),
    leeway=st.integers(min_value=0, max_value=600),
    keep=st.integers(min_value=0, max_value=10**6),
    after=st.integers(min_value=-(10**7), max_value=10**7),
)
def test_a_retirable_row_s_token_is_refused_by_the_clock(
    window: int, leeway: int, keep: int, after: int
) -> None:
    """The law the retirement rests on: retirable at ``now`` implies refused at ``now`` by the
    window (``token_expired``), before any ledger could be read."""
    expires_at = T0 + timedelta(seconds=window)
    now = expires_at + timedelta(milliseconds=after)
    now_ms = int(now.timestamp() * 1000)
    exp_ms = int(expires_at.timestamp() * 1000)
    if not retirable(exp_ms, now_ms, leeway * 1000, keep * 1000):
        return
    verifier = TokenVerifier(RING, issuer="i", audience="a", leeway=timedelta(seconds=leeway))
    with pytest.raises(Refused) as refused:
        verifier.verify(token_expiring(expires_at), now)
    assert refused.value.reason is RefusalReason.TOKEN_EXPIRED


def test_the_line_keeps_a_row_through_the_leeway_and_the_margin() -> None:
    exp = 1_000_000
    assert not retirable(exp, exp + 5_000, 5_000, 0)  # the verifier still accepts at exp + leeway
    assert retirable(exp, exp + 5_001, 5_000, 0)
    assert not retirable(exp, exp + 65_000, 5_000, 60_000)
    assert retirable(exp, exp + 65_001, 5_000, 60_000)
    assert retire_before_ms(10, 5, 60) == 0  # never below the epoch
    with pytest.raises(ValueError, match="never negative"):
        retire_before_ms(10, -1, 0)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "db") as opened:
        yield opened


def spend(b: Batch, thread: str, token: str, exp: int) -> None:
    b.put_pause(thread, f"cp-{token}", 1, f"{thread}/{token}".encode(), token_id=token,
                expires_at_ms=exp)  # fmt: skip
    b.put_consumption(thread, token, "resumed", f"answer-{token}")


def family(store: Store, name: str) -> list[bytes]:
    return [key for key, _ in store._scan(name, b"", None)]


def test_spent_pauses_are_found_by_deadline_and_retired_rows_leave_the_store(
    store: Store,
) -> None:
    with store.batch() as b:
        spend(b, "t", "old", exp=1_000)
        spend(b, "t", "new", exp=9_000)
        b.put_pause("t", "cp-open", 2, b"t/open", token_id="open", expires_at_ms=2_000)
    assert [p.token_id for p in store.retirable(5_000)] == ["old"]  # not "new", not "open"
    assert len(family(store, layout.SPENT)) == 2
    assert [p.token_id for p in store.expired(10_000)] == ["open"]

    with store.batch() as b:
        b.delete_consumption("t", "old")  # the owner's tombstone, applied after its commit
    assert store.ledger("old") is None and store.ledger("new") is not None
    assert [p.token_id for p in store.retirable(10_000)] == ["new"]
    assert len(family(store, layout.LEDGER)) == 1
    assert len(family(store, layout.THREAD_TOKENS)) == 1
    # The retired row's pause is not expired again: the sweep starts at the retirement line.
    line = 5_000
    assert [p.token_id for p in store.expired(10_000, line)] == []
    assert sorted(p.token_id for p in store.expired(10_000)) == ["old", "open"]  # below the line


def test_a_store_rebuilt_after_retirement_has_the_same_content(tmp_path: Path) -> None:
    """Live: pause, consumption, then its tombstone. Rebuilt: the compacted topics as a
    rebuild reads them -- the tombstone may come before the pause, or the row be gone."""
    with Store.open(tmp_path / "live") as live, Store.open(tmp_path / "rebuilt") as rebuilt:
        with live.batch() as b:
            spend(b, "t", "old", exp=1_000)
        with live.batch() as b:
            b.delete_consumption("t", "old")
        with rebuilt.batch() as b:
            b.delete_consumption("t", "old")  # consumptions[p] applied first: nothing there
            b.put_pause("t", "cp-old", 1, b"t/old", token_id="old", expires_at_ms=1_000)
        assert live.digest() == rebuilt.digest()
        assert rebuilt.ledger("old") is None
        assert list(rebuilt.retirable(10_000)) == []
        assert list(rebuilt.expired(10_000, 5_000)) == []
