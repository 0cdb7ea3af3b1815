"""Committed bytes: an accidental change to the wire format fails here, not in production.

The files under ``tests/golden/`` were written once by ``tests/golden/generate.py``, which this
test never runs. Regenerate them only for a deliberate schema change -- and keep the old schema
in ``schemas/history/`` so the old bytes stay readable.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form

from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.events import (
    AnswerRejected,
    AnswerSubmitted,
    AskUserAnswered,
    ContinuationRequested,
    PauseExpired,
    PauseRecorded,
    TokenConsumed,
    TurnResumed,
)
from turnlog.wire import codec
from turnlog.wire.records import WIRE_TYPES, WireValue, to_record

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"

_AT = datetime(2025, 5, 17, 9, 30, 15, 250000, tzinfo=UTC)
_LATER = datetime(2025, 5, 18, 9, 30, 15, 250000, tzinfo=UTC)

_MESSAGES = captured_messages(
    [
        {"role": "system", "content": "You book trips."},
        {"role": "user", "content": "Zürich → Kyoto, 東京 stopover? 🚆"},
    ],
    "Two questions before I book.",
    [
        ReservedCall("call-1", "ask_user", {"question": "Window seat?", "options": ["yes", "no"]}),
        ReservedCall("call-2", "search_flights", {"from": "ZRH", "to": "KIX"}),
    ],
)

_CHECKPOINT = TurnCheckpoint(
    run_id="run-7",
    session_id="ses-3",
    thread_id="thread-42",
    checkpoint_id="cp-0001",
    scope_hash="9f2c",
    tool_call_id="call-1",
    interrupt_id="int-1",
    name="ask_user",
    prompt="Window seat?",
    messages=_MESSAGES,
    sequence=12,
    tenant_id="acme",
    created_at=_AT,
    package_version="0.1.0",
    safe_boundary=True,
)

_EVENT: dict[str, Any] = {"event_id": "ev-1", "occurred_at": _AT, "package_version": "0.1.0"}

_RESUMED = TurnResumed(
    **_EVENT,
    token_id="tok-1",
    answer_id="ans-1",
    run_id="run-7",
    session_id="ses-3",
    thread_id="thread-42",
    checkpoint_id="cp-0001",
    interrupt_id="int-1",
    tool_call_id="call-1",
    name="ask_user",
    prompt="Window seat?",
    response_json='{"selected":["yes"]}',
    history=(*_MESSAGES, {"role": "tool", "content": "yes", "tool_call_id": "call-1"}),
    answered=AskUserAnswered(("yes",), False, 12.5),
)

GOLDEN: dict[str, WireValue] = {
    "TurnCheckpoint": _CHECKPOINT,
    "PauseRecorded": PauseRecorded(
        **_EVENT,
        checkpoint=_CHECKPOINT,
        token_id="tok-1",
        request_json='{"question":"Window seat?"}',
        request_hash="sha256:ab12",
        response_schema="ask_user",
        expires_at=_LATER,
    ),
    "AnswerSubmitted": AnswerSubmitted(
        **_EVENT,
        answer_id="ans-1",
        token="eyJhbGciOi.payload.sig",
        thread_id="thread-42",
        scope_hash="9f2c",
        session_id=None,
        run_id="run-7",
        call_id=None,
        response_json='{"selected":["yes"]}',
        submitted_at=_AT,
        answered_by="alice",
        answered_by_issuer="https://sso.example.com",
    ),
    "TokenConsumed": TokenConsumed(
        **_EVENT,
        token_id="tok-1",
        answer_id="ans-1",
        thread_id="thread-42",
        checkpoint_id="cp-0001",
        outcome="resumed",
        claim_id="claim-1",
        claimant="agent-host:4242",
        claimed_at_ms=1747474215250,
        claim_state="claimed",
    ),
    "ContinuationRequested": ContinuationRequested(
        **_EVENT,
        claim_id="claim-1",
        thread_id="thread-42",
        token_id="tok-1",
        action="claim",
        claimant="agent-host:4242",
        token="eyJ.eyJ.sig",
    ),
    "AnswerRejected": AnswerRejected(
        **_EVENT,
        answer_id="ans-2",
        token_id=None,
        thread_id="thread-42",
        reason="scope_mismatch",
        step=4,
        detail="the answer's scope is not the pause's",
    ),
    "PauseExpired": PauseExpired(
        **_EVENT,
        token_id="tok-9",
        thread_id="thread-43",
        checkpoint_id="cp-0009",
        run_id="run-8",
        session_id="ses-3",
        tool_call_id="call-5",
        expires_at=_LATER,
    ),
    "TurnResumed": _RESUMED,
}

#: Values as an earlier schema version wrote them, and the fields it did not have: today's
#: reader fills those in with their defaults. Name: ``<type>.<version>``, as in schemas/history.
_CLAIM_FIELDS = ("claim_id", "claimant", "claimed_at_ms", "claim_state")
_UNCLAIMED = replace(
    GOLDEN["TokenConsumed"],  # type: ignore[type-var]
    claim_id="",
    claimant="",
    claimed_at_ms=0,
    claim_state="",
)

HISTORY: dict[str, tuple[WireValue, tuple[str, ...]]] = {
    "TurnResumed.v1": (replace(_RESUMED, answered=None), ("answered", "answers", "sealed")),
    "TurnResumed.v2": (_RESUMED, ("answers", "sealed")),
    "TurnResumed.v3": (_RESUMED, ("sealed",)),
    "PauseRecorded.v1": (GOLDEN["PauseRecorded"], ("group",)),
    "PauseExpired.v1": (GOLDEN["PauseExpired"], ("reason",)),
    "TokenConsumed.v1": (_UNCLAIMED, ("response_json", *_CLAIM_FIELDS)),
    "TokenConsumed.v2": (_UNCLAIMED, _CLAIM_FIELDS),
    "AnswerSubmitted.v1": (
        replace(GOLDEN["AnswerSubmitted"], answered_by=None, answered_by_issuer=None),  # type: ignore[type-var]
        ("answered_by", "answered_by_issuer"),
    ),
}


def encode_old(name: str) -> bytes:
    """``HISTORY[name]`` written as a build that only knew that schema version would have."""
    value, missing = HISTORY[name]
    schema = json.loads((codec.schemas_dir() / "history" / f"{name}.avsc").read_text("utf-8"))
    record = to_record(value)
    for field_name in missing:
        del record[field_name]
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    header = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    return b"\xc3\x01" + header + body.getvalue()


def _golden(name: str) -> bytes:
    return (GOLDEN_DIR / f"{name}.bin").read_bytes()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_committed_bytes_decode_to_the_expected_value(name: str) -> None:
    assert codec.decode(_golden(name)) == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_expected_value_encodes_to_the_committed_bytes(name: str) -> None:
    assert codec.encode(GOLDEN[name]) == _golden(name)


@pytest.mark.parametrize("name", sorted(HISTORY))
def test_committed_bytes_of_earlier_versions_still_decode(name: str) -> None:
    data = _golden(name)
    assert data[2:10] != codec.fingerprint_of(name.split(".")[0])
    assert data == encode_old(name)
    assert codec.decode(data) == HISTORY[name][0]


def test_the_golden_set_covers_every_wire_type_and_nothing_else() -> None:
    assert set(GOLDEN) == set(WIRE_TYPES)
    assert {p.stem for p in GOLDEN_DIR.glob("*.bin")} == {*GOLDEN, *HISTORY}
