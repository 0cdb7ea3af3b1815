"""Verbs around the data: the local broker, the topic set, signing keys, the version."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from turnlog._version import __version__
from turnlog.cli.app import (
    EXIT_FAILURE,
    EXIT_USAGE,
    BrokerTimeoutOpt,
    JsonOpt,
    T,
    app,
    broker_app,
    fail,
    keys_app,
    out,
    print_json,
    run_async,
    run_state,
    topics_app,
)
from turnlog.errors import TurnlogError
from turnlog.settings import Settings


def _kafka_script() -> Path:
    script = Path(__file__).resolve().parents[3] / "compose" / "kafka-local" / "kafka.sh"
    if not script.exists():
        raise fail(
            "the local broker script ships with the source checkout (compose/kafka-local); "
            "with Docker use compose/docker-compose.yml",
            EXIT_USAGE,
        )
    return script


def _broker(verb: str) -> None:
    result = subprocess.run([str(_kafka_script()), verb], check=False)
    raise typer.Exit(result.returncode)


@broker_app.command("up")
def broker_up(ctx: typer.Context) -> None:
    """Start the local single-node Kafka (fetches the jars once)."""
    _broker("start")


@broker_app.command("down")
def broker_down(ctx: typer.Context) -> None:
    """Stop the local Kafka."""
    _broker("stop")


@broker_app.command("status")
def broker_status(ctx: typer.Context) -> None:
    """Is the local Kafka running? Exit 3 when stopped."""
    _broker("status")


async def _with_admin(settings: Settings, use: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """``use(admin)`` on a fresh admin client, riding out an unreachable broker."""
    from turnlog.kafka.outage import ride_out
    from turnlog.kafka.topics import admin_client

    async def attempt() -> T:
        admin = admin_client(settings)
        try:
            await admin.start()
            return await use(admin)
        finally:
            await admin.close()

    return await ride_out(attempt, settings=settings, who="topics")


@topics_app.command("ensure")
@run_async
async def topics_ensure(
    ctx: typer.Context, as_json: JsonOpt = False, broker_timeout: BrokerTimeoutOpt = None
) -> None:
    """Create the missing topics (unless TURNLOG_CREATE_TOPICS=false); verify cleanup policy,
    partition count and replication of existing ones."""
    from turnlog.kafka.topics import TopicSet, ensure_topics

    settings = run_state(ctx).settings
    topics = TopicSet.from_settings(settings)
    sealing = (topics.keys_spec(),) if settings.seal else ()
    created = await _with_admin(
        settings,
        lambda admin: ensure_topics(admin, topics, create=settings.create_topics, extra=sealing),
    )
    names = [s.name for s in topics.deployed(seal=settings.seal)]
    if as_json:
        print_json({"created": created, "verified": [n for n in names if n not in created]})
        return
    for name in names:
        out.print(f"{'created ' if name in created else 'verified'}  {name}")


@topics_app.command("describe")
@run_async
async def topics_describe(
    ctx: typer.Context, as_json: JsonOpt = False, broker_timeout: BrokerTimeoutOpt = None
) -> None:
    """Partitions and key configs of the topic set."""
    from turnlog.kafka.topics import TopicSet, describe

    settings = run_state(ctx).settings
    topics = TopicSet.from_settings(settings)
    specs = topics.deployed(seal=settings.seal)
    found = await _with_admin(settings, lambda admin: describe(admin, [s.name for s in specs]))
    keys = ("cleanup.policy", "retention.ms", "min.insync.replicas")
    rows = [
        {
            "topic": spec.name,
            "exists": spec.name in found,
            "partitions": found[spec.name].partitions if spec.name in found else None,
            "replication": found[spec.name].replication if spec.name in found else None,
            "in_sync": found[spec.name].in_sync if spec.name in found else None,
            **{k: found[spec.name].configs.get(k) if spec.name in found else None for k in keys},
        }
        for spec in specs
    ]
    if as_json:
        print_json(rows)
        return
    table = Table("topic", "partitions", "replicas", "in sync (min)", *keys)
    for row in rows:
        if not row["exists"]:
            table.add_row(str(row["topic"]), "[red]missing[/red]", *[""] * (2 + len(keys)))
        else:
            cells = ("partitions", "replication", "in_sync", *keys)
            table.add_row(str(row["topic"]), *(str(row[k]) for k in cells))
    out.print(table)


@topics_app.command("plan")
def topics_plan(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Print the topic set for an operator to create (no broker needed): names, partitions,
    replication and configs, as kafka-topics.sh commands or, with --json, as data."""
    from turnlog.kafka.topics import TopicSet

    settings = run_state(ctx).settings
    topics = TopicSet.from_settings(settings)
    plan: list[dict[str, Any]] = [
        {
            "topic": spec.name,
            "role": spec.role,
            "partitions": topics.partitions,
            "replication_factor": topics.replication_factor,
            "configs": spec.all_configs(),
        }
        for spec in topics.deployed(seal=settings.seal)
    ]
    if as_json:
        print_json(plan)
        return
    out.print(
        f"# {len(plan)} topics, one partition count (co-partitioned by thread); "
        "then run turnlog with TURNLOG_CREATE_TOPICS=false",
        highlight=False,
        soft_wrap=True,
    )
    for item in plan:
        configs = " ".join(f"--config {k}={v}" for k, v in sorted(item["configs"].items()))
        out.print(
            f"kafka-topics.sh --bootstrap-server {settings.bootstrap_servers} "
            f"--command-config client.properties --create --topic {item['topic']} "
            f"--partitions {item['partitions']} "
            f"--replication-factor {item['replication_factor']} {configs}",
            highlight=False,
            soft_wrap=True,
        )


@keys_app.command("new")
def keys_new(
    ctx: typer.Context,
    kid: Annotated[str, typer.Option(help="Key id (letters, digits, - and _).")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Write a new Ed25519 key pair <kid>.private.pem / <kid>.public.pem into the keys dir."""
    from datetime import UTC, datetime

    from turnlog.tokens import write_keypair

    kid = kid or f"k{datetime.now(UTC):%Y%m%d%H%M%S}"
    directory = run_state(ctx).settings.keys_dir
    try:
        directory.mkdir(parents=True, exist_ok=True)
        private, public = write_keypair(directory, kid)
    except (TurnlogError, ValueError, OSError) as exc:
        raise fail(str(exc), EXIT_FAILURE) from None
    if as_json:
        print_json({"kid": kid, "private": str(private), "public": str(public)})
    else:
        out.print(f"kid {kid}\n  private {private}\n  public  {public}")


@app.command("version")
def version(ctx: typer.Context) -> None:
    """Print the package version."""
    out.print(__version__)


@app.command("acls")
def acls(
    ctx: typer.Context,
    publisher: Annotated[str | None, typer.Option(help="Principal that publishes answers.")] = None,
    worker: Annotated[str | None, typer.Option(help="Principal of the resume workers.")] = None,
    agent: Annotated[str | None, typer.Option(help="Principal that records pauses.")] = None,
    reader: Annotated[str | None, typer.Option(help="Principal that reads resumed turns.")] = None,
    reader_group: Annotated[
        str | None,
        typer.Option(help="The reader's consumer group (default <app id>.agents, as the library)."),
    ] = None,
    projector: Annotated[
        str | None, typer.Option(help="Principal of turnlog project / show / pending.")
    ] = None,
    auditor: Annotated[
        str | None, typer.Option(help="Principal of turnlog audit (--heal included).")
    ] = None,
    plain: Annotated[
        bool, typer.Option("--plain", help="One ACL a line (what kafka.sh acls reads).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the exact ACLs each role needs (least privilege), for a cluster admin to grant."""
    from turnlog.kafka.acls import role_acls
    from turnlog.kafka.topics import TopicSet

    settings = run_state(ctx).settings
    roles = role_acls(
        TopicSet.from_settings(settings),
        settings.application_id,
        publisher=publisher,
        worker=worker,
        agent=agent,
        reader=reader,
        reader_group=reader_group,
        projector=projector,
        auditor=auditor,
    )
    if not roles:
        raise fail(
            "name at least one role: --publisher, --worker, --agent, --reader, --projector, "
            "--auditor",
            EXIT_USAGE,
        )
    if as_json:
        print_json(
            {
                role: [
                    {
                        "principal": a.principal,
                        "operation": a.operation,
                        "resource_type": a.resource_type,
                        "name": a.name,
                        "pattern": a.pattern,
                    }
                    for a in entries
                ]
                for role, entries in roles.items()
            }
        )
        return
    if plain:
        for role, entries in roles.items():
            out.print(f"# {role}", highlight=False)
            for a in entries:
                out.print(a.line(), highlight=False, soft_wrap=True)
        return
    table = Table("role", "principal", "operation", "resource", "name", "pattern")
    for role, entries in roles.items():
        for a in entries:
            table.add_row(role, a.principal, a.operation, a.resource_type, a.name, a.pattern)
    out.print(table)
