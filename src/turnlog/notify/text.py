"""A pause's words as a notice may carry them: one line, every character that could make it
read otherwise than it is written out as ``⟨U+XXXX⟩`` (the inbox's rule,
:mod:`turnlog.contracts.visible`), clipped."""

from __future__ import annotations

from typing import Any

from turnlog.contracts.visible import SUMMARY_CHARS, visible

ELLIPSIS = "…"


def clip(text: str, limit: int = SUMMARY_CHARS) -> str:
    """``text`` in at most ``limit`` characters, the ellipsis that says it was cut included
    (a receiver that stores the summary in a column of ``limit`` characters takes it whole)."""
    if len(text) <= limit:
        return text
    kept = text[: limit - len(ELLIPSIS)]
    opened = kept.rfind("⟨")
    if opened > kept.rfind("⟩"):
        kept = kept[:opened]  # never half a mark: ``⟨U+20`` would read as text
    return kept.rstrip() + ELLIPSIS


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """Marked, then clipped: a CR, LF or TAB is marked like every other control character
    (``⟨U+000A⟩``), so the line shows where the question had its breaks."""
    return clip(visible(text), limit)


def questions(request: Any) -> list[str]:
    """The questions of an ``ask_user``-shaped request (``questions`` or a bare ``question``)."""
    if not isinstance(request, dict):
        return []
    raw = request.get("questions")
    if raw is None and "question" in request:
        raw = [request]
    if not isinstance(raw, list):
        return []
    return [str(q.get("question") or "") for q in raw if isinstance(q, dict)]


__all__ = ["SUMMARY_CHARS", "clip", "one_line", "questions", "visible"]
