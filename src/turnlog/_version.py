"""The installed package's version, in a leaf module of its own.

The records the package writes carry it (``package_version``), so producers and consumers need
it; taken from the root instead, each of them would import the public API, which re-exports
them: every room that names the version would sit in one import circle with the root.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("turnlog")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
