"""Plugin loading and the one bootstrap every entry point uses: the plugin manager, the
configuration (with the plugins' sections), and the registry built from the registration hooks.

Two environment switches act here, for the gateway and every ``lore`` command alike:

* ``LORE_DISABLE_PLUGINS``: comma-separated plugin names (entry-point or distribution names;
  built-ins by module name) that are not loaded (blocked in pluggy);
* ``LORE_TRACE_PLUGINS``: log every hook call with its arguments and results (pluggy's
  tracing) to the ``lore.plugins`` logger at INFO.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs
import pluggy

from lore_core import hookspecs
from lore_core.config import ConfigError, LoreConfig, load_config, upstream_settings
from lore_core.interfaces import (
    CURATOR_KINDS,
    Codec,
    Command,
    Curator,
    CuratorContext,
    CuratorFactory,
    EmbedderFactory,
    Harness,
    KnowledgeCurator,
    Mount,
    Observer,
    PromptLayer,
    Provider,
    Reflector,
    RequestHandler,
    StoreFactory,
)
from lore_core.toolkinds import DEFAULT_TOOL_KINDS, ToolKind, ToolKindError
from lore_core.toolkinds import install as install_tool_kinds
from lore_core.toolkinds import merge as merge_tool_kinds

log = logging.getLogger("lore.plugins")

DISABLE_ENV = "LORE_DISABLE_PLUGINS"
TRACE_ENV = "LORE_TRACE_PLUGINS"

# Core's own features go through the same door as third-party plugins (as in pytest), but
# are registered directly: they cannot be uninstalled separately from the kernel. (The
# built-in request handlers are the exception: they act on the gateway's own parts, so the
# gateway builds them with those, lore_core/builtin/handlers.py.)
BUILTIN_PLUGINS = (
    "lore_core.builtin.codecs",
    "lore_core.builtin.generic_harness",
    "lore_core.builtin.curators",
    "lore_core.builtin.memory_store",
    "lore_core.builtin.context_layers",
    "lore_core.builtin.commands",
)
#: The built-in plugin of the ``lore`` command's own subcommands: the parser loads it alone
#: (:func:`lore_core.cli.commands.build_parser`).
COMMANDS_PLUGIN = "lore_core.builtin.commands"
CORE_DISTRIBUTION = "lore-core"


class PluginError(Exception):
    """A plugin failed to load or registered something inconsistent."""


# ---------------------------------------------------------------------------------------------
# The plugin manager
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class PluginStatus:
    """One plugin as ``lore plugins`` reports it."""

    name: str
    distribution: str
    version: str
    status: str  # "loaded" | "blocked" | "failed"
    hooks: tuple[str, ...] = ()
    error: str = ""


class LorePluginManager(pluggy.PluginManager):
    """pluggy's manager, plus where each plugin came from and which failed to import (pluggy
    itself only knows what is registered and what is blocked)."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        # plugin name -> (distribution, version), for every plugin considered
        self.origins: dict[str, tuple[str, str]] = {}
        # plugin name -> the exception that stopped it, in one line
        self.failures: dict[str, str] = {}

    def report(self) -> list[PluginStatus]:
        """Every plugin considered: loaded (with its hooks), blocked or failed, by name."""
        rows = []
        for name, plugin in self.list_name_plugin():
            dist, version = self.origins.get(name, ("-", "-"))
            if plugin is None:
                rows.append(PluginStatus(name, dist, version, "blocked"))
            else:
                hooks = tuple(sorted(caller.name for caller in self.get_hookcallers(plugin) or ()))
                rows.append(PluginStatus(name, dist, version, "loaded", hooks))
        for name, error in self.failures.items():
            dist, version = self.origins[name]
            rows.append(PluginStatus(name, dist, version, "failed", error=error))
        return sorted(rows, key=lambda row: row.name)


def make_plugin_manager(
    load_entrypoints: bool = True,
    block: Iterable[str] = (),
    extra: Iterable[object] = (),
    env: Mapping[str, str] | None = None,
    builtins: Iterable[str] = BUILTIN_PLUGINS,
) -> LorePluginManager:
    """A fresh plugin manager: built-ins (``builtins``, default all), then installed entry
    points, then ``extra`` objects.

    ``block`` and ``LORE_DISABLE_PLUGINS`` (in ``env``, default ``os.environ``) name plugins
    not to load: entry-point or distribution names, built-ins by module name. An entry point
    that fails to import is recorded and skipped. A misspelled hook in any plugin is an error
    (``check_pending``), not silently ignored.
    """
    env = os.environ if env is None else env
    pm = LorePluginManager()
    if _flag(env.get(TRACE_ENV, "")):
        _enable_tracing(pm)
    disabled = {_canonical(name) for name in block}
    disabled |= {_canonical(name) for name in env.get(DISABLE_ENV, "").split(",") if name.strip()}
    matched: set[str] = set()

    def is_disabled(*names: str) -> bool:
        hits = {_canonical(n) for n in names} & disabled
        matched.update(hits)
        return bool(hits)

    core_version = _version(CORE_DISTRIBUTION)
    for name in builtins:
        pm.origins[name] = (CORE_DISTRIBUTION, core_version)
        if is_disabled(name):
            pm.set_blocked(name)
        else:
            pm.register(importlib.import_module(name), name=name)
    if load_entrypoints:
        for ep in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            if pm.has_plugin(ep.name) or pm.is_blocked(ep.name) or ep.name in pm.failures:
                continue  # the same entry point seen twice (installed twice on sys.path)
            dist = ep.dist.name if ep.dist else "-"
            pm.origins[ep.name] = (dist, ep.dist.version if ep.dist else "-")
            if is_disabled(ep.name, dist):
                pm.set_blocked(ep.name)
            else:
                _load_entry_point(pm, ep)
    for name in sorted(disabled - matched):
        log.warning("%s: no plugin named %r is installed", DISABLE_ENV, name)
    for obj in extra:
        pm.register(obj, name=_extra_name(pm, obj))
    pm.check_pending()
    return pm


def _load_entry_point(pm: LorePluginManager, ep: metadata.EntryPoint) -> None:
    """Import and register one entry point; a broken plugin must not take the gateway down."""
    try:
        pm.register(ep.load(), name=ep.name)
    except Exception as exc:
        if pm.has_plugin(ep.name):  # registered, then rejected by pluggy's validation
            pm.unregister(name=ep.name)
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        pm.failures[ep.name] = error
        dist, version = pm.origins[ep.name]
        log.warning("plugin %r (%s %s) failed to load and is skipped: %s", ep.name, dist, version, error)


def _extra_name(pm: pluggy.PluginManager, obj: object) -> str:
    # A readable name for error messages and `lore plugins`; pluggy's default is an id().
    name = getattr(obj, "__name__", None) or type(obj).__name__
    return name if not pm.has_plugin(name) and not pm.is_blocked(name) else f"{name}-{id(obj):x}"


def _enable_tracing(pm: pluggy.PluginManager) -> None:
    # Asked for explicitly, so shown even when the "lore" logger is quieter or no logging
    # is configured (most `lore` commands configure none).
    log.setLevel(logging.INFO)
    if not log.hasHandlers():
        log.addHandler(logging.StreamHandler(sys.stderr))
    pm.trace.root.setwriter(lambda text: log.info("%s", text.rstrip("\n")))
    pm.enable_tracing()


def _flag(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def _canonical(name: str) -> str:
    # Distribution names compare as packaging normalises them (lore_harness_claude == lore-harness-claude).
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class Factory:
    """A named constructor, for what is built from the configuration at startup.

    Store backends and embedders register ``Factory(name, build)`` with ``build(config)``;
    curators register ``Factory(name, build, kind="observer")`` with ``build(CuratorContext)``.
    A class with a ``name`` attribute whose constructor takes the same argument may be
    registered itself instead.
    """

    name: str
    build: Callable[[Any], Any]
    kind: str = ""

    def __call__(self, arg: Any) -> Any:
        return self.build(arg)


@attrs.frozen
class ChosenCurators:
    """The curators the configuration chose (:meth:`Registry.choose_curators`); a reflector or
    knowledge curator that cannot work here (no worker) is ``None``."""

    observer: Observer
    reflector: Reflector | None
    knowledge: KnowledgeCurator | None


@attrs.define
class Registry:
    """Everything the plugins registered, collected once at startup."""

    codecs: dict[str, Codec] = attrs.field(factory=dict)
    # The one provider table: name -> what its plugin declared (lore_register_providers).
    providers: dict[str, Provider] = attrs.field(factory=dict)
    harnesses: dict[str, Harness] = attrs.field(factory=dict)
    stores: dict[str, StoreFactory] = attrs.field(factory=dict)
    embedders: dict[str, EmbedderFactory] = attrs.field(factory=dict)
    prompt_layers: list[PromptLayer] = attrs.field(factory=list)
    request_handlers: list[RequestHandler] = attrs.field(factory=list)
    # The one tool-kind table: the kernel's defaults and the plugins' lore_tool_kinds.
    tool_kinds: dict[str, ToolKind] = attrs.field(factory=lambda: dict(DEFAULT_TOOL_KINDS))
    # kind -> name -> factory
    curators: dict[str, dict[str, CuratorFactory]] = attrs.field(factory=dict)
    commands: dict[str, Command] = attrs.field(factory=dict)
    mounts: dict[str, Mount] = attrs.field(factory=dict)
    # "harness 'claude'" -> the plugin that registered it, for `lore plugins`
    owners: dict[str, str] = attrs.field(factory=dict)

    @classmethod
    def collect(cls, pm: pluggy.PluginManager) -> Registry:
        """Every registration hook, one shape: ``register(obj)``, keyed by ``obj.name``
        (``obj.api`` for codecs, ``obj.kind`` and ``obj.name`` for curators). The same key
        from two plugins is an error naming both."""
        reg = cls()

        def collect(hook_name: str, key: Callable[[Any], tuple[str, str]]) -> list[Any]:
            return _collect(pm, hook_name, key, reg.owners)

        for codec in collect("lore_register_codecs", lambda c: ("codec", c.api)):
            reg.codecs[codec.api] = codec
        reg.providers = {p.name: p for p in _providers(pm, reg.owners)}
        for harness in collect("lore_register_harnesses", lambda h: ("harness", h.name)):
            reg.harnesses[harness.name] = harness
        reg.tool_kinds = _tool_kinds(pm)
        for store in collect("lore_register_stores", lambda s: ("store", s.name)):
            reg.stores[store.name] = store
        for embedder in collect("lore_register_embedders", lambda e: ("embedder", e.name)):
            reg.embedders[embedder.name] = embedder
        layers = collect("lore_register_prompt_layers", lambda p: ("prompt layer", p.name))
        # Explicit priority, never install order; the name breaks ties deterministically.
        reg.prompt_layers = sorted(layers, key=lambda layer: (layer.priority, layer.name))
        handlers = collect("lore_register_request_handlers", lambda h: ("request handler", h.name))
        reg.request_handlers = sorted(handlers, key=lambda handler: (handler.priority, handler.name))
        for curator in collect("lore_register_curators", lambda c: (f"{c.kind} curator", c.name)):
            if curator.kind not in CURATOR_KINDS:
                owner = reg.owners.get(f"{curator.kind} curator {curator.name!r}", "a plugin")
                log.warning(
                    "curator %r of kind %r (%s) is not used: this kernel runs %s curators",
                    curator.name, curator.kind, owner, ", ".join(CURATOR_KINDS),
                )  # fmt: skip
                continue
            reg.curators.setdefault(curator.kind, {})[curator.name] = curator
        for command in collect("lore_register_commands", lambda c: ("command", c.name)):
            reg.commands[command.name] = command
        for mount in collect("lore_register_mounts", lambda m: ("mount", m.name)):
            _check_mount_path(mount, reg)
            reg.mounts[mount.name] = mount
        return reg

    def choose_curators(self, config: LoreConfig, worker: Any) -> ChosenCurators:
        """The curators ``distill.observer``, ``distill.reflector`` and ``knowledge.curator``
        name, built with ``worker`` (the worker model's client, or ``None``)."""
        ctx = CuratorContext(config=config, worker=worker)
        observer = self._curator("observer", config.distill.observer, ctx, "distill.observer")
        if observer is None:
            raise ConfigError(f"distill.observer: the observer {config.distill.observer!r} cannot work here")
        return ChosenCurators(
            observer=observer,
            reflector=self._curator("reflector", config.distill.reflector, ctx, "distill.reflector"),
            knowledge=self._curator("knowledge", config.knowledge.curator, ctx, "knowledge.curator"),
        )

    def _curator(self, kind: str, name: str, ctx: CuratorContext, key: str) -> Any:
        """The curator of ``kind`` called ``name`` (``None``: it cannot work here); a name
        nothing registered, or a curator that is not of its kind's class, is a
        configuration error naming ``key``."""
        factories = self.curators.get(kind, {})
        if name not in factories:
            known = ", ".join(sorted(factories)) or "none"
            raise ConfigError(f"{key}: no {kind} named {name!r} is installed (installed: {known})")
        curator: Curator | None = factories[name](ctx)
        expected = CURATOR_KINDS[kind]
        if curator is not None and not isinstance(curator, expected):
            raise ConfigError(
                f"{key}: the {kind} {name!r} is a {type(curator).__name__}, not a "
                f"lore_core.interfaces.{expected.__name__} (its class must inherit from that one)"
            )
        return curator

    def codec_of_provider(self, name: str | None) -> Codec | None:
        """The first registered codec speaking provider ``name`` (its error shape is the
        provider's), else ``None``."""
        return next((c for c in self.codecs.values() if name and c.provider == name), None)

    def default_provider(self) -> Provider | None:
        """The provider assumed when nothing names one (:attr:`Provider.default`)."""
        return next((p for p in self.providers.values() if p.default), None)

    def codec_for_path(self, path: str) -> Codec | None:
        """The codec owning ``path`` (a base-URL prefix before the API path is allowed)."""
        best: tuple[int, Codec] | None = None
        for codec in self.codecs.values():
            for suffix in codec.paths:
                if path == suffix or (path.endswith(suffix) and path[: -len(suffix)].startswith("/")):
                    if best is None or len(suffix) > best[0]:
                        best = (len(suffix), codec)
        return best[1] if best else None


#: First path segments a mount may not take: the gateway's own routes and the providers' APIs.
RESERVED_MOUNT_SEGMENTS = frozenset({"v1", "lore", "health", "openapi.json"})
_MOUNT_PATH = re.compile(r"/[a-z0-9][a-z0-9._-]*")


def _check_mount_path(mount: Mount, reg: Registry) -> None:
    """One segment, not one of the gateway's own, not taken by another mount."""
    owner = reg.owners[f"mount {mount.name!r}"]
    path = mount.path
    if not isinstance(path, str) or not _MOUNT_PATH.fullmatch(path) or path[1:] in RESERVED_MOUNT_SEGMENTS:
        raise PluginError(
            f"plugin {owner} registered the mount {mount.name!r} on {path!r}: a mount's path is one "
            f"lower-case segment such as '/mcp', and none of {', '.join(sorted(RESERVED_MOUNT_SEGMENTS))}"
        )
    for other in reg.mounts.values():
        if other.path == path:
            by = reg.owners[f"mount {other.name!r}"]
            raise PluginError(f"the path {path!r} is mounted twice: by {by} ({other.name}) and by {owner}")


def _calls_by_plugin(pm: pluggy.PluginManager, hook_name: str) -> Iterator[tuple[str, Any]]:
    """``hook_name`` of each plugin on its own, so that what it hands back is known to be
    its; through pluggy (a subset caller), so tracing sees the calls."""
    plugins = pm.get_plugins()
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        others = [p for p in plugins if p is not impl.plugin]
        yield impl.plugin_name, pm.subset_hook_caller(hook_name, remove_plugins=others)


def _collect(
    pm: pluggy.PluginManager,
    hook_name: str,
    key: Callable[[Any], tuple[str, str]],
    owners: dict[str, str],
) -> list[Any]:
    """What the plugins register through ``hook_name``; ``key(obj)`` is (what, name)."""
    found: list[Any] = []

    def register_for(plugin: str) -> Callable[[Any], None]:
        def register(obj: Any) -> None:
            what, name = key(obj)
            if not isinstance(name, str) or not name:
                raise PluginError(f"plugin {plugin} registered a {what} without a name: {obj!r}")
            label = f"{what} {name!r}"
            if label in owners:
                if owners[label] == COMMANDS_PLUGIN:
                    raise PluginError(f"plugin {plugin} registered the {label}, a built-in command")
                raise PluginError(f"the {label} is registered twice: by {owners[label]} and by {plugin}")
            owners[label] = plugin
            found.append(obj)

        register.__qualname__ = f"register[{plugin}]"  # what LORE_TRACE_PLUGINS shows
        return register

    for plugin, call in _calls_by_plugin(pm, hook_name):
        try:
            call(register=register_for(plugin))
        except PluginError:
            raise
        except Exception as exc:  # e.g. the old register(name, factory) shape
            raise PluginError(f"plugin {plugin} failed in {hook_name}: {type(exc).__name__}: {exc}") from exc
    return found


# ---------------------------------------------------------------------------------------------
# The bootstrap
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class Bootstrapped:
    """What every entry point starts from: the gateway, ``lore run`` and each command."""

    pm: LorePluginManager
    config: LoreConfig
    registry: Registry


def bootstrap(
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    load_entrypoints: bool = True,
    extra_plugins: Iterable[object] = (),
) -> Bootstrapped:
    """Plugins first (they declare configuration sections and providers), then the
    configuration (read as :func:`lore_core.config.load_config` does from ``env`` and
    ``cwd``), ``lore_configure``, then the registry. Loads no store and starts nothing."""
    pm = make_plugin_manager(load_entrypoints=load_entrypoints, extra=extra_plugins, env=env)
    config = load_config(config_sections(pm), env=env, cwd=cwd, providers=declared_providers(pm))
    pm.hook.lore_configure(config=config)
    registry = Registry.collect(pm)
    # The stores cut passages (and the observer reads calls) where no registry reaches.
    install_tool_kinds(registry.tool_kinds)
    return Bootstrapped(pm, config, registry)


def _tool_kinds(pm: pluggy.PluginManager) -> dict[str, ToolKind]:
    """The tool-kind table with what each plugin declares through ``lore_tool_kinds``."""
    declared: dict[str, dict[str, str]] = {}
    for plugin, call in _calls_by_plugin(pm, "lore_tool_kinds"):
        for result in call():
            if not isinstance(result, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in result.items()
            ):
                raise PluginError(f"plugin {plugin}: lore_tool_kinds must return tool name -> kind (str)")
            declared.setdefault(plugin, {}).update(result)
    try:
        return merge_tool_kinds(declared)
    except ToolKindError as exc:
        raise PluginError(str(exc)) from None


def declared_providers(pm: pluggy.PluginManager) -> list[Provider]:
    """The providers the plugins declare (read before the configuration, which checks
    ``upstream.<name>`` against them); one name declared twice is an error naming both."""
    return _providers(pm, {})


def _providers(pm: pluggy.PluginManager, owners: dict[str, str]) -> list[Provider]:
    """The declared providers; ``upstream.<name>`` sits beside the upstream section's own
    keys, so a name may not be one of them."""
    found: list[Provider] = _collect(pm, "lore_register_providers", lambda p: ("provider", p.name), owners)
    for provider in found:
        if provider.name in upstream_settings():
            owner = owners[f"provider {provider.name!r}"]
            setting = f"upstream.{provider.name} is a setting"
            raise PluginError(f"plugin {owner} declares the provider {provider.name!r}: {setting}")
    return found


def config_sections(pm: pluggy.PluginManager) -> dict[str, type]:
    """The plugins' configuration sections; one key declared by two plugins is an error
    naming both."""
    sections: dict[str, type] = {}
    owners: dict[str, str] = {}
    for plugin, call in _calls_by_plugin(pm, "lore_config_sections"):
        for result in call():
            for key, section_cls in (result or {}).items():
                if key in owners:
                    twice = f"by {owners[key]} and by {plugin}"
                    raise PluginError(f"the configuration section {key!r} is declared twice: {twice}")
                owners[key] = plugin
                sections[key] = section_cls
    return sections
