"""Builds turnlog's two compiled parts into the wheel, or leaves them out.

- The C reader (``turnlog.wire._native``): without it :mod:`turnlog.wire.native` reads with
  the generated Python.
- The resume path's modules compiled with mypyc (:data:`turnlog._compiled.MODULES`, one group):
  without them the same sources run as Python.

The package works without either, so a machine with no C compiler still installs turnlog; the
build says so on stderr. An editable install puts the built modules beside their sources in
``src/turnlog``, where the checkout imports them from; a changed source is then ignored at import
until ``make install`` rebuilds it: the C reader carries the SHA-256 of the ``_native.c`` it was
built from, and the compiled group the digest of its sources (``turnlog/_compiled.sha256``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from setuptools.errors import BaseError, CCompilerError

NAME = "turnlog.wire._native"
SOURCE = Path("src/turnlog/wire/_native.c")


class NativeBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        source = root / SOURCE
        if version == "editable":
            _clear_built(root / "src")
        self._work = Path(tempfile.mkdtemp(prefix="turnlog-native-"))
        try:
            built = _build(source, self._work)
        except (BaseError, CCompilerError, OSError) as exc:  # no compiler, no headers
            print(f"turnlog: the C reader was not built ({exc}); pure Python", file=sys.stderr)
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self._place(version, build_data, built, f"turnlog/wire/{built.name}")
        try:
            compiled = _compile_group(root, self._work)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the sources as they run
            print(f"turnlog: the resume path was not compiled ({exc}); Python", file=sys.stderr)
            return
        for path, target in compiled:
            self._place(version, build_data, path, target)

    def _place(self, version: str, build_data: dict[str, Any], built: Path, target: str) -> None:
        """Into the wheel at ``target`` (its path in the wheel), or, for an editable install,
        beside the sources the checkout imports (under ``src/``)."""
        if version == "editable":
            shutil.copy2(built, Path(self.root) / "src" / target)
        else:
            build_data["force_include"][str(built)] = target

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _build(source: Path, work: Path) -> Path:
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    extension = Extension(
        NAME,
        sources=[str(source)],
        define_macros=[("TURNLOG_NATIVE_SOURCE", f'"{digest}"')],
        extra_compile_args=["-O2"],
    )
    command = build_ext(Distribution({"name": "turnlog", "ext_modules": [extension]}))
    command.build_lib = str(work / "lib")
    command.build_temp = str(work / "tmp")
    command.ensure_finalized()
    command.run()
    return Path(command.get_ext_fullpath(NAME))


def _clear_built(src: Path) -> None:
    """Remove what an earlier editable build left in the checkout: a module since dropped from
    the compiled group would otherwise still load its old extension, not its source."""
    for built in [*src.glob("turnlog_speedups__mypyc.*"), *(src / "turnlog").rglob("*.so")]:
        built.unlink()
    (src / "turnlog" / "_compiled.sha256").unlink(missing_ok=True)


def _compiled_module(root: Path) -> ModuleType:
    """``turnlog._compiled`` loaded on its own (it imports only the standard library): the list
    of modules to compile and the digest the guard compares."""
    spec = importlib.util.spec_from_file_location(
        "turnlog_compiled_at_build", root / "src" / "turnlog" / "_compiled.py"
    )
    if spec is None or spec.loader is None:
        raise OSError("src/turnlog/_compiled.py is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile_group(root: Path, work: Path) -> list[tuple[Path, str]]:
    """mypyc over the resume path's modules: each built extension with its place in the wheel,
    and the manifest holding the digest of the sources compiled.

    mypy runs with the type information of turnlog alone (``--no-site-packages``,
    third-party imports as ``Any``), so the same code is compiled whether the build is isolated
    or not; errors in modules outside the group are not the compiler's business
    (``--follow-imports=silent``)."""
    from mypyc.build import mypycify
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    group = _compiled_module(root)
    package = root / "src" / "turnlog"
    digest = group.sources_digest(package)
    sources = [str(p.relative_to(root / "src")) for p in group.source_paths(package)]
    with contextlib.chdir(root / "src"):
        extensions = mypycify(
            [
                "--follow-imports=silent",
                "--ignore-missing-imports",
                "--no-site-packages",
                "--cache-dir",
                str(work / "mypy-cache"),
                *sources,
            ],
            group_name=group.GROUP,
            target_dir=str(work / "mypyc"),
        )
        command = build_ext(Distribution({"name": "turnlog", "ext_modules": extensions}))
        command.build_lib = str(work / "mypyc-lib")
        command.build_temp = str(work / "mypyc-tmp")
        command.ensure_finalized()
        command.run()
        built = [Path(command.get_ext_fullpath(ext.name)).resolve() for ext in extensions]
    if group.sources_digest(package) != digest:
        raise OSError("the sources changed while they were being compiled")
    manifest = work / group.MANIFEST
    manifest.write_text(digest + "\n")
    placed = [(path, str(path.relative_to(work / "mypyc-lib"))) for path in built]
    return [*placed, (manifest, f"turnlog/{group.MANIFEST}")]
