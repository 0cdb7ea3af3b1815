"""schemas/standalone/: one file per schema that any Avro library reads on its own.

The files in schemas/ refer to named types in other files, so a reader in another language had
to inline them by hand (``UnknownType: dev.turnlog.Message``). The standalone files are those
schemas expanded; they must stay exactly that (scripts/standalone-schemas.py writes them).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import avro.schema
import fastavro
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form

from tests.deployment import sample_checkpoint
from turnlog.clock import utc_now
from turnlog.contracts.events import TurnResumed
from turnlog.wire.codec import MAGIC, encode, fingerprint_of, schema_for, schema_names

STANDALONE = Path(__file__).resolve().parents[2] / "schemas" / "standalone"


def test_there_is_one_standalone_file_per_schema_and_nothing_else() -> None:
    assert sorted(p.stem for p in STANDALONE.glob("*.avsc")) == sorted(schema_names())


@pytest.mark.parametrize("name", schema_names())
def test_each_standalone_file_is_its_schema_expanded(name: str) -> None:
    on_disk = json.loads((STANDALONE / f"{name}.avsc").read_text())
    assert on_disk == schema_for(name), "run: python scripts/standalone-schemas.py"


@pytest.mark.parametrize("name", schema_names())
def test_each_standalone_file_parses_alone_with_its_wire_fingerprint(name: str) -> None:
    text = (STANDALONE / f"{name}.avsc").read_text()
    fastavro.parse_schema(json.loads(text), named_schemas={})  # no other file needed
    avro.schema.parse(text)  # nor by the Apache Avro package
    # fastavro's hex is already the bytes in wire order: no reversing.
    canonical = to_parsing_canonical_form(json.loads(text))
    assert bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO")) == fingerprint_of(name)


def test_a_resumed_turn_reads_with_the_standalone_schema_alone() -> None:
    cp = sample_checkpoint("thread-standalone")
    turn = TurnResumed(
        event_id="e", occurred_at=utc_now(), package_version="t", token_id="tok",
        answer_id="a", run_id=cp.run_id, session_id=cp.session_id, thread_id=cp.thread_id,
        checkpoint_id=cp.checkpoint_id, interrupt_id=cp.interrupt_id,
        tool_call_id=cp.tool_call_id, name=cp.name, prompt=cp.prompt, response_json="{}",
        history=cp.messages,
    )  # fmt: skip
    data = encode(turn)
    assert data[:2] == MAGIC and data[2:10] == fingerprint_of("TurnResumed")
    schema = fastavro.parse_schema(
        json.loads((STANDALONE / "TurnResumed.avsc").read_text()), named_schemas={}
    )
    record = fastavro.schemaless_reader(io.BytesIO(data[10:]), schema, None)
    assert record["thread_id"] == "thread-standalone"
    assert [m["role"] for m in record["history"]] == [m["role"] for m in cp.messages]
