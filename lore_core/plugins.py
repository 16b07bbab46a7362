"""Plugin manager construction and the registries built from the registration hooks."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import attrs
import pluggy

from lore_core import hookspecs
from lore_core.interfaces import Codec, CuratorFactory, EmbedderFactory, Harness, PromptLayer, StoreFactory

log = logging.getLogger("lore.plugins")

# Core's own features go through the same door as third-party plugins (as in pytest), but
# are registered directly: they cannot be uninstalled separately from the kernel.
BUILTIN_PLUGINS = (
    "lore_core.builtin.codecs",
    "lore_core.builtin.generic_harness",
    "lore_core.builtin.curators",
    "lore_core.builtin.memory_store",
    "lore_core.builtin.context_layers",
)


class PluginError(Exception):
    """A plugin failed to load or registered something inconsistent."""


def make_plugin_manager(
    load_entrypoints: bool = True,
    block: Iterable[str] = (),
    extra: Iterable[object] = (),
) -> pluggy.PluginManager:
    """A fresh plugin manager: built-ins, then installed entry points, then ``extra`` objects.

    ``block`` names entry points (or built-in module names) not to load. A misspelled hook
    in any plugin is an error (``check_pending``), not silently ignored.
    """
    import importlib

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    blocked = set(block)
    for name in BUILTIN_PLUGINS:
        if name not in blocked:
            pm.register(importlib.import_module(name), name=name)
    if load_entrypoints:
        for ep in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            if ep.name in blocked or pm.get_plugin(ep.name) is not None:
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not take the gateway down
                log.error("plugin %r failed to load: %s", ep.name, exc)
                continue
            pm.register(plugin, name=ep.name)
    for obj in extra:
        pm.register(obj)
    pm.check_pending()
    return pm


@attrs.define
class PluginInfo:
    name: str
    distribution: str
    version: str


def installed_plugins() -> list[PluginInfo]:
    """Every distribution registering a ``lore`` entry point, plus the kernel itself."""
    found = [PluginInfo("core", "lore-core", _version("lore-core"))]
    for ep in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist else "?"
        found.append(PluginInfo(ep.name, dist, _version(dist)))
    return sorted(found, key=lambda p: (p.name != "core", p.name))


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


@attrs.define
class Registry:
    """Everything the plugins registered, collected once at startup."""

    codecs: dict[str, Codec] = attrs.field(factory=dict)
    harnesses: dict[str, Harness] = attrs.field(factory=dict)
    stores: dict[str, StoreFactory] = attrs.field(factory=dict)
    embedders: dict[str, EmbedderFactory] = attrs.field(factory=dict)
    prompt_layers: list[PromptLayer] = attrs.field(factory=list)
    # kind -> name -> factory
    curators: dict[str, dict[str, CuratorFactory]] = attrs.field(factory=dict)

    @classmethod
    def collect(cls, pm: pluggy.PluginManager) -> Registry:
        reg = cls()
        hook = pm.hook

        def unique(table: dict[str, Any], kind: str, name: str, obj: Any) -> None:
            if name in table:
                raise PluginError(f"two plugins register the {kind} {name!r}")
            table[name] = obj

        hook.lore_register_codecs(register=lambda c: unique(reg.codecs, "codec", c.api, c))
        hook.lore_register_harnesses(register=lambda h: unique(reg.harnesses, "harness", h.name, h))
        hook.lore_register_stores(register=lambda n, f: unique(reg.stores, "store", n, f))
        hook.lore_register_embedders(register=lambda n, f: unique(reg.embedders, "embedder", n, f))
        hook.lore_register_prompt_layers(register=reg.prompt_layers.append)
        hook.lore_register_curators(
            register=lambda kind, name, f: unique(
                reg.curators.setdefault(kind, {}), f"{kind} curator", name, f
            )
        )
        # Explicit priority, never install order; the name breaks ties deterministically.
        reg.prompt_layers.sort(key=lambda layer: (layer.priority, layer.name))
        return reg

    def codec_for_path(self, path: str) -> Codec | None:
        """The codec owning ``path`` (a base-URL prefix before the API path is allowed)."""
        best: tuple[int, Codec] | None = None
        for codec in self.codecs.values():
            for suffix in codec.paths:
                if path == suffix or (path.endswith(suffix) and path[: -len(suffix)].startswith("/")):
                    if best is None or len(suffix) > best[0]:
                        best = (len(suffix), codec)
        return best[1] if best else None
