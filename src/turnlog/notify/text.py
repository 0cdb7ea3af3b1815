"""A pause's words as a notice may carry them: one line, every character that could make it
read otherwise than it is written out as ``⟨U+XXXX⟩``, clipped.

The rule is the inbox's (``turnlog.inbox.views``: controls, format characters such as bidi
overrides and zero-width joiners, surrogates, line and paragraph separators, and the letters
that draw nothing). It is restated here rather than imported because the inbox is a room of
its own that nothing but its verb imports; ``tests/unit/test_notify.py`` holds the two equal.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any, Final

MARKED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
INVISIBLE: Final = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5")
#: A summary is clipped to this many characters (the inbox's list clips alike).
SUMMARY_CHARS: Final = 200


@functools.cache
def _marked() -> dict[int, str]:
    table: dict[int, str] = {}
    for plane in (range(0x10000), range(0x10000, 0x20000), range(0xE0000, 0xF0000)):
        for cp in plane:
            char = chr(cp)
            if unicodedata.category(char) in MARKED_CATEGORIES or char in INVISIBLE:
                table[cp] = f"⟨U+{cp:04X}⟩"
    return table


def visible(text: str) -> str:
    """``text`` with every marked character written out as ``⟨U+XXXX⟩``."""
    return text.translate(_marked())


def clip(text: str, limit: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


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
