"""The least-privilege ACLs of each role, for a cluster admin to grant (``turnlog acls``).

Pure: names from the topic set and the application id, no client. Each line is one Kafka ACL
(allow), so what is printed is exactly what the secured-broker tests grant each principal --
and what they prove is enough: a role that needed one more right would fail there.

- publisher: writes answers, nothing else (it cannot read a pause or write a resumed turn);
- agent (PauseRecorder): writes pauses in its own transactions, and describes the topic set
  (readiness verifies the topics an operator made: ``TURNLOG_CREATE_TOPICS=false``);
- worker (ResumeWorker): reads answers, pauses and consumptions, writes consumptions, resumed
  and rejections in transactions of its per-partition transactional ids, commits its group;
- reader (ResumedTurns, ``continue_turn``): reads resumed in its own group, and claims the turns
  it continues: writes the claim to answers and reads its decision from consumptions and
  rejections (no group: a plain read);
- projector (``turnlog project``, ``show``, ``pending``): reads pauses and consumptions.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnlog.kafka.topics import TopicSet


@dataclass(frozen=True, slots=True)
class Acl:
    principal: str
    operation: str
    resource_type: str
    name: str
    pattern: str = "LITERAL"

    def line(self) -> str:
        """``principal operation resource-type name pattern`` (what ``kafka.sh acls`` reads)."""
        return f"{self.principal} {self.operation} {self.resource_type} {self.name} {self.pattern}"

    def kafka_acls(self, bootstrap: str) -> str:
        """The same ACL as a ``kafka-acls.sh`` command."""
        kind = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}
        return (
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties "
            f"--add --allow-principal {self.principal} --operation {self.operation} "
            f"{kind[self.resource_type]} {self.name} --resource-pattern-type {self.pattern}"
        )


def _principal(name: str) -> str:
    return name if ":" in name else f"User:{name}"


def role_acls(
    topics: TopicSet,
    application_id: str,
    *,
    publisher: str | None = None,
    agent: str | None = None,
    worker: str | None = None,
    reader: str | None = None,
    reader_group: str | None = None,
    projector: str | None = None,
    auditor: str | None = None,
) -> dict[str, list[Acl]]:
    """Per role given, its ACLs (principals without a type are ``User:``)."""
    roles: dict[str, list[Acl]] = {}
    prefix = topics.prefix

    def grant(role: str, who: str, *entries: tuple[str, ...]) -> None:
        roles[role] = [Acl(_principal(who), *entry) for entry in entries]

    if publisher:
        grant(
            "publisher",
            publisher,
            ("WRITE", "TOPIC", topics.answers),
            ("DESCRIBE", "TOPIC", topics.answers),
        )
    if agent:
        grant(
            "agent",
            agent,
            ("WRITE", "TOPIC", topics.pauses),
            ("DESCRIBE", "TOPIC", prefix, "PREFIXED"),
            ("DESCRIBE_CONFIGS", "TOPIC", prefix, "PREFIXED"),
            ("WRITE", "TRANSACTIONAL_ID", f"{application_id}.pauses.", "PREFIXED"),
            ("DESCRIBE", "TRANSACTIONAL_ID", f"{application_id}.pauses.", "PREFIXED"),
        )
    if worker:
        grant(
            "worker",
            worker,
            ("READ", "TOPIC", topics.answers),
            ("READ", "TOPIC", topics.pauses),
            ("READ", "TOPIC", topics.consumptions),
            ("WRITE", "TOPIC", topics.consumptions),
            # an answer to a forgotten thread is refused with a tombstone for its record
            ("WRITE", "TOPIC", topics.answers),
            ("WRITE", "TOPIC", topics.resumed),
            ("WRITE", "TOPIC", topics.rejections),
            # a sealing worker (TURNLOG_SEAL) writes each resumed turn's key beside it
            ("WRITE", "TOPIC", topics.keys),
            ("DESCRIBE", "TOPIC", prefix, "PREFIXED"),
            ("READ", "GROUP", application_id),
            ("WRITE", "TRANSACTIONAL_ID", f"{application_id}.resume.", "PREFIXED"),
            ("DESCRIBE", "TRANSACTIONAL_ID", f"{application_id}.resume.", "PREFIXED"),
        )
    if reader:
        grant(
            "reader",
            reader,
            ("READ", "TOPIC", topics.resumed),
            ("DESCRIBE", "TOPIC", topics.resumed),
            ("READ", "GROUP", reader_group or f"{application_id}.agents"),
            ("WRITE", "TOPIC", topics.answers),
            ("DESCRIBE", "TOPIC", topics.answers),
            ("READ", "TOPIC", topics.consumptions),
            ("READ", "TOPIC", topics.rejections),
            # the keys of sealed resumed turns (TURNLOG_SEAL), to open them
            ("READ", "TOPIC", topics.keys),
            ("DESCRIBE", "TOPIC", topics.keys),
        )
    if projector:
        grant(
            "projector",
            projector,
            ("READ", "TOPIC", topics.pauses),
            ("READ", "TOPIC", topics.consumptions),
            ("DESCRIBE", "TOPIC", prefix, "PREFIXED"),
        )
    if auditor:
        # ``turnlog audit``: every topic read from the start, and the worker group's offsets
        # (DESCRIBE on the group lists them; it never joins). ``--heal`` also writes its repair
        # requests to answers, as a publisher does.
        grant(
            "auditor",
            auditor,
            *(("READ", "TOPIC", t) for t in (topics.answers, topics.pauses, topics.consumptions,
                                             topics.resumed, topics.rejections)),
            ("DESCRIBE", "TOPIC", prefix, "PREFIXED"),
            ("DESCRIBE", "GROUP", application_id),
            ("WRITE", "TOPIC", topics.answers),
        )  # fmt: skip
    return roles
