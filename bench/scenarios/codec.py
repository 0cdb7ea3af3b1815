"""Codec: a 20-message checkpoint through single-object Avro vs the canonical JSON body.

Avro is :func:`turnlog.wire.codec.encode`/:func:`~turnlog.wire.codec.decode` on the
``TurnCheckpoint``; the baseline is ``TurnCheckpoint.encode()``/``TurnCheckpoint.decode()``
(canonical JSON, UTF-8).
The schema registry's framing (``TURNLOG_WIRE=registry``: ``00``, a 4-byte id, the same body)
is timed on a ``PauseRecorded`` round trip against single-object in the same run, the ids
already known as a started process knows them (no registry is asked per record).
Both directions are timed as one round trip, value to bytes to an equal value; a
``PauseRecorded`` (the checkpoint plus the pause's facts) is timed alongside for reference. No
broker.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from bench.common import pause_for
from bench.measure import Profiling
from bench.report import Row
from bench.scenarios import Context
from turnlog.contracts.checkpoint import TurnCheckpoint
from turnlog.contracts.events import PauseRecorded
from turnlog.wire import codec as _codec
from turnlog.wire.codec import decode, encode

TARGET_SPEED = 2.0
TARGET_BYTES = 0.6


def _rate(operation: Callable[[], Any], iterations: int) -> float:
    """Operations per second over ``iterations`` calls, the collector held off while timing."""
    operation()
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        for _ in range(iterations):
            operation()
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    return iterations / elapsed


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    pause = pause_for("thread-codec", messages=opts.messages)
    cp = pause.checkpoint
    avro, text = encode(cp), cp.encode().encode()
    if decode(avro, TurnCheckpoint) != cp or TurnCheckpoint.decode(text) != cp:
        raise RuntimeError("a codec round trip changed the checkpoint")
    pause_bytes = encode(pause)
    n = opts.codec_iterations
    runs = max(ctx.repeats, 5)
    samples: dict[str, list[float]] = {
        k: [] for k in ("avro", "json", "avro_enc", "avro_dec", "json_enc", "json_dec", "pause")
    }
    profiling = Profiling(ctx.profile_path("codec"), interval=0.0005)
    profiling.start()
    for _ in range(runs):
        samples["avro"].append(_rate(lambda: decode(encode(cp), TurnCheckpoint), n))
        samples["json"].append(_rate(lambda: TurnCheckpoint.decode(cp.encode()), n))
        samples["avro_enc"].append(_rate(lambda: encode(cp), n))
        samples["avro_dec"].append(_rate(lambda: decode(avro, TurnCheckpoint), n))
        samples["json_enc"].append(_rate(lambda: cp.encode().encode(), n))
        samples["json_dec"].append(_rate(lambda: TurnCheckpoint.decode(text), n))
        samples["pause"].append(_rate(lambda: decode(encode(pause), PauseRecorded), n))
    profiling.stop()
    samples["registry"] = _registry_rates(pause, n, runs)

    def us(key: str) -> float:
        ordered = sorted(samples[key])
        return 1e6 / ordered[len(ordered) // 2]

    notes = (
        f"encode {us('avro_enc'):.0f} µs vs {us('json_enc'):.0f} µs, decode {us('avro_dec'):.0f} "
        f"µs vs {us('json_dec'):.0f} µs; PauseRecorded round trip {us('pause'):.0f} µs "
        f"({len(pause_bytes):,} B)"
    )
    ctx.log(notes)
    per_message = f"{opts.messages}-message TurnCheckpoint"
    registry_notes = (
        f"PauseRecorded round trip {us('registry'):.0f} µs framed for the registry vs "
        f"{us('pause'):.0f} µs single-object"
    )
    return [
        Row(
            scenario="codec",
            metric="PauseRecorded, registry framing: encode+decode",
            unit="ops/s",
            samples=samples["registry"],
            baseline_samples=samples["pause"],
            baseline_name="single-object framing",
            target="≥0.95x single-object",
            check=lambda value, ratio: ratio is not None and ratio >= 0.95,
            notes=registry_notes,
        ),
        Row(
            scenario="codec",
            metric=f"{per_message}: encode+decode",
            unit="ops/s",
            samples=samples["avro"],
            baseline_samples=samples["json"],
            baseline_name="canonical JSON",
            target=f"≥{TARGET_SPEED:g}x JSON",
            check=lambda value, ratio: ratio is not None and ratio >= TARGET_SPEED,
            notes=notes,
            details={
                "iterations": n,
                "microseconds": {k: us(k) for k in samples},
                "samples_ops_per_s": samples,
            },
        ),
        Row(
            scenario="codec",
            metric=f"{per_message}: bytes per record",
            unit="B",
            samples=[float(len(avro))],
            baseline_samples=[float(len(text))],
            baseline_name="canonical JSON",
            target=f"≤{TARGET_BYTES:g}x JSON",
            check=lambda value, ratio: ratio is not None and ratio <= TARGET_BYTES,
            details={"pause_recorded_bytes": len(pause_bytes)},
        ),
    ]


def _registry_rates(pause: PauseRecorded, n: int, runs: int) -> list[float]:
    """Round trips of ``pause`` written in the registry's framing, with every current schema
    given an id as :func:`turnlog.kafka.registry.prepare_wire` gives them; single-object again
    afterwards."""
    ids = {name: 100 + i for i, name in enumerate(_codec.schema_names())}
    _codec.use_registry(lambda _id: None, write_ids=ids)
    try:
        framed = encode(pause)
        if framed[:1] != _codec.REGISTRY_MAGIC or decode(framed, PauseRecorded) != pause:
            raise RuntimeError("the registry framing did not round-trip the pause")
        return [_rate(lambda: decode(encode(pause), PauseRecorded), n) for _ in range(runs)]
    finally:
        _codec.use_single_object()
