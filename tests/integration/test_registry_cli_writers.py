"""A registry-wire deployment run with the CLI's verbs alone, every topic read by a stock
registry deserializer (issue 41). ``turnlog pause`` with ``TURNLOG_WIRE=registry`` wrote
single-object pauses (``c3 01``) that confluent-kafka's ``AvroDeserializer`` refuses with
"Invalid magic byte": the verb records without starting the recorder, and the switch to the
registry framing happened at the start. Here a pause, an answer, its resume, its spent token
and a refusal are all written by ``turnlog pause``, ``turnlog answer`` and ``turnlog worker``,
and every record on the five topics is read by the stock deserializer, not skipped."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.cli_support import Cli, cli_env
from tests.integration.registry_support import _single_object_after, schema_registry
from tests.kafka_helpers import read_to_end
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings

__all__ = ["_single_object_after", "schema_registry"]


async def test_every_record_the_cli_writes_on_the_registry_wire_reads_with_a_stock_deserializer(
    bootstrap: str, names: Names, tmp_path: Path, schema_registry: str
) -> None:
    env = cli_env(bootstrap, names.prefix, names.app, tmp_path)
    cli = Cli({**env, "TURNLOG_WIRE": "registry", "TURNLOG_SCHEMA_REGISTRY_URL": schema_registry})
    cli("keys", "new")
    cp = sample_checkpoint("registry-cli-thread")
    checkpoint_file = tmp_path / "checkpoint.json"
    checkpoint_file.write_text(cp.encode())
    paused = cli.json("pause", str(checkpoint_file))  # the verb's first and only write
    assert isinstance(paused, dict)
    token = str(paused["token"])
    axes = ["--scope", cp.scope_hash, "--session", cp.session_id, "--run", cp.run_id,
            "--call", "call-1"]  # fmt: skip
    response = json.dumps({"answers": [{"selections": ["eu"], "other": None}]})
    worker = cli.spawn("worker")
    try:
        cli("answer", token, "--response", response, *axes)
        cli("tail", "resumed", "--from-beginning", "--max", "1", "--json", timeout=90)
        cli("answer", token, "--response", response, *axes)  # refused: already consumed
        cli("tail", "rejections", "--from-beginning", "--max", "1", "--json", timeout=90)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_err = worker.communicate(timeout=60)
    assert worker.returncode == 0, worker_err
    assert "stopped: resumed 1, rejected 1" in worker_err

    topics = TopicSet.from_settings(Settings(topic_prefix=names.prefix, partitions=3))
    client = SchemaRegistryClient({"url": schema_registry})
    stock = AvroDeserializer(client)  # nothing of turnlog's: it raises on any other framing
    read: dict[str, list[dict[str, object]]] = {}
    try:
        for role in ("pauses", "answers", "consumptions", "resumed", "rejections"):
            topic = getattr(topics, role)
            values = [r.value for r in await read_to_end(bootstrap, topic) if r.value is not None]
            context = SerializationContext(topic, MessageField.VALUE)
            read[role] = [stock(value, context) for value in values]
    finally:
        client.__exit__()
    ((pause,),) = [read["pauses"]]
    assert pause["token_id"] == paused["token_id"]
    assert pause["checkpoint"]["thread_id"] == "registry-cli-thread"
    assert len(read["answers"]) == 2 and len(read["consumptions"]) == 1
    assert [r["token_id"] for r in read["resumed"]] == [paused["token_id"]]
    assert [r["reason"] for r in read["rejections"]] == ["already_consumed"]
