"""The SIGKILL chaos of issues 6 and 11: its inputs, its worker slots, its kills.

:class:`Chaos` records pauses, starts worker processes in fixed slots, and publishes every kind
of answer issue 11 names -- valid ones, duplicates, competing answers from two other processes,
answers on the wrong partition -- while pauses with short windows expire and workers are
SIGKILLed and restarted (and, optionally, the broker is taken away and brought back). It then
waits until everything is processed, stops the workers cleanly, and hands back what the answers
log calls for and what was written, for ``chaos_count`` to compare.

How kills are aimed inside open transactions: every worker process writes transaction marks
(``worker_proc --marks``): ``open`` once a transaction's records and input offsets are on the
broker and before its commit is asked for, which a commit delay holds open for a random while
(up to ``commit_delay``), then ``committed`` or ``failed``. An aimed kill waits for a worker with
an ``open`` mark and no end mark yet and SIGKILLs it at once; whether it died inside is read from
its marks after its death. Every third kill is not aimed, and lands wherever the victim is (a
take, a restore, an idle poll). The marks of all processes also say when the group
committed anything: the longest silence.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from tests.deployment import ANSWER, REQUEST, Deployment, axes, sample_checkpoint
from tests.integration.chaos_count import AnswerRecord, Expected, Outputs, expected_from_log
from tests.integration.worker_proc import Proc, common_options, spawn
from tests.integration.worker_support import committed_events, of_type
from tests.kafka_helpers import eventually, read_to_end, wait_until_consumed
from turnlog.audit import Auditor, Violation
from turnlog.contracts.events import TokenConsumed
from turnlog.kafka.partitioning import answer_key, murmur2
from turnlog.producers.answers import AnswerPublisher
from turnlog.producers.pauses import PauseRecorder, RecordedPause
from turnlog.projections.store import Store
from turnlog.wire.codec import encode

#: The second competitor's answer (the first answers with ``ANSWER``).
OTHER_ANSWER = {"answers": [{"selections": ["us"], "other": None}]}


@dataclass
class ChaosConfig:
    answered: int = 900  # pauses answered by the test process (some of them twice or more)
    competing: int = 60  # pauses answered by two publisher processes at once
    misrouted: int = 60  # answered pauses that also get an answer on a wrong partition
    expiring: int = 30  # pauses whose window closes during the run; never answered
    expiring_late: int = 8  # more of those, recorded while the chaos runs
    min_kills: int = 50
    slots: int = 3  # worker processes alive, apart from the moments of a restart
    static: bool = True  # a stable group.instance.id per slot (Kafka static membership)
    session_timeout_ms: int = 10000
    commit_delay: float = 0.15  # the most a worker holds a transaction open before its commit
    publish_seconds: float = 25.0  # the least time over which the answers are spread
    kill_gap: tuple[float, float] = (0.05, 0.4)  # seconds between kills, at random within
    #: run once half the answers are out: the broker goes away and comes back
    outage: Callable[[], Awaitable[None]] | None = None
    #: steps run one after another while the answers stream and the kills go on -- faults the
    #: broker side lives through without going away, such as a node of three bounced. Step j
    #: begins once the j-th share of the answers is out, the next answers wait for it to have
    #: begun (so answers arrive during every step), and the kills go on until the last is done.
    faults: tuple[Callable[[], Awaitable[None]], ...] = ()


# -- worker slots and their transaction marks -------------------------------------------------


@dataclass(frozen=True)
class Mark:
    at: float  # unix time
    kind: str  # open | committed | failed
    partition: int


class Marks:
    """The transaction marks one worker process writes, read as they grow."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marks: list[Mark] = []
        self._pos = 0
        self._open = 0

    def read(self) -> list[Mark]:
        if not self.path.exists():
            return self.marks
        with self.path.open("rb") as f:
            f.seek(self._pos)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
        self._pos += len(whole)
        for line in whole.decode().splitlines():
            at, kind, partition = line.split()
            self.marks.append(Mark(float(at), kind, int(partition)))
            self._open += 1 if kind == "open" else -1
        return self.marks

    def open_transactions(self) -> int:
        """Transactions whose records are written and whose commit has not returned."""
        self.read()
        return self._open


@dataclass
class Worker:
    """One worker process in one slot."""

    slot: int
    proc: Proc
    marks: Marks


@dataclass(frozen=True)
class Kill:
    at: float  # unix time
    slot: int
    aimed: bool
    #: the victim had a transaction open (records written, commit not returned) when it died
    inside: bool


@dataclass
class ChaosResult:
    inputs: list[AnswerRecord]
    expected: Expected
    outputs: Outputs
    kills: list[Kill]
    workers: list[Worker]  # every process that ran, in start order
    reused_stores: int
    recorded_in: float
    drained_in: float
    took: float
    commits: dict[int, list[float]]  # partition -> sorted unix times of its commits
    publish_retries: int
    outage: tuple[float, float] | None  # unix times the broker went and came back
    faults: tuple[tuple[float, float], ...] = ()  # unix times each fault step began and ended
    #: ``turnlog audit``'s verdict once drained, before any repair, and after ``--heal``
    audit: AuditOutcome | None = None

    def waits(self) -> list[float]:
        """Seconds each resumed answer waited: from its first publish to its resume."""
        first: dict[str, float] = {}
        for a in self.inputs:
            first[a.answer_id] = min(a.submitted, first.get(a.answer_id, a.submitted))
        resumed_at = self.outputs.resumed_at
        return sorted(resumed_at[a] - first[a] for a in self.expected.resumes.values())

    def longest_silence(self) -> float:
        """The longest time in which no worker committed anything (the answers kept coming)."""
        times = sorted(t for ts in self.commits.values() for t in ts)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def summary(self) -> str:
        waits = self.waits()

        def at(q: float) -> float:
            return waits[min(len(waits) - 1, int(len(waits) * q))]

        e = self.expected
        return (
            f"{len(self.kills)} SIGKILLs ({sum(k.aimed for k in self.kills)} aimed, "
            f"{sum(k.inside for k in self.kills)} inside an open transaction, "
            f"{self.reused_stores} restarts on the dead store), {len(self.workers)} worker "
            f"processes; {len(e.resumes)} resumed, {len(e.expired)} expired, "
            f"{sum(e.rejections.values())} refused ({e.misrouted} misrouted), {e.replays} "
            f"replays, {self.publish_retries} publish retries; an answer waited for its resume "
            f"{statistics.median(waits):.1f}s (median), {at(0.9):.1f}s (p90), {at(0.99):.1f}s "
            f"(p99), {waits[-1]:.1f}s (max); longest time without any commit "
            f"{self.longest_silence():.1f}s; recorded in {self.recorded_in:.1f}s, drained "
            f"{self.drained_in:.1f}s after the chaos, {self.took:.0f}s in all"
            + ("" if self.audit is None else f"; audit: {self.audit.line()}")
        )


@dataclass
class AuditOutcome:
    """What ``turnlog audit`` found when the chaos was drained, what it asked the owners to
    repair, and what was left after the repairs (the chaos tests' judge: nothing)."""

    found: list[Violation]
    repairs: int
    left: list[Violation]
    answers_judged: int

    def as_dict(self) -> dict[str, Any]:
        """One machine-readable line's worth (the outage soak reads it from the test's output):
        violations by kind before and after the heal, and how many of those found are gone."""
        left = {v.line() for v in self.left}
        return {
            "answers_judged": self.answers_judged,
            "found": dict(Counter(v.kind.value for v in self.found)),
            "repairs": self.repairs,
            "healed": sum(1 for v in self.found if v.line() not in left),
            "left": dict(Counter(v.kind.value for v in self.left)),
            "violations": [v.as_dict() for v in self.found],
        }

    def line(self) -> str:
        kinds = Counter(v.kind.value for v in self.found)
        return (
            f"{self.answers_judged} answers judged, {len(self.found)} violation(s) found"
            f"{f' {dict(kinds)}' if kinds else ''}, {self.repairs} repair(s) asked, "
            f"{len(self.left)} left"
        )


async def audit_and_heal(dep: Deployment, bootstrap: str) -> AuditOutcome:
    """Judge the drained log with ``turnlog audit``; heal what it found through the workers
    still running, and judge again."""
    settings = dep.settings.with_(bootstrap_servers=bootstrap)
    async with Auditor(settings, settle_seconds=2.0, timeout=120) as auditor:
        first = await auditor.audit()
        requests = await auditor.heal(first) if not first.holds else []
        after = first
        if requests:
            await wait_until_consumed(
                bootstrap, settings.application_id, dep.topics.answers, timeout=120
            )
            after = await auditor.audit()
    outcome = AuditOutcome(first.violations, len(requests), after.violations, first.answers_judged)
    # One line for bench/soak_outage.py, which reads every run's figures from the test's output.
    print(f"turnlog-audit-outcome {json.dumps(outcome.as_dict(), default=str)}", flush=True)
    return outcome


# -- inputs -----------------------------------------------------------------------------------


async def record_pauses(
    dep: Deployment,
    count: int,
    prefix: str,
    *,
    writers: int = 10,
    ttl: Callable[[], timedelta | None] = lambda: None,
) -> list[RecordedPause]:
    """``count`` pauses on distinct threads, recorded by ``writers`` recorders side by side."""
    recorders = [PauseRecorder(dep.settings, dep.issuer) for _ in range(min(writers, count))]

    async def write(i: int) -> list[RecordedPause]:
        return [
            await recorders[i].record(
                sample_checkpoint(f"{prefix}-{n}"), request_json=REQUEST, ttl=ttl()
            )
            for n in range(i, count, len(recorders))
        ]

    try:
        chunks = await asyncio.gather(*(write(i) for i in range(len(recorders))))
    finally:
        for r in recorders:
            await r.close()
    return [pause for chunk in chunks for pause in chunk]


def default_partition(key: bytes, partitions: int) -> int:
    """What Kafka's default partitioner picks for ``key``: where a client that hands the
    composite key to its producer and lets it choose sends the answer."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


async def until_acknowledged(send: Callable[[], Awaitable[object]], timeout: float = 120) -> int:
    """Publish until acknowledged -- the way a client must, and safe because a retry keeps its
    answer id; returns how many retries it took (only a broker outage should cost any)."""
    deadline = time.monotonic() + timeout
    retries = 0
    while True:
        try:
            await send()
            return retries
        except Exception:
            if time.monotonic() > deadline:
                raise
            retries += 1
            await asyncio.sleep(0.5)


class Chaos:
    """One run; see the module docstring and :class:`ChaosConfig`."""

    def __init__(
        self, bootstrap: str, dep: Deployment, keys: Path, root: Path, config: ChaosConfig
    ) -> None:
        self.bootstrap = bootstrap
        self.dep = dep
        self.root = root
        self.config = config
        self.rng = random.Random()
        settings = dep.settings
        self.options = common_options(
            bootstrap, settings.topic_prefix, settings.application_id, keys, settings.partitions
        )
        self.reused = 0
        self.workers: dict[int, Worker] = {}  # slot -> the process in it now
        self.everyone: list[Worker] = []
        self.kills: list[Kill] = []
        self.publishers: list[Proc] = []
        self.retries = 0
        self.broker_down = False
        self.outage: tuple[float, float] | None = None
        self.fault_times: list[tuple[float, float]] = []
        self._fault_go = [asyncio.Event() for _ in config.faults]  # its answers are out
        self._fault_began = [asyncio.Event() for _ in config.faults]
        #: held by each late pause recording, and by the outage from start to end: a pause is
        #: never half-recorded when the broker goes (its token would be lost, its expiry not)
        self._recording = asyncio.Lock()

    # -- worker processes --------------------------------------------------------------------

    def start_worker(self, slot: int, state: Path | None = None) -> Worker:
        n = len(self.everyone) + 1
        state = state or self.root / f"state-{n}"
        marks = self.root / f"marks-{n}"
        static = ["--instance-id", f"slot-{slot}"] if self.config.static else []
        proc = spawn(
            "worker",
            self.root / f"worker-{n}-slot-{slot}.log",
            *self.options,
            *("--session-timeout-ms", str(self.config.session_timeout_ms)),
            *("--commit-delay", str(self.config.commit_delay)),
            *("--expiry-interval", "0.5"),
            *("--marks", str(marks), "--state", str(state)),
            *static,
            state=state,
        )
        worker = Worker(slot, proc, Marks(marks))
        self.workers[slot] = worker
        self.everyone.append(worker)
        return worker

    def check_alive(self) -> None:
        """No worker ever exits on its own: only our SIGKILLs and the final SIGTERM end one."""
        for w in self.workers.values():
            if not w.proc.alive():
                raise AssertionError(
                    f"the worker in slot {w.slot} exited on its own with code "
                    f"{w.proc.popen.returncode}:\n{w.proc.tail(40)}"
                )

    async def _victim(self, aimed: bool) -> Worker:
        """Aimed: the first worker seen with a transaction open (polled for up to 5 s, then
        any); else any worker, at this moment."""
        alive = list(self.workers.values())
        if aimed:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                inside = [w for w in alive if w.marks.open_transactions() > 0]
                if inside:
                    return self.rng.choice(inside)
                await asyncio.sleep(0.005)
        return self.rng.choice(alive)

    async def kill_one(self, aimed: bool) -> None:
        w = await self._victim(aimed)
        at = time.time()
        w.proc.kill()
        inside = w.marks.open_transactions() > 0  # read after its death: final
        self.kills.append(Kill(at, w.slot, aimed, inside))
        reuse = len(self.kills) % 2 == 0  # every other restart reopens the dead process's store
        self.reused += reuse
        self.start_worker(w.slot, w.proc.state if reuse else None)

    async def _kill_until_done(self, tasks: list[asyncio.Task[Any]]) -> None:
        """SIGKILL a worker and restart its slot, again and again, until ``min_kills`` are done
        and the answers are all out. Two kills of three are aimed inside an open transaction.
        None while the broker is away (the workers must live through that on their own)."""
        publishing, faulting = tasks[0], tasks[3]
        while True:
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    await task  # raises what ended it
            self.check_alive()
            if len(self.kills) >= self.config.min_kills and publishing.done() and faulting.done():
                return
            await asyncio.sleep(self.rng.uniform(*self.config.kill_gap))  # a random moment
            if not self.broker_down:
                await self.kill_one(aimed=len(self.kills) % 3 != 2)

    # -- answers -----------------------------------------------------------------------------

    async def _start_competitors(self, competing: list[RecordedPause]) -> None:
        """Two publisher processes, each with its own answer for every competing pause, in the
        same order at the same pace from the same go: they race for each token."""
        go = self.root / "go"
        chunk = 2
        pace = self.config.publish_seconds / max(1.0, len(competing) / chunk)
        for tag, response in (("left", ANSWER), ("right", OTHER_ANSWER)):
            items = [
                {
                    "token": p.token,
                    "axes": axes(p.pause.checkpoint),
                    "response": response,
                    "answer_id": f"{tag}-{p.token_id}",
                }
                for p in competing
            ]
            answers = self.root / f"{tag}.json"
            answers.write_text(json.dumps(items))
            self.publishers.append(
                spawn(
                    "publish-many",
                    self.root / f"publisher-{tag}.log",
                    *self.options,
                    *("--answers", str(answers), "--chunk", str(chunk), "--pace", f"{pace:.3f}"),
                    *("--ready", str(self.root / f"ready-{tag}"), "--go", str(go)),
                )
            )

        async def ready() -> bool:
            for p in self.publishers:
                if not p.alive():
                    raise AssertionError(f"a publisher exited early:\n{p.tail()}")
            return all((self.root / f"ready-{t}").exists() for t in ("left", "right"))

        await eventually(ready, timeout=60)
        go.touch()

    async def _publish(
        self,
        answered: list[RecordedPause],
        competing: list[RecordedPause],
        misrouted: set[str],
        half: asyncio.Event,
    ) -> None:
        """The test's own answers, a chunk at a time and no faster than the kills go: each
        answered pause once; about a tenth of them twice in the same breath (a duplicate seen
        through the open transaction) and again three chunks later (seen through the ledger,
        maybe a new owner's); a third of the competing pauses a third time; and the misrouted
        ones -- sent with Kafka's default partitioner on the composite key -- before or after
        the routed answer of their pause."""
        dep, rng, cfg = self.dep, self.rng, self.config
        size = 20
        chunks = [answered[i : i + size] for i in range(0, len(answered), size)]
        pace = cfg.publish_seconds / len(chunks)
        third = competing[: len(competing) // 3]
        again: list[list[RecordedPause]] = []
        async with (
            AnswerPublisher(dep.settings, dep.verifier) as publisher,
            AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True
            ) as misrouter,
        ):

            async def publish(p: RecordedPause, answer_id: str) -> None:
                cp = p.pause.checkpoint

                async def send() -> object:
                    return await publisher.publish(p.token, ANSWER, **axes(cp), answer_id=answer_id)

                self.retries += await until_acknowledged(send)

            async def misroute(p: RecordedPause) -> None:
                cp = p.pause.checkpoint
                answer = publisher.build(p.token, ANSWER, **axes(cp), answer_id=f"mis-{p.token_id}")
                key = answer_key(answer.thread_id, answer.answer_id)

                async def send() -> object:
                    # No partition: the producer's default partitioner hashes the whole key.
                    return await misrouter.send_and_wait(
                        dep.topics.answers, encode(answer), key=key
                    )

                self.retries += await until_acknowledged(send)

            for i, chunk in enumerate(chunks):
                await self._faults_begun_before(i, len(chunks))
                if i == len(chunks) // 2:
                    half.set()
                jobs = []
                for p in chunk:
                    first = p.token_id in misrouted and rng.random() < 0.5
                    if first:
                        await misroute(p)
                    jobs.append(publish(p, f"answer-{p.token_id}"))
                    if rng.random() < 0.1:
                        jobs.append(publish(p, f"answer-{p.token_id}"))
                    if p.token_id in misrouted and not first:
                        jobs.append(misroute(p))
                if len(again) >= 3:
                    jobs += [publish(p, f"answer-{p.token_id}") for p in again[-3]]
                if third:
                    p = third.pop()
                    jobs.append(publish(p, f"third-{p.token_id}"))
                await asyncio.gather(*jobs)
                self._chunk_out(i, len(chunks))
                again.append(rng.sample(chunk, k=min(2, len(chunk))))
                await asyncio.sleep(rng.uniform(0.5, 1.5) * pace)  # the next chunk comes later
                # ... and not before the kills have kept up, so every kill finds work in flight.
                due = (i + 1) * cfg.min_kills // len(chunks)

                async def kills_kept_up(due: int = due) -> bool:
                    return len(self.kills) >= due or self.broker_down

                await eventually(kills_kept_up, timeout=120, interval=0.05)
        half.set()

    async def _record_late_expiring(self) -> list[RecordedPause]:
        """Pauses with a window of a few seconds recorded while the chaos runs: an owner learns
        of them by reading its pauses partitions as it goes, not at its take."""
        late: list[RecordedPause] = []
        gap = self.config.publish_seconds / max(1, self.config.expiring_late)
        async with PauseRecorder(self.dep.settings, self.dep.issuer) as recorder:
            for n in range(self.config.expiring_late):
                cp = sample_checkpoint(f"late-expiring-{n}")
                window = timedelta(seconds=self.rng.randint(2, 6))
                async with self._recording:
                    late.append(await recorder.record(cp, request_json=REQUEST, ttl=window))
                await asyncio.sleep(gap)  # spreading them over the run
        return late

    async def _broker_outage(self, half: asyncio.Event) -> None:
        if self.config.outage is None:
            return
        await half.wait()
        async with self._recording:
            self.broker_down = True
            went = time.time()
            try:
                await self.config.outage()
            finally:
                self.broker_down = False
                self.outage = (went, time.time())

    def _fault_chunk(self, step: int, chunks: int) -> int:
        """The chunk of answers after which fault step ``step`` begins (spread evenly)."""
        return step * chunks // len(self.config.faults)

    async def _faults_begun_before(self, chunk: int, chunks: int) -> None:
        """Chunk ``chunk`` waits for every fault step due before it to have begun."""
        for step, began in enumerate(self._fault_began):
            if self._fault_chunk(step, chunks) < chunk:
                await began.wait()

    def _chunk_out(self, chunk: int, chunks: int) -> None:
        for step, go in enumerate(self._fault_go):
            if self._fault_chunk(step, chunks) == chunk:
                go.set()

    async def _run_faults(self) -> None:
        for step, fault in enumerate(self.config.faults):
            await self._fault_go[step].wait()
            began = time.time()
            self._fault_began[step].set()
            await fault()
            self.fault_times.append((began, time.time()))

    # -- the whole run -----------------------------------------------------------------------

    async def run(self) -> ChaosResult:
        try:
            return await self._run()
        except BaseException:
            print("\n".join(w.proc.tail(25) for w in self.everyone[-2 * self.config.slots :]))
            for p in self.publishers:
                print(p.tail(10))
            raise
        finally:
            for w in self.everyone:
                w.proc.kill()
            for p in self.publishers:
                p.kill()

    async def _run(self) -> ChaosResult:
        cfg, dep, rng = self.config, self.dep, self.rng
        began = time.monotonic()
        async with PauseRecorder(dep.settings, dep.issuer) as recorder:
            await recorder.ensure_ready()  # the topics, before any worker looks for them
        for slot in range(cfg.slots):
            self.start_worker(slot)
        pauses = await record_pauses(dep, cfg.answered + cfg.competing, "chaos")
        # Windows closing 10-30 s from now: during the kills, whoever owns the partition then.
        expiring = await record_pauses(
            dep,
            cfg.expiring,
            "expiring",
            writers=3,
            ttl=lambda: timedelta(seconds=rng.randint(10, 30)),
        )
        recorded_in = time.monotonic() - began
        answered, competing = pauses[: cfg.answered], pauses[cfg.answered :]
        n = dep.settings.partitions
        wrong = [
            p.token_id
            for p in answered
            if default_partition(answer_key(p.thread_id, f"mis-{p.token_id}"), n) != p.partition
        ]
        misrouted = set(rng.sample(wrong, k=min(cfg.misrouted, len(wrong))))

        await self._start_competitors(competing)
        half = asyncio.Event()
        tasks = [
            asyncio.create_task(self._publish(answered, competing, misrouted, half)),
            asyncio.create_task(self._record_late_expiring()),
            asyncio.create_task(self._broker_outage(half)),
            asyncio.create_task(self._run_faults()),
        ]
        try:
            await self._kill_until_done(tasks)
            await tasks[0]
            late = await tasks[1]
            await tasks[2]
            await tasks[3]
            for p in self.publishers:
                if await p.wait(timeout=150) != 0:
                    raise AssertionError(f"a publisher failed:\n{p.tail()}")
                self.retries += json.loads(p.text().strip().splitlines()[-1])["retries"]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        chaos_done = time.monotonic()
        await self._drain([*expiring, *late])
        drained_in = time.monotonic() - chaos_done
        audit = await audit_and_heal(dep, self.bootstrap)  # the workers are still running
        codes = {w.slot: await w.proc.terminate(timeout=60) for w in self.workers.values()}
        if set(codes.values()) != {0}:
            tails = "\n".join(w.proc.tail() for w in self.workers.values())
            raise AssertionError(f"workers did not stop cleanly: {codes}\n{tails}")

        records = await read_to_end(self.bootstrap, dep.topics.answers, timeout=60)
        inputs = [AnswerRecord.of(r) for r in records]
        expected = expected_from_log(inputs, n, [p.token_id for p in [*expiring, *late]])
        return ChaosResult(
            inputs=inputs,
            expected=expected,
            outputs=await Outputs.read(self.bootstrap, dep),
            kills=self.kills,
            workers=self.everyone,
            reused_stores=self.reused,
            recorded_in=recorded_in,
            drained_in=drained_in,
            took=time.monotonic() - began,
            commits=self._commits(),
            publish_retries=self.retries,
            outage=self.outage,
            faults=tuple(self.fault_times),
            audit=audit,
        )

    async def _drain(self, expiring: list[RecordedPause]) -> None:
        """Until every answer is processed and every expiring pause expired (polled), with
        every worker still alive."""
        dep = self.dep
        await wait_until_consumed(
            self.bootstrap, dep.settings.application_id, dep.topics.answers, timeout=120
        )
        want = {p.token_id for p in expiring}

        async def all_expired() -> bool:
            self.check_alive()
            events = await committed_events(self.bootstrap, dep.topics.consumptions)
            consumed = of_type(events, TokenConsumed)
            return want <= {c.token_id for c in consumed if c.outcome == "expired"}

        await eventually(all_expired, timeout=60, interval=1.0)
        self.check_alive()

    def _commits(self) -> dict[int, list[float]]:
        commits: dict[int, list[float]] = {}
        for w in self.everyone:
            for m in w.marks.read():
                if m.kind == "committed":
                    commits.setdefault(m.partition, []).append(m.at)
        return {p: sorted(times) for p, times in commits.items()}


def reopen_stores(workers: Iterable[Worker]) -> int:
    """Open every store a SIGKILL left behind (RocksDB recovers it from its log)."""
    opened = 0
    for state in {w.proc.state for w in workers if w.proc.state is not None}:
        if (state / "CURRENT").exists():
            with Store.open(state) as store:
                store.offsets()
            opened += 1
    return opened
