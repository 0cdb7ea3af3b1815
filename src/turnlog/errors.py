"""The exception tree: one base, and refusals that name the rule that refused.

Callers catch :class:`TurnlogError` for anything turnlog raises on purpose; anything else escaping
is a bug. A refusal's ``reason`` is the same short name that an ``AnswerRejected`` event carries,
so a log line, an exception and an event on the rejections topic all say the same thing.

The whole tree (the CLI's exit code for each in brackets)::

    TurnlogError
    ├── ConfigurationError        a key, registration or setting is missing or contradictory [1]
    │   ├── SettingError          one setting's value, named by its variable or option      [2]
    │   └── SchemaRegistryRefused the schema registry cannot be used: unreachable, refused   [1]
    │                             a schema (incompatible), or answered what it should not
    ├── PauseInvalid              a pause that could never be answered, named by field       [2]
    ├── Refused                   an answer or token refused by a rule of the contract      [3]
    │                             (turnlog.contracts.refusals; ``reason`` is the rule's name)
    ├── DecodeError               bytes from outside that are not a turnlog value           [1]
    │   └── ContentShredded       a sealed turn whose key is gone: its thread was forgotten [1]
    │                             (turnlog.wire.sealing)
    ├── TopicMismatch             an existing topic contradicts the topic set               [1]
    ├── StoreError                the local store disagrees with the log                    [1]
    │   └── StoreLocked           the store is open read-write by another process, named    [1]
    │                             (turnlog.projections.store)
    ├── DeliveryFailed            records the broker did not take (forget's tombstones)     [1]
    ├── BrokerUnavailable         Kafka unreachable for longer than the outage budget, or   [4]
    │                             never reached within the first-contact budget
    ├── ResumedTurnTimeout        no resumed turn of the thread in time; a TimeoutError too
    │                             (turnlog.consumers.resumed, ``Turnlog.resumed_turn``)
    ├── TurnlogClosed             a call on a closed ``Turnlog``, named (turnlog.api)
    └── DemoFailed                the demo's end-to-end story did not hold (turnlog.cli.demo) [1]

Not turnlog's own: aiokafka's authorization and authentication errors
(``turnlog.kafka.reader.NOT_AUTHORIZED``: the broker refused this principal) are raised as they
are, never waited out as an outage, and the CLI exits [5] with one "not authorized" line.
"""

from __future__ import annotations


class TurnlogError(Exception):
    """Base of every error turnlog raises on purpose."""


class ConfigurationError(TurnlogError):
    """A setting, key or registration is missing or contradictory."""


class SettingError(ConfigurationError):
    """One setting has a value turnlog cannot run with; ``name`` is where it came from.

    ``name`` is the environment variable (``TURNLOG_PARTITIONS``), the CLI option
    (``--partitions``) or the field, so the message points at the thing a person has to change.
    """

    def __init__(self, name: str, value: object, why: str) -> None:
        shown = value
        if isinstance(value, str) and "://" in value and "@" in value:
            # A URL's user:password is never printed.
            scheme, _, rest = value.partition("://")
            shown = f"{scheme}://***@{rest.rpartition('@')[2]}"
        super().__init__(f"{name}={shown!r}: {why}")
        self.name = name
        self.value = value
        self.why = why


class SchemaRegistryRefused(ConfigurationError):
    """The registry wire (``TURNLOG_WIRE=registry``) cannot start, or a writer schema cannot
    be fetched: ``reason`` is ``unreachable``, ``incompatible``, ``not_authorized`` or
    ``bad_response``, the message one line naming the subject or id and the registry's word."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"schema registry {reason}: {detail}")
        self.reason = reason
        self.detail = detail


class DecodeError(TurnlogError):
    """Bytes from outside could not be read as a turnlog value; ``reason`` names why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ContentShredded(DecodeError):
    """A sealed resumed turn whose key the keys topic no longer holds: ``turnlog forget``
    tombstoned it, so nothing of the turn's content can be read any more (its ids can)."""

    def __init__(self, thread_id: str, event_id: str) -> None:
        super().__init__(
            "content_shredded",
            f"the resumed turn {event_id!r} of thread {thread_id!r} is sealed and its key is "
            "gone (the thread was forgotten): its content cannot be read",
        )
        self.thread_id = thread_id
        self.event_id = event_id


class TopicMismatch(TurnlogError):
    """An existing topic contradicts the topic set (cleanup policy, partition count)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class PauseInvalid(TurnlogError, ValueError):
    """A pause that cannot be recorded (a checkpoint field, the TTL, the interaction, the
    request); ``field`` names what to fix. Raised before anything is written, so a refused
    pause never leaves a record on the log without a token."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


class DeliveryFailed(TurnlogError):
    """Records were handed to Kafka but not all of them were acknowledged."""

    def __init__(self, failed: int, total: int, what: str, first: BaseException) -> None:
        super().__init__(
            f"{failed} of {total} {what} not delivered "
            f"(first failure: {type(first).__name__}: {first})"
        )
        self.failed = failed
        self.total = total


class StoreError(TurnlogError):
    """The local store disagrees with the log (an offset beyond the partition end, a lock)."""


class BrokerUnavailable(TurnlogError):
    """Kafka could not be reached within the allowed time.

    ``never_reached`` tells the two cases apart: an address this process never had an answer
    from (a typo, a closed port, a broker not started: given up after
    ``Settings.connect_timeout_seconds``, and worth a different hint) or a broker that went
    away after answering (an outage, ridden out for ``Settings.broker_timeout_seconds``).
    """

    def __init__(self, message: str = "", *, never_reached: bool = False) -> None:
        super().__init__(message)
        self.never_reached = never_reached
