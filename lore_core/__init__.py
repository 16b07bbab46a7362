"""Lore's gateway kernel: the proxy, the plugin interfaces, configuration."""

from importlib import metadata

from lore_core.hookspecs import hookimpl

try:
    __version__ = metadata.version("lore-core")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"

__all__ = ["__version__", "hookimpl"]
