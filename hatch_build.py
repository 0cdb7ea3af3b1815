"""Builds the C reader (``turnlog.wire._native``) into the wheel, or leaves it out.

The package works without it (:mod:`turnlog.wire.native` then reads with the generated Python),
so a machine with no C compiler still installs turnlog; the build says so on stderr. An editable
install puts the built module beside its source, in ``src/turnlog/wire``, where the checkout
imports it from; a changed ``_native.c`` is then ignored at import until ``make install``
rebuilds it (the module carries the SHA-256 of the source it was built from).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path
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
        self._work = Path(tempfile.mkdtemp(prefix="turnlog-native-"))
        try:
            built = _build(source, self._work)
        except (BaseError, CCompilerError, OSError) as exc:  # no compiler, no headers
            print(f"turnlog: the C reader was not built ({exc}); pure Python", file=sys.stderr)
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version == "editable":
            shutil.copy2(built, source.parent / built.name)
        else:
            build_data["force_include"][str(built)] = f"turnlog/wire/{built.name}"

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
