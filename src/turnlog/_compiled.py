"""The modules of the resume path that the build compiles with mypyc, and the guard that keeps a
stale build out.

Why: after the signature check, a resume's cost is Python spread thin over many small steps --
the answer's routing and token parse, the contract's checks, the asking round, the two records
written, the store's index entries (``bench/README.md``, eighth round). mypyc compiles these
same sources to C: the rules stay written once, in the Python beside this file, and the build
makes them run about 1.4 times as fast. The build hook (``hatch_build.py``) compiles
:data:`MODULES` as one group and records :func:`sources_digest` of the sources it compiled.

When the compiled modules are not used -- every module of the group then loads from its source:

- the build had no C compiler or no mypyc (the package is then pure Python);
- ``TURNLOG_PURE_PYTHON=1`` is set (the pure-Python test run, and before/after comparisons);
- any of the sources differs from the build's (an editable checkout edited since
  ``make install``). A compiled module calls the others of its group directly in C, so one
  stale module makes the whole group load from source, never a mix.

This module is imported by the build hook on its own, so it imports nothing but the standard
library.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["GROUP", "MANIFEST", "MODULES", "UNUSED_BECAUSE", "SourceFirst", "in_use", "install"]
__all__ += ["source_paths", "sources_digest"]

#: Compiled together, as one group. Each is pure enough for mypyc: typed throughout (mypy
#: --strict), no monkeypatching of its classes, no dynamic attributes. Left out on purpose:
#: ``contracts.ledger`` (its row is duck-typed: a ``TokenConsumed`` read back serves as one, and
#: rows are made with the outcome's text, which a compiled dataclass would refuse), and the I/O
#: modules around the path.
MODULES: tuple[str, ...] = (
    "turnlog.consumers.acceptance",
    "turnlog.consumers.handler",
    "turnlog.consumers.screening",
    "turnlog.contracts.claims",
    "turnlog.contracts.interactions",
    "turnlog.contracts.messages",
    "turnlog.contracts.rehydration",
    "turnlog.contracts.resume",
    "turnlog.kafka.partitioning",
    "turnlog.projections.batch",
    "turnlog.projections.layout",
    "turnlog.tokens.peek",
    "turnlog.tokens.verifier",
    "turnlog.wire.direct",
    "turnlog.wire.resumed_bytes",
    "turnlog.wire.skim",
)
#: The group's name: its shared library is the top-level module ``turnlog_speedups__mypyc``
#: (beside the ``turnlog`` package: mypyc derives its modules' ``__file__`` from that place).
GROUP = "turnlog_speedups"
#: Beside this file: the digest of the sources the build compiled.
MANIFEST = "_compiled.sha256"

_PACKAGE_DIR = Path(__file__).resolve().parent


def source_paths(package_dir: Path = _PACKAGE_DIR) -> list[Path]:
    """The source file of each of :data:`MODULES`, under ``package_dir`` (``.../turnlog``)."""
    return [package_dir.joinpath(*name.split(".")[1:]).with_suffix(".py") for name in MODULES]


def sources_digest(package_dir: Path = _PACKAGE_DIR) -> str:
    """SHA-256 over the group's sources, each with its module name: what the build records,
    and what the guard compares at import."""
    digest = hashlib.sha256()
    for name, path in zip(MODULES, source_paths(package_dir), strict=True):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class SourceFirst(importlib.abc.MetaPathFinder):
    """Loads the named modules from their ``.py`` files, whatever else lies beside them (an
    extension module of the same name would otherwise win: the import system tries extensions
    before sources)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path or ():
            candidate = Path(entry) / leaf
            if candidate.is_file():
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def _why_unused(package_dir: Path) -> str:
    """``""`` when the compiled group may be used, else why not."""
    if os.environ.get("TURNLOG_PURE_PYTHON", "") not in ("", "0"):
        return "TURNLOG_PURE_PYTHON is set"
    manifest = package_dir / MANIFEST
    if not manifest.is_file():
        return "not compiled (no C compiler or no mypyc when this package was built)"
    try:
        current = sources_digest(package_dir)
    except OSError as exc:  # a source is missing: trust nothing compiled
        return f"a source of the compiled group cannot be read ({exc})"
    if manifest.read_text().strip() != current:
        return "stale: the sources changed since the build (make install rebuilds)"
    return ""


def install(package_dir: Path = _PACKAGE_DIR) -> str:
    """Decide, once per process, whether the compiled group is used; when not, make every one
    of its modules load from source. Returns :data:`UNUSED_BECAUSE`'s value."""
    why = _why_unused(package_dir)
    if why and not any(isinstance(f, SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFirst(MODULES))
    return why


def in_use() -> bool:
    """Whether the group's modules run compiled in this process (importing one of them)."""
    from turnlog.wire import direct

    return not (direct.__file__ or "").endswith(".py")


if __name__ == "__main__":  # the Makefile's list of what the build compiles
    print(" ".join(os.path.relpath(p) for p in source_paths()))
    sys.exit(0)

#: Why the compiled group is not used in this process (``""``: it is, where it was built).
UNUSED_BECAUSE = install() if __name__ == "turnlog._compiled" else ""
