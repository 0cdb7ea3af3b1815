"""What the resume handler reads: the worker's store, seen through a narrow view.

A port with two implementations: the worker's (:class:`turnlog.consumers.worker`'s view over
its RocksDB store: pauses skimmed, batch reads) and the unit tests' (decoded pauses in a dict).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from turnlog.contracts.events import PauseRecorded
from turnlog.contracts.ledger import LedgerEntry
from turnlog.wire.skim import SkimmedPause, StoredPause

__all__ = ["BatchStoreView", "CatchUp", "ForgottenView", "StoreView"]


class StoreView(Protocol):
    """What the handler reads of the worker's store. A pause may come decoded or skimmed (its
    messages still encoded: the worker's, see :mod:`turnlog.consumers.acceptance`)."""

    def pause(self, token_id: str) -> PauseRecorded | SkimmedPause | None: ...

    def ledger(self, token_id: str) -> LedgerEntry | None: ...

    def pauses_applied(self, partition: int) -> int | None:
        """The next offset of pauses[partition] the store has applied (``None``: none)."""
        ...


@runtime_checkable
class BatchStoreView(StoreView, Protocol):
    """A store view that also answers for many tokens at once (RocksDB multi-gets): the
    handler asks once per batch of answers instead of once per answer."""

    def ledgers(self, token_ids: Sequence[str]) -> list[LedgerEntry | None]: ...

    def pause_values(self, token_ids: Sequence[str]) -> list[StoredPause | bytes | None]:
        """The stored pause record of each token, ``None`` where none: single-object bytes, or
        with the hint its skim left (:func:`turnlog.wire.skim.read_stored` reads both)."""
        ...


@runtime_checkable
class SupersedeView(StoreView, Protocol):
    """A store view that can tell a replaced pause from one never recorded."""

    def superseding(self, thread_id: str, checkpoint_id: str, token_id: str) -> str | None:
        """The token id of the newer pause that replaced ``token_id``'s at the thread's
        checkpoint, or ``None`` when the checkpoint holds no other pause."""
        ...


@runtime_checkable
class ForgottenView(StoreView, Protocol):
    """A store view that knows the threads ``turnlog forget`` forgot (for a while:
    :mod:`turnlog.projections.forgotten`)."""

    def forgotten(self, thread_id: str, now_ms: int) -> bool: ...


#: Catch the store up on pauses[partition] to its committed end.
CatchUp = Callable[[int], Awaitable[None]]
