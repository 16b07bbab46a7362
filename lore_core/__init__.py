"""Lore's gateway kernel: the proxy, the plugin interfaces, configuration."""

from lore_core.hookspecs import hookimpl

__all__ = ["hookimpl"]
