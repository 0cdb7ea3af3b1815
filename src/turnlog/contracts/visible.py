"""Text shown to a person, written so that it reads as what it is.

What a person approves or is told must not be reordered or hidden by the characters in it: a
raw U+202E before ``9999 0000`` shows ``DE00 1111 9999 0000`` as ``DE00 1111 0000 9999``; a
zero-width space makes two names look equal. Every control, format or invisible character is
written out as ``⟨U+XXXX⟩`` instead, so the marks show where the trick was. One rule for every
place that shows a pause's words -- the inbox's pages and the notifier's notices alike.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Final

#: Unicode categories never rendered raw: controls, format characters (bidi overrides and
#: isolates, zero-width joiners, the BOM, tags...), lone surrogates, line and paragraph
#: separators. Each can make text read otherwise than it is, or hide part of it.
MARKED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

#: Letters and marks that draw nothing (Hangul fillers, the combining grapheme joiner, Khmer's
#: inherent vowels): not format characters, but as invisible, so marked alike.
INVISIBLE: Final = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5")

#: A summary (a list's link, a page's title, a notice's line) is clipped to this many characters.
SUMMARY_CHARS: Final = 200


@functools.cache
def _marked() -> dict[int, str]:
    """Every marked code point to its ``⟨U+XXXX⟩``, built once from the planes that hold every
    control and format character (0, 1 and 14 as of Unicode 16; the others hold none), so
    marking text is one ``str.translate`` in C."""
    table: dict[int, str] = {}
    for plane in (range(0x10000), range(0x10000, 0x20000), range(0xE0000, 0xF0000)):
        for cp in plane:
            char = chr(cp)
            if unicodedata.category(char) in MARKED_CATEGORIES or char in INVISIBLE:
                table[cp] = f"⟨U+{cp:04X}⟩"
    return table


@functools.cache
def marks(multiline: bool) -> dict[int, str]:
    """The ``str.translate`` table of :func:`visible`: newlines and tabs left alone in
    ``multiline`` text."""
    if not multiline:
        return _marked()
    return {cp: mark for cp, mark in _marked().items() if cp not in (ord("\n"), ord("\t"))}


def visible(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control, format or invisible character written out as ``⟨U+XXXX⟩``.

    Newlines and tabs stay in ``multiline`` text (a question, a message, an argument's value);
    in a name (a tool, an argument, a thread) they are marked too. Idempotent: the marks are
    visible characters."""
    return text.translate(marks(multiline))


def clip(text: str, limit: int = SUMMARY_CHARS) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis saying it was (a summary stays a line,
    whatever the size of the question)."""
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


__all__ = ["INVISIBLE", "MARKED_CATEGORIES", "SUMMARY_CHARS", "clip", "marks", "visible"]
