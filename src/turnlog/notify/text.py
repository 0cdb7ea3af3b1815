"""A pause's words as a notice may carry them: one line, every character that could make it
read otherwise than it is written out as ``⟨U+XXXX⟩`` (the inbox's rule,
:mod:`turnlog.contracts.visible`), clipped."""

from __future__ import annotations

from typing import Any

from turnlog.contracts.visible import SUMMARY_CHARS, clip, visible


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """Whitespace runs made one space, then marked, then clipped."""
    return clip(visible(" ".join(text.split())), limit)


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
