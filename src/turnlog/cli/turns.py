"""Verbs on paused turns: pause, answer, pending, show, tail, forget.

It is one module because the six verbs are thin shells over the library sharing one set of
options and one caught-up rule for what they read; a verb that grows logic moves it below.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from turnlog.cli.answering import (
    DECISION_OPTIONS,
    RETAKE_HINT,
    age_ms,
    asked_rows,
    axes_of,
    call_rows,
    chosen,
    claim_of_row,
    claim_words,
    decision_response,
    open_pauses,
    recorded_of,
    reissued,
    unfinished_claims,
    wait_for_outcome,
    waiting_row,
)
from turnlog.cli.app import (
    EXIT_FAILURE,
    EXIT_REFUSED,
    EXIT_USAGE,
    BrokerTimeoutOpt,
    JsonOpt,
    app,
    err,
    fail,
    out,
    print_json,
    print_json_line,
    run_async,
    run_state,
)
from turnlog.cli.common import caught_up, freshness, issuer, open_for_reading, verifier
from turnlog.cli.observe import LogFormatOpt, LogLevelOpt, setup_logs
from turnlog.contracts.asked import TABLE_CHARS
from turnlog.contracts.visible import clip, visible
from turnlog.errors import PauseInvalid


@app.command("pause")
@run_async
async def pause(
    ctx: typer.Context,
    checkpoint_file: Annotated[
        Path | None, typer.Argument(help="JSON checkpoint (canonical body).")
    ] = None,
    request: Annotated[
        str | None, typer.Option(help="JSON; default: the call's arguments.")
    ] = None,
    interaction: Annotated[
        str | None, typer.Option(help="Defaults to the checkpoint's name.")
    ] = None,
    ttl: Annotated[int | None, typer.Option(help="Window in seconds (at least 1).")] = None,
    example: Annotated[
        str | None,
        typer.Option(help="Print the example checkpoint of an interaction and exit."),
    ] = None,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Record a pause from a checkpoint file and print its token.

    Everything is checked before Kafka is contacted (exit 2 naming the field): the file, the
    request, the interaction and the window -- a pause is never written without its token.
    ``--example ask_user`` (or ``approve_tool_call``) prints a checkpoint file to start from.
    """
    from turnlog.producers.pauses import PauseRecorder, read_checkpoint

    if example is not None:
        _print_example(example)
        return
    if checkpoint_file is None:
        hint = "turnlog pause --example ask_user > cp.json"
        raise fail(f"pause needs a CHECKPOINT_FILE (start from: {hint})", EXIT_USAGE)
    try:
        raw = checkpoint_file.read_bytes()
    except OSError as exc:
        raise fail(f"cannot read checkpoint {checkpoint_file}: {exc}", EXIT_USAGE) from None
    try:
        checkpoint = read_checkpoint(raw)
    except PauseInvalid as exc:
        raise fail(f"checkpoint {checkpoint_file}: {exc}", EXIT_USAGE) from None
    if ttl is not None and ttl < 1:
        raise fail(f"--ttl={ttl}: a pause's window is at least 1 second", EXIT_USAGE)
    window = timedelta(seconds=ttl) if ttl is not None else None
    recorder = PauseRecorder(run_state(ctx).settings, issuer(run_state(ctx).settings))
    try:
        recorder.prepare(checkpoint, request_json=request, interaction=interaction, ttl=window)
    except PauseInvalid as exc:
        option = {"request_json": "--request", "interaction": "--interaction", "ttl": "--ttl"}
        name = option.get(exc.field, f"checkpoint {checkpoint_file}: {exc.field}")
        raise fail(f"{name}: {exc.detail}", EXIT_USAGE) from None
    try:
        recorded = await recorder.record(
            checkpoint, request_json=request, interaction=interaction, ttl=window
        )
    finally:
        await recorder.close()
    data = {
        "token": recorded.token,
        "token_id": recorded.token_id,
        "thread_id": recorded.thread_id,
        "partition": recorded.partition,
        "offset": recorded.offset,
        "expires_at": recorded.pause.expires_at.isoformat(),
        **axes_of(recorded.pause),  # what `turnlog answer` must state: --scope, --session, ...
    }
    if as_json:
        print_json(data)
    else:
        out.print(recorded.token, soft_wrap=True)


def _print_example(interaction: str) -> None:
    import sys

    from turnlog.cli.examples import EXAMPLES, checkpoint_text, request_text

    if interaction not in EXAMPLES:
        known = ", ".join(sorted(EXAMPLES))
        raise fail(f"--example: no example for {interaction!r} (known: {known})", EXIT_USAGE)
    sys.stdout.write(checkpoint_text(interaction))
    hint = f"turnlog pause FILE --interaction {interaction} --request '{request_text(interaction)}'"
    err.print(f"pause it with: {hint}", soft_wrap=True, markup=False, highlight=False)


@app.command("answer")
@run_async
async def answer(
    ctx: typer.Context,
    token: Annotated[
        str | None, typer.Argument(help="The pause token (or --thread instead).")
    ] = None,
    response: Annotated[str, typer.Option(help="The response, JSON.")] = "",
    approve: Annotated[
        bool, typer.Option("--approve", help="Approve the paused tool call as it was asked.")
    ] = False,
    edit: Annotated[
        str | None,
        typer.Option(metavar="ARGUMENTS", help="Approve the call with these arguments (JSON)."),
    ] = None,
    reject: Annotated[
        str | None,
        typer.Option(metavar="MESSAGE", help="Reject the call; the model reads MESSAGE."),
    ] = None,
    message: Annotated[
        str | None, typer.Option(help="With --approve or --edit: a word for the model.")
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option(help="Answer this thread's pending pause (needs the signing key)."),
    ] = None,
    scope: Annotated[str | None, typer.Option(help="Tenant scope hash.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id.")] = None,
    run: Annotated[str | None, typer.Option(help="Run id.")] = None,
    call: Annotated[str | None, typer.Option(help="The answered call id.")] = None,
    answer_id: Annotated[
        str | None, typer.Option(help="Idempotency id (retries reuse it).")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the worker's decision and print it.")
    ] = False,
    wait_timeout: Annotated[float, typer.Option(help="Seconds --wait waits.")] = 60.0,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Publish an answer; a bad token, a missing axis, a response that does not fit the
    interaction's schema (or approves another call), a response nested too deeply or an answer
    over TURNLOG_MAX_ANSWER_BYTES is refused before publishing (exit 3). ``--wait`` prints the
    outcome: resumed or held for the other calls of its pause (exit 0), or rejected with its
    reason (exit 3).

    An approval (``approve_tool_call``) is decided with ``--approve``, ``--edit ARGUMENTS`` or
    ``--reject MESSAGE`` instead of ``--response``: the response is written for the call the
    token binds, its tool and arguments' hash (``turnlog pending`` shows the call).

    ``--thread T`` instead of a token answers T's pending pause (``--call`` picks one of
    several): its token is signed again from the recorded pause with this deployment's signing
    key, and the four axes are the pause's own unless given."""
    from turnlog.clock import utc_now
    from turnlog.contracts.interactions import default_interactions
    from turnlog.contracts.resume import check_response
    from turnlog.producers.answers import AnswerPublisher

    if (token is None) == (thread is None):
        raise fail("answer takes a TOKEN or --thread THREAD (one of the two)", EXIT_USAGE)
    decided = sum((approve, edit is not None, reject is not None))
    if decided > 1 or (decided and response):
        raise fail(f"answer takes --response JSON or one of {DECISION_OPTIONS}", EXIT_USAGE)
    if message is not None and not (approve or edit is not None):
        raise fail("--message goes with --approve or --edit (--reject takes its own)", EXIT_USAGE)
    if not response and not decided:
        raise fail(
            f"answer needs --response JSON (or, for an approval, {DECISION_OPTIONS})", EXIT_USAGE
        )
    try:
        json.loads(response or "null")
    except RecursionError:
        pass  # valid or not, too deep to read: the pre-check refuses it by name (exit 3)
    except ValueError as exc:
        raise fail(f"--response must be JSON: {exc}", EXIT_USAGE) from None
    if thread is not None:
        token, axes = await _token_of_thread(ctx, thread, call)
        scope, session, run = scope or axes["scope"], session or axes["session"], run or axes["run"]
        call = call or axes["call"]
    assert token is not None  # one of the two, checked above
    if decided:
        bound = verifier(run_state(ctx).settings).verify(token, utc_now())
        try:
            response = decision_response(
                bound, approve=approve, edit=edit, reject=reject, message=message
            )
        except ValueError as exc:
            raise fail(str(exc), EXIT_USAGE) from None
    publisher = AnswerPublisher(run_state(ctx).settings, verifier(run_state(ctx).settings))
    candidate = publisher.build(
        token, response, scope_hash=scope, session_id=session, run_id=run, call_id=call,
        answer_id=answer_id,
    )  # fmt: skip
    publisher.precheck(candidate)  # raises Refused before anything touches Kafka
    claims = verifier(run_state(ctx).settings).verify(token, utc_now())
    check_response(claims, default_interactions(), candidate.response_json)  # step 4, too
    async with publisher:
        sent = await publisher.publish_unchecked(candidate)
    data: dict[str, Any] = {
        "answer_id": sent.answer_id,
        "partition": sent.partition,
        "offset": sent.offset,
    }
    if not as_json:
        out.print(
            f"published answer {sent.answer_id} to partition {sent.partition} @ {sent.offset}"
        )
    if wait:
        await wait_for_outcome(ctx, sent.answer_id, claims.thread_id, wait_timeout, data, as_json)
    elif as_json:
        print_json(data)


async def _token_of_thread(
    ctx: typer.Context, thread: str, call: str | None
) -> tuple[str, dict[str, str | None]]:
    """The token of ``thread``'s one pending pause (signed again) and the pause's axes."""
    from turnlog.clock import utc_now

    settings = run_state(ctx).settings
    with open_for_reading(settings) as (store, writer):
        if writer:
            await caught_up(store, settings)
        found = chosen(open_pauses(store, utc_now(), thread), thread, call, freshness(store))
    if isinstance(found, str):
        raise fail(found, EXIT_FAILURE if found.startswith("no pending") else EXIT_USAGE)
    return reissued(settings, found.recorded), axes_of(found.recorded)


#: The pauses one ``turnlog pending`` prints unless told otherwise.
PENDING_LIMIT = 50


@app.command("pending")
@run_async
async def pending(
    ctx: typer.Context,
    with_tokens: Annotated[
        bool,
        typer.Option(
            "--with-tokens",
            help="Sign each pause's token again and print it with --json (needs the signing key).",
        ),
    ] = False,
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="At most this many pauses (one page).")
    ] = PENDING_LIMIT,
    after: Annotated[
        str | None,
        typer.Option(metavar="CURSOR", help="The next page: the cursor the last page printed."),
    ] = None,
    scope: Annotated[str | None, typer.Option(help="Only pauses of this scope.")] = None,
    session: Annotated[str | None, typer.Option(help="Only pauses of this session.")] = None,
    run: Annotated[str | None, typer.Option(help="Only pauses of this run.")] = None,
    call: Annotated[str | None, typer.Option(help="Only the pause of this call.")] = None,
    interaction: Annotated[
        str | None, typer.Option(help="Only pauses asking this interaction (e.g. ask_user).")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(metavar="AGE", help="Only pauses made at least AGE ago (90s, 15m, 2h, 3d)."),
    ] = None,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Pauses waiting for an answer (unconsumed, window open), soonest deadline first, with
    the four axes an answer states; a page at a time (``--limit``), the next one with the
    cursor the page prints (``--after``). ``--json --with-tokens`` adds each pause's token,
    signed again from the recorded pause: everything ``turnlog answer`` needs (the log holds
    token ids, never tokens)."""
    from turnlog.clock import utc_now

    if with_tokens and not as_json:
        raise fail("--with-tokens prints tokens with --json only", EXIT_USAGE)
    try:
        older_than_ms = None if older_than is None else age_ms(older_than, "--older-than")
    except ValueError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    settings = run_state(ctx).settings
    with open_for_reading(settings) as (store, writer):
        if writer:
            await caught_up(store, settings)
        now = utc_now()
        now_ms = int(now.timestamp() * 1000)
        try:
            page = store.pending_page(
                now_ms, scope=scope, session=session, run=run, call=call,
                interaction=interaction, older_than_ms=older_than_ms, after=after, limit=limit,
            )  # fmt: skip
        except ValueError as exc:  # a cursor that is not one
            raise fail(f"--after: {exc}", EXIT_USAGE) from None
        rows = [waiting_row(p, now_ms) for p in page.items]
        asked_rows(store, rows)
        left = {p.token_id for p in store.unfinalized() if not p.spent}
        for row in rows:
            row["unfinalized"] = row["token_id"] in left
        unfinalized = sum(
            1 for p in store.unfinalized() if not p.spent and p.expires_at_ms > now_ms
        )
        if with_tokens:
            for row in rows:
                recorded = recorded_of(store, row["token_id"])
                row["token"] = None if recorded is None else reissued(settings, recorded)
        # The first page says which resumed turns are claimed and not done: a read of the
        # ledger (bounded by retirement), so the pages after it stay a page's cost.
        claims = unfinished_claims(store, now_ms) if after is None else []
        fresh = freshness(store)
    if as_json:
        print_json(
            {
                "pending": rows,
                "next": page.next,
                "unfinalized": unfinalized,
                "claimed_not_finished": claims,
                "as_of": fresh,
            }
        )
        return
    table = Table("thread", "call", "asks", "expires in")
    for row in rows:
        mark = " (unfinalized)" if row["unfinalized"] else ""
        asks = escape(clip(row["asks"], TABLE_CHARS))
        table.add_row(escape(row["thread_id"]), escape(row["call"]) + mark, asks, row["expires_in"])
    out.print(table)
    if page.next is not None:
        out.print(f"more: --after {page.next}", soft_wrap=True, highlight=False)
    if claims:
        out.print(
            f"resumed, claimed, not finished ({RETAKE_HINT}):", highlight=False, soft_wrap=True
        )
        for claim in claims:
            out.print(
                f"  thread {visible(claim['thread_id'])}: {claim_words(claim)} "
                f"(claim {claim['claim_id']})",
                markup=False, highlight=False, soft_wrap=True,
            )  # fmt: skip
    if unfinalized:
        err.print(
            f"{unfinalized} of the pending pauses written unfinalized (the crash window): no "
            "token is out for them until their writer finalizes them",
            soft_wrap=True,
        )
    err.print(f"as of {fresh}", soft_wrap=True)


@app.command("show")
@run_async
async def show(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """The latest checkpoint of a thread and its history (oldest first). Exit 1 if unknown."""
    from turnlog.clock import utc_now
    from turnlog.contracts.events import PauseRecorded
    from turnlog.contracts.group import calls_of, group_state
    from turnlog.wire.codec import decode

    with open_for_reading(run_state(ctx).settings) as (store, writer):
        if writer:
            await caught_up(store, run_state(ctx).settings)
        history = [decode(raw, PauseRecorded) for raw in store.list_checkpoints(thread)]
        tokens = [call.token_id for p in history for call in calls_of(p)]
        entries = dict(zip(tokens, store.ledgers(tokens), strict=True))
        fresh = freshness(store)
        gone = not history and store.forgotten(thread, int(utc_now().timestamp() * 1000))
    outcomes = {t: None if e is None else str(e.outcome) for t, e in entries.items()}
    if gone:
        raise fail(
            f"thread {thread!r} was forgotten (turnlog forget): nothing of it is kept "
            f"(as of {fresh})",
            EXIT_FAILURE,
        )
    if not history:
        raise fail(f"no checkpoint recorded for thread {thread!r} (as of {fresh})", EXIT_FAILURE)
    rows: list[dict[str, Any]] = []
    for p in history:
        calls = call_rows(p, outcomes)
        rows.append(
            {
                "sequence": p.checkpoint.sequence,
                "checkpoint_id": p.checkpoint.checkpoint_id,
                "token_id": p.token_id,
                "interaction": p.response_schema,
                "messages": len(p.checkpoint.messages),
                "state": group_state([outcomes.get(c["token_id"]) for c in calls]),
                "calls": calls,
                # The continuation claim sits on the resumed call's row (any call's token
                # claims the group's turn).
                "claim": next(
                    (c for c in (claim_of_row(entries[c["token_id"]]) for c in calls) if c), None
                ),
            }
        )
    if as_json:
        print_json({"thread_id": thread, "latest": rows[-1], "history": rows, "as_of": fresh})
        return
    table = Table("seq", "checkpoint", "call", "asks", "state", title=f"thread {escape(thread)}")
    for row in rows:
        for call in row["calls"]:
            asks = clip(call["asks"], TABLE_CHARS)
            cells = (row["sequence"], row["checkpoint_id"], call["call"], asks, call["state"])
            table.add_row(*(escape(str(v)) for v in cells))
    out.print(table)
    for row in rows:
        if row["claim"] is not None:
            out.print(
                f"checkpoint {row['checkpoint_id']} resumed: {claim_words(row['claim'])} "
                f"(claim {row['claim']['claim_id']})",
                markup=False, highlight=False, soft_wrap=True,
            )  # fmt: skip
    err.print(f"as of {fresh}", soft_wrap=True)


@app.command("tail")
@run_async
async def tail(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="resumed | rejections")],
    from_beginning: Annotated[bool, typer.Option(help="Start at the earliest offset.")] = False,
    max_records: Annotated[int | None, typer.Option("--max", help="Stop after N records.")] = None,
    idle: Annotated[float | None, typer.Option(help="Stop after N idle seconds.")] = None,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Print records of the resumed or rejections stream (read_committed)."""
    setup_logs(ctx, log_level, log_format)
    from turnlog.cli.tailing import follow
    from turnlog.consumers.content_keys import KeyRing
    from turnlog.contracts.events import TurnResumed
    from turnlog.errors import DecodeError
    from turnlog.kafka import clients
    from turnlog.kafka.outage import ride_out
    from turnlog.kafka.reader import close_consumer
    from turnlog.kafka.topics import TopicSet
    from turnlog.wire.codec import decode
    from turnlog.wire.records import to_record

    settings = run_state(ctx).settings
    topics = TopicSet.from_settings(settings)
    names = {"resumed": topics.resumed, "rejections": topics.rejections}
    if stream not in names:
        raise fail(f"tail takes 'resumed' or 'rejections', not {stream!r}", EXIT_USAGE)

    async def started() -> Any:
        consumer = clients.consumer(
            run_state(ctx).settings,
            names[stream],
            client_id="turnlog-tail",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
        )
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        return consumer

    keys = KeyRing(settings, topics)

    async def show(record: Any) -> None:
        try:
            event = decode(record.value)
            if isinstance(event, TurnResumed) and event.sealed is not None:
                event = await keys.open(event, record.partition)
        except DecodeError as exc:
            err.print(f"[yellow]{record.partition}@{record.offset}: {exc}[/yellow]")
            return
        data = {"type": type(event).__name__, **to_record(event)}
        if as_json:  # JSON Lines: one compact object a line, for jq and pipes
            print_json_line(data)
        else:
            _print_event(data)

    consumer = await ride_out(started, settings=settings, who="tail")
    try:
        await follow(
            consumer,
            bootstrap=settings.connection.bootstrap_servers,
            budget_seconds=settings.broker_timeout_seconds,
            idle_seconds=3600 if idle is None else idle,
            max_records=max_records,
            show=show,
        )
    finally:
        await close_consumer(consumer)
        await keys.close()


def _print_event(data: dict[str, Any]) -> None:
    kind = data["type"]
    if kind == "AnswerRejected":
        out.print(
            f"[red]rejected[/red] answer {data['answer_id']} — {data['reason']} "
            f"(step {data['step']}): {data['detail']}"
        )
    elif kind == "TurnResumed":
        out.print(
            f"[green]resumed[/green] thread {data['thread_id']} run {data['run_id']} "
            f"— {len(data['history'])} messages"
        )
    else:
        out.print(f"{kind} {json.dumps(data, default=str)}")


@app.command("forget")
@run_async
async def forget(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    erase_within: Annotated[
        str | None,
        typer.Option(
            "--erase-within",
            metavar="DURATION",
            help="Make the broker erase the thread's bytes within DURATION (1m to 30d): lower "
            "the compacted topics' segment.ms and max.compaction.lag.ms to fit, roll the "
            "thread's partition, and wait until nothing of it holds content (exit 1 if not).",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Write nothing: count the thread's records that still hold content on the "
            "compacted topics (exit 0 when none, 1 otherwise).",
        ),
    ] = False,
    as_json: JsonOpt = False,
    broker_timeout: BrokerTimeoutOpt = None,
) -> None:
    """Write tombstones for every key of a thread on the compacted topics (exit 1, saying how
    many, if any tombstone was not delivered: run it again)."""
    from turnlog.kafka.outage import ride_out
    from turnlog.kafka.topics import TopicSet
    from turnlog.producers import erasure
    from turnlog.producers.forget import forget_keys, write_tombstones

    settings = run_state(ctx).settings
    topics = TopicSet.from_settings(settings)
    if check:
        if erase_within is not None:
            raise fail("--check writes nothing: it does not go with --erase-within", EXIT_USAGE)
        left = await ride_out(
            lambda: erasure.remaining(settings, topics, thread), settings=settings, who="forget"
        )
        _print_left(thread, left, as_json)
        if any(left.values()):
            raise typer.Exit(EXIT_FAILURE)
        return
    plan = _erasure_plan(erase_within)
    if not yes and not typer.confirm(f"forget every fact of thread {thread!r}?"):
        raise typer.Exit(EXIT_REFUSED)
    if plan is None:
        keys = await forget_keys(settings, topics, thread)
        _print_tombstones(thread, keys, as_json)
        return
    found: dict[str, set[bytes]] = {}

    async def tombstones() -> dict[str, set[bytes]]:
        found.update(await forget_keys(settings, topics, thread))
        _print_tombstones(thread, found, as_json=False, quiet=as_json)
        return found

    async def again(keys: dict[str, set[bytes]]) -> None:
        await write_tombstones(settings, topics, thread, keys)

    try:
        done = await erasure.erase(settings, topics, thread, plan, forget=tombstones, again=again)
    except PermissionError as exc:
        raise fail(str(exc), EXIT_FAILURE) from None
    if as_json:
        print_json(
            {
                "thread_id": thread,
                "tombstones": {t: len(k) for t, k in found.items()},
                "lowered": done.lowered,
                "left": done.left,
                "erased": done.done,
                "seconds": round(done.seconds, 1),
            }
        )
    else:
        for topic, lowered in done.lowered.items():
            settings_text = " ".join(f"{k}={v}" for k, v in sorted(lowered.items()))
            out.print(f"lowered on {topic}: {settings_text}", soft_wrap=True)
    if not done.done:
        still = ", ".join(f"{n} on {t}" for t, n in done.left.items() if n)
        raise fail(
            f"thread {thread!r} still has records holding content after "
            f"{done.seconds:.0f}s ({still}): the broker's log cleaner did not compact them in "
            f"time (log.cleaner.enable, log.cleaner.backoff.ms); check again with --check",
            EXIT_FAILURE,
        )
    if not as_json:
        out.print(
            f"erased: no record of thread {thread!r} holds content on the compacted topics "
            f"({done.seconds:.0f}s after the tombstones)",
            soft_wrap=True,
        )


def _erasure_plan(text: str | None) -> Any:
    from turnlog.errors import SettingError
    from turnlog.notify.config import parse_duration
    from turnlog.producers.erasure import MAX_WINDOW, MIN_WINDOW, Plan

    if text is None:
        return None
    try:
        window = parse_duration(text, "--erase-within")
    except SettingError:
        raise fail(
            f"--erase-within {text!r}: a duration such as 10m, 1h or 1d", EXIT_USAGE
        ) from None
    if not MIN_WINDOW <= window <= MAX_WINDOW:
        raise fail(f"--erase-within {text!r}: from 1m to 30d", EXIT_USAGE)
    return Plan(window)


def _print_tombstones(
    thread: str, keys: dict[str, set[bytes]], as_json: bool, quiet: bool = False
) -> None:
    counts = {topic: len(found) for topic, found in keys.items()}
    if quiet:
        return
    if as_json:
        print_json({"thread_id": thread, "tombstones": counts})
        return
    for topic, n in counts.items():
        out.print(f"{n} tombstone(s) on {topic}", soft_wrap=True)


def _print_left(thread: str, left: dict[str, int], as_json: bool) -> None:
    if as_json:
        print_json({"thread_id": thread, "left": left, "erased": not any(left.values())})
        return
    for topic, n in left.items():
        out.print(f"{n} record(s) of thread {thread!r} holding content on {topic}", soft_wrap=True)
