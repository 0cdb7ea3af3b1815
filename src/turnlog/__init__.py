"""turnlog: paused LLM-agent turns, durable and resumable exactly once, over Apache Kafka."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("turnlog")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
