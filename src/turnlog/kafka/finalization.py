"""The crash window: a pause written before its turn's state is complete, finalized later.

A writer that records a pause in two steps (``Turnlog.pause(..., finalized=False)``, then
``Turnlog.checkpoints.finalize``) marks the first write with the :data:`UNFINALIZED` header;
the finalization writes the same pause again, same key and bytes, without it. The pauses topic
is compacted by key, so the log keeps the last word: a pause is unfinalized exactly while its
last write carries the header. A writer that dies between the two leaves the header standing,
and the thread's owner expires that pause once it is older than the bound
(``Settings.finalize_timeout_seconds``), with the reason :data:`UNFINALIZED_REASON` -- never
resumed, whatever answer comes.

A header rather than a field of ``PauseRecorded``: the flag is about the write, not the pause
(the finalized write is the same record), and the records and their readers stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The header an unfinalized pause write carries (its value is ``b"1"``).
UNFINALIZED = "turnlog-unfinalized"
#: The ``PauseExpired.reason`` of a pause expired because its write was never finalized.
UNFINALIZED_REASON = "unfinalized"
#: The ``PauseExpired.reason`` of a pause whose window closed unanswered.
WINDOW_REASON = "window_closed"


def unfinalized_header() -> tuple[str, bytes]:
    return UNFINALIZED, b"1"


def is_unfinalized(headers: Iterable[tuple[str, bytes | None]] | None) -> bool:
    """Whether a record with ``headers`` is an unfinalized pause write."""
    return any(name == UNFINALIZED for name, _ in headers or ())
