"""The exception tree: one base, and refusals that name the rule that refused.

Callers catch :class:`TurnlogError` for anything turnlog raises on purpose; anything else escaping
is a bug. A refusal's ``reason`` is the same short name that an ``AnswerRejected`` event carries,
so a log line, an exception and an event on the rejections topic all say the same thing.
"""

from __future__ import annotations


class TurnlogError(Exception):
    """Base of every error turnlog raises on purpose."""


class ConfigurationError(TurnlogError):
    """A setting, key or registration is missing or contradictory."""


class DecodeError(TurnlogError):
    """Bytes from outside could not be read as a turnlog value; ``reason`` names why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class TopicMismatch(TurnlogError):
    """An existing topic contradicts the topic set (cleanup policy, partition count)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class StoreError(TurnlogError):
    """The local store disagrees with the log (an offset beyond the partition end, a lock)."""


class BrokerUnavailable(TurnlogError):
    """Kafka could not be reached within the allowed time."""
