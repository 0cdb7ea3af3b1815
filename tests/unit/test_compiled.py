"""The resume path's compiled build (mypyc): used where it was built, and never when it is stale,
missing or turned off -- then every module of the group loads from its source."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from turnlog import _compiled
from turnlog._compiled import MANIFEST, MODULES, SourceFirst, install, source_paths, sources_digest

PURE = os.environ.get("TURNLOG_PURE_PYTHON", "") not in ("", "0")
PACKAGE = Path(_compiled.__file__).resolve().parent


def test_the_resume_path_runs_compiled_where_it_was_built() -> None:
    if PURE:
        assert _compiled.UNUSED_BECAUSE == "TURNLOG_PURE_PYTHON is set"
        assert not _compiled.in_use()
        return
    # make install compiles it (hatch_build.py); without it the resume path is pure Python.
    assert _compiled.UNUSED_BECAUSE == "", _compiled.UNUSED_BECAUSE
    assert _compiled.in_use()
    for name in MODULES:
        assert not (importlib.import_module(name).__file__ or "").endswith(".py"), name


def _copy_group(root: Path) -> Path:
    """The group's sources under ``root/turnlog``, as a build would have compiled them."""
    package = root / "turnlog"
    for path in source_paths(PACKAGE):
        target = package / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return package


def test_the_group_is_trusted_only_with_the_digest_of_its_own_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TURNLOG_PURE_PYTHON", raising=False)
    package = _copy_group(tmp_path)
    assert _compiled._why_unused(package).startswith("not compiled")
    (package / MANIFEST).write_text(sources_digest(package) + "\n")
    assert _compiled._why_unused(package) == ""
    # One changed module of the group is enough: compiled modules call each other in C.
    edited = source_paths(package)[-1]
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    assert _compiled._why_unused(package).startswith("stale")
    edited.unlink()
    assert "cannot be read" in _compiled._why_unused(package)
    monkeypatch.setenv("TURNLOG_PURE_PYTHON", "1")
    assert _compiled._why_unused(package) == "TURNLOG_PURE_PYTHON is set"


def test_the_digest_names_each_module_with_its_source(tmp_path: Path) -> None:
    package = _copy_group(tmp_path)
    before = sources_digest(package)
    first, second = source_paths(package)[:2]
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)  # the same bytes, moved between modules, is another build
    second.write_bytes(a)
    assert sources_digest(package) != before


def test_the_guard_loads_a_source_over_an_extension_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "guarded_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("WHERE = 'source'\n")
    # What a stale build leaves beside it; the import system would try it first and fail.
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (package / f"mod{suffix}").write_bytes(b"not a shared library")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError):
        importlib.import_module("guarded_pkg.mod")
    monkeypatch.delitem(sys.modules, "guarded_pkg.mod", raising=False)
    monkeypatch.setattr(sys, "meta_path", [SourceFirst(["guarded_pkg.mod"]), *sys.meta_path])
    assert importlib.import_module("guarded_pkg.mod").WHERE == "source"
    monkeypatch.delitem(sys.modules, "guarded_pkg.mod")
    monkeypatch.delitem(sys.modules, "guarded_pkg")


def test_the_guard_is_installed_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    before = sum(isinstance(f, SourceFirst) for f in sys.meta_path)
    install(tmp_path)  # no manifest there: not compiled
    install(tmp_path)
    assert sum(isinstance(f, SourceFirst) for f in sys.meta_path) == max(before, 1)


def test_turned_off_every_module_of_the_group_loads_from_source() -> None:
    names = ", ".join(repr(n) for n in MODULES)
    script = (
        "import importlib, turnlog._compiled as c\n"
        f"files = [importlib.import_module(n).__file__ for n in ({names},)]\n"
        "assert all(f.endswith('.py') for f in files), files\n"
        "print(c.UNUSED_BECAUSE)\n"
    )
    env = {**os.environ, "TURNLOG_PURE_PYTHON": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "TURNLOG_PURE_PYTHON is set"
