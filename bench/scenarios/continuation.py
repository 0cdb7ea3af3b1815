"""Continuation: what the claim adds to the continue step.

N paused turns are answered and resumed by one worker process. Then, one at a time, each turn
is continued as the documented continue step does it -- ``Turnlog.continue_turn(token)``: the
thread's resumed turn read from its partition (``since`` the token's issue), then the claim
written on the answers topic and its decision read back from the consumptions (or rejections)
partition -- and, beside it in the same run on the same turns, the plain read that step made
before the claim existed: ``peek_resumed_turn(thread, token_id=..., since=...)``. Reported:
p50 and p99 of each, per repeat; the ``done()`` that finishes a claim (one more decided
request) is in the notes. The read goes first for each turn, so the claim never finds the
resumed partition colder than its baseline did.
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import create_topics, make_deployment, preload, produce, unique_prefix
from bench.common import scenario_topics as topics_of
from bench.measure import median, percentile
from bench.report import Row
from bench.scenarios import Context, client_settings, worker_config
from bench.workerproc import WorkerProcess
from turnlog import Turnlog
from turnlog.contracts.events import AnswerSubmitted
from turnlog.tokens import peek_claims
from turnlog.wire.codec import decode

#: Continue steps per repeat (full, --quick).
STEPS = (300, 40)


async def run(ctx: Context) -> list[Row]:
    opts = ctx.options
    n = STEPS[1] if ctx.quick else STEPS[0]
    total = n * ctx.repeats
    samples: dict[str, list[list[float]]] = {"claim": [], "read": [], "done": []}
    async with topics_of(ctx.bootstrap, []) as prefixes:
        prefix = unique_prefix(ctx.run_id, "continuation")
        prefixes.append(prefix)
        dep = make_deployment(
            ctx.bootstrap,
            prefix,
            partitions=opts.partitions,
            commit_interval_ms=opts.commit_interval_ms,
        )
        await create_topics(dep)
        answers = await preload(dep, total, messages=opts.messages)
        with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
            settings = client_settings(dep, Path(tmp))
            config = worker_config(
                ctx, dep, "turnlog", app_id=dep.settings.application_id,
                state_dir=Path(tmp) / "worker", report_at=(total,),
            )  # fmt: skip
            proc = WorkerProcess(config)
            await proc.start()
            try:
                await proc.wait_event("owned", 600)
                await produce(ctx.bootstrap, dep.topics.answers, answers, transactional=False)
                # A progress mark, not "done": the worker stays up to decide the claims.
                await proc.wait_event("progress", max(300.0, total / 50), mark=total)
                ctx.log(f"{total:,} turns resumed; continuing each, one at a time")
                async with Turnlog(settings) as tl:
                    for k in range(ctx.repeats):
                        got = await _continue_each(tl, answers[k * n : (k + 1) * n])
                        for name, values in got.items():
                            samples[name].append(values)
                        ctx.log(
                            f"repeat {k + 1}: claim p50 {percentile(got['claim'], 0.5):.1f} ms, "
                            f"read p50 {percentile(got['read'], 0.5):.1f} ms, "
                            f"done p50 {percentile(got['done'], 0.5):.1f} ms"
                        )
            finally:
                await proc.stop()

    def per_repeat(name: str, q: float) -> list[float]:
        return [percentile(values, q) for values in samples[name]]

    done_note = (
        f"done() p50 {median(per_repeat('done', 0.5)) or 0:.1f} ms, "
        f"p99 {median(per_repeat('done', 0.99)) or 0:.1f} ms; {n} steps per repeat"
    )
    details: dict[str, Any] = {"samples_ms": samples}
    return [
        Row(
            scenario="continuation",
            metric="p50 continue step: continue_turn (read + claim decided)",
            unit="ms",
            samples=per_repeat("claim", 0.5),
            baseline_samples=per_repeat("read", 0.5),
            baseline_name="peek_resumed_turn (the read alone)",
            notes=done_note,
            details=details,
        ),
        Row(
            scenario="continuation",
            metric="p99 continue step: continue_turn (read + claim decided)",
            unit="ms",
            samples=per_repeat("claim", 0.99),
            baseline_samples=per_repeat("read", 0.99),
            baseline_name="peek_resumed_turn (the read alone)",
        ),
    ]


async def _continue_each(tl: Turnlog, answers: list[tuple[int, bytes, bytes]]) -> dict[str, Any]:
    timings: dict[str, list[float]] = {"claim": [], "read": [], "done": []}
    for _, _, value in answers:
        answer = decode(value, AnswerSubmitted)
        claims = peek_claims(answer.token)
        since = datetime.fromtimestamp(int(claims["iat"]), UTC)
        began = time.perf_counter()
        await tl.peek_resumed_turn(
            answer.thread_id, token_id=str(claims["jti"]), since=since, timeout=60
        )
        timings["read"].append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        continuation = await tl.continue_turn(answer.token, timeout=60)
        timings["claim"].append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        await continuation.done()
        timings["done"].append((time.perf_counter() - began) * 1000)
    return timings
