"""A password that never prints itself.

Its own module because both the connection value (``kafka/security.py``) and the OAuth token
provider it builds (``kafka/oauth.py``) hold one: in either, the other would close a circle.
"""

from __future__ import annotations


class Secret:
    """A password that never prints itself; ``reveal()`` is the one way to read it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
