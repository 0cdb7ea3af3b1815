"""Griffe extensions for the API reference; nothing in the package changes.

``SphinxRoles``: the package's docstrings are written in reST's inline style (``code``,
:class:`Name`, a paragraph ending in ``::`` before an indented example), which Markdown would show
as it is. This turns the roles into code spans and the double colon into a plain one, so the
reference reads like the docstrings do in an editor.

``NamespaceRooms``: a room without an ``__init__.py`` (``turnlog/consumers/``) is a namespace
package inside a regular one, which griffe does not load; the public names that live there
(``ResumedTurns``, ``AnswerOutcome``, ...) would then not resolve. This loads such a room's
modules under the package, as Python itself imports them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj):`(~?)([^`]+)`")
LITERAL = re.compile(r"(\S)::$", re.M)
BARE_LITERAL = re.compile(r"^(\s*)::$", re.M)


def _markdown(text: str) -> str:
    # reST's ~ shows only the last part of a dotted name.
    text = ROLE.sub(
        lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text
    )
    text = LITERAL.sub(r"\1:", text)
    return BARE_LITERAL.sub("", text)


class SphinxRoles(griffe.Extension):
    """Rewrite each docstring once, as griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _markdown(obj.docstring.value)


class NamespaceRooms(griffe.Extension):
    """Load the modules of the package's subdirectories that have no ``__init__.py``."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.parent is not None or not isinstance(pkg.filepath, Path):
            return
        for directory in sorted(pkg.filepath.parent.iterdir()):
            if (
                not directory.is_dir()
                or directory.name in pkg.members
                or (directory / "__init__.py").exists()
                or not any(directory.glob("*.py"))
            ):
                continue
            room = griffe.Module(directory.name, filepath=directory, parent=pkg)
            pkg.set_member(directory.name, room)
            for path in sorted(directory.glob("*.py")):
                module = griffe.visit(
                    path.stem,
                    filepath=path,
                    code=path.read_text(),
                    parent=room,
                    extensions=loader.extensions,
                    docstring_parser=loader.docstring_parser,
                    docstring_options=loader.docstring_options,
                    lines_collection=loader.lines_collection,
                    modules_collection=loader.modules_collection,
                )
                room.set_member(path.stem, module)
