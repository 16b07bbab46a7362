"""Lore's hook specifications: the one door every plugin, built-in or third-party, goes through.

Conventions (learned from pytest, llm and datasette):

* Every hook carries the ``lore_`` prefix and is grouped under a phase banner below.
* Most hooks are *registration* hooks: a plugin receives a ``register`` callback and hands
  the kernel objects that implement an interface from :mod:`lore_core.interfaces`, one shape
  for all: ``register(obj)``, keyed by ``obj.name`` (a codec by ``obj.api``, a curator by
  ``obj.kind`` and ``obj.name``). What is built from the configuration (stores, embedders,
  curators) is registered as a named factory, :class:`lore_core.plugins.Factory`. The same
  key from two plugins is a startup error naming both. The hot path then calls methods on
  those objects; no pluggy hook runs per request chunk.
* Hooks are synchronous. An ``async def`` implementation of a ``firstresult`` hook would
  always "win" (a coroutine is not ``None``), so async work lives on registered objects, and
  the two lifecycle hooks that may do I/O return an awaitable that the kernel awaits.
* pluggy calls implementations in reverse registration order, so nothing here depends on
  call order: prompt layers carry an explicit ``priority`` and harnesses an explicit
  ``recognise`` score.

Every hook's docstring states its contract; ``tests/test_hookspecs.py`` fails when one is
missing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from lore_core.config import LoreConfig
    from lore_core.interfaces import (
        Codec,
        Command,
        CuratorFactory,
        EmbedderFactory,
        Harness,
        LoreApp,
        Mount,
        PromptLayer,
        Provider,
        RequestHandler,
        StoreFactory,
    )
    from lore_core.model import Exchange

PROJECT_NAME = "lore"
ENTRY_POINT_GROUP = "lore"

# The spec marker is private to the kernel; plugins only use ``hookimpl``.
_hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_config_sections() -> dict[str, type] | None:
    """Declare this plugin's own section(s) of ``.lore.json``.

    Return a mapping of top-level key (by convention the plugin's entry-point name, e.g.
    ``"store-duckdb"``) to an attrs class whose fields all have defaults. The kernel
    structures that section strictly with the shared converter (camelCase keys, unknown
    keys rejected with the full key path) and exposes the instance as
    ``config.section(key)``. Called once per configuration load
    (:func:`lore_core.plugins.bootstrap`); all results are merged and a key claimed by two
    plugins is a startup error naming both.
    """


@_hookspec
def lore_configure(config: LoreConfig) -> None:
    """Called once the configuration is loaded and validated, before anything else runs.

    Plugins may read their own section here (``config.section("my-key")``). Must not do I/O
    that can block for long; open resources in :func:`lore_startup` instead.
    """


# ---------------------------------------------------------------------------------------------
# Wire codecs
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_register_codecs(register: Callable[[Codec], None]) -> None:
    """Register wire codecs, one per provider API (Anthropic Messages, Chat Completions, ...).

    A :class:`~lore_core.interfaces.Codec` names the request paths it owns, parses a request
    body into a wire-neutral :class:`~lore_core.model.RequestView` that keeps the raw JSON,
    renders a (possibly modified) view back to wire JSON without losing unknown fields,
    assembles a streamed response incrementally into a
    :class:`~lore_core.model.AssistantMessage`, and formats errors in the API's own shape.
    ``register(codec)`` is keyed by ``codec.api``; two codecs claiming the same API name is a
    startup error.
    """


@_hookspec
def lore_register_providers(register: Callable[[Provider], None]) -> None:
    """Declare providers: the families of upstreams codecs send to (``Codec.provider``).

    ``register(provider)`` is keyed by ``provider.name``; two plugins declaring one name is
    a startup error. A :class:`~lore_core.interfaces.Provider` gives its default upstream
    base URL (none: it must be configured), how a configured key is sent to it, and how a
    request or a model name is known to be its. ``upstream.<name>`` in ``.lore.json`` and
    ``LORE_UPSTREAM_<NAME>`` set its upstream. Called at every start before the
    configuration is read (the configuration checks ``upstream.*`` against the names); the
    kernel's own codecs declare theirs through this hook too. A codec whose provider has no
    upstream gets a 502 in its own error shape, never an exception.
    """


# ---------------------------------------------------------------------------------------------
# Harnesses
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    """Register harnesses: knowledge of one coding client (Claude Code, Codex, OpenCode, ...).

    A :class:`~lore_core.interfaces.Harness` scores how surely a request came from its client
    (``recognise``; the highest score wins, ties broken by name), extracts the session id and
    project of a request, and knows how ``lore run <name>`` launches the client pointed at
    the gateway. ``register(harness)`` is keyed by ``harness.name`` (what ``lore run`` takes).
    The kernel always registers a generic fallback harness with score 0.
    """


@_hookspec
def lore_tool_kinds() -> dict[str, str] | None:
    """Declare what a client's tools do: tool name -> kind, one of
    :class:`lore_core.toolkinds.ToolKind`'s values (``{"str_replace_based_edit_tool":
    "edit"}``); names match in any case.

    The kernel's own table (``DEFAULT_TOOL_KINDS``) names the tools of the clients it knows;
    what a plugin declares is added to it, for every rule that asks a tool's kind: the event
    tags of passages (``#fileedited``, ``#subagent``, ``#codesearch``, ...) and the extractive
    observer's reads, searches and edits. Called once per plugin in ``Registry.collect``;
    ``bootstrap`` installs the merged table for the process. A kind that is not a
    ``ToolKind``, or a tool given another kind than the kernel's or another plugin's, is a
    ``PluginError`` naming the plugins.
    """


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_register_stores(register: Callable[[StoreFactory], None]) -> None:
    """Register storage backends, e.g. ``register(Factory("duckdb", make_store))``.

    A factory has a ``name`` (a :class:`lore_core.plugins.Factory`, or a store class named
    by its ``name`` attribute whose constructor takes the configuration) and
    ``factory(config)`` returns an object implementing :class:`~lore_core.interfaces.Store`;
    it must not open files until ``Store.open()`` is awaited. The backend used is chosen by
    ``store.backend`` in ``.lore.json``. A backend proves itself by passing the conformance
    suite in :mod:`lore_core.testing.conformance.store`.
    """


# ---------------------------------------------------------------------------------------------
# Embeddings
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_register_embedders(register: Callable[[EmbedderFactory], None]) -> None:
    """Register embedding providers, e.g. ``register(Factory("local", make_embedder))``.

    ``factory(config)`` returns an :class:`~lore_core.interfaces.Embedder`; the factory's
    ``name`` is what ``embedding.provider`` names. The provider used
    is chosen by ``embedding.provider``; hosted providers are only ever used when chosen
    explicitly there, never as a fallback.
    """


# ---------------------------------------------------------------------------------------------
# Prompt composition
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_register_prompt_layers(register: Callable[[PromptLayer], None]) -> None:
    """Register prompt-composition layers.

    ``register(layer)`` is keyed by ``layer.name`` (two layers of one name are a startup
    error). Each :class:`~lore_core.interfaces.PromptLayer` has an integer ``priority``; the kernel
    runs them in ascending priority order (never in install order) on the wire-neutral view
    of every request. A layer returns the view unchanged, or a changed view with
    ``modified`` set, in which case the codec renders the body anew; ``compose`` may be a
    coroutine. ``ctx.composition`` is the context manager's plan for the turn (its layer and
    parts); the built-in layers (priorities 100-600 and 900, see ``docs/context.md``) place
    it. A layer that raises is logged and skipped: the request falls back to what the
    previous layers produced (to the client's request when a built-in layer fails).
    """


# ---------------------------------------------------------------------------------------------
# Curation
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_register_request_handlers(register: Callable[[RequestHandler], None]) -> None:
    """Register request handlers: requests the gateway answers itself.

    ``register(handler)`` is keyed by ``handler.name`` (two of one name are a startup
    error). For every model request, after it is parsed and its session identified and
    before anything goes upstream, the handlers run in ascending ``priority``; the first
    :class:`~lore_core.interfaces.HandlerAnswer` is rendered by the request's codec and
    sent (stored as an exchange of the session when it says so). The built-ins answer
    ``/lore:`` commands (priority 100) and a harness's compaction requests (200). An
    exception in a handler fails the request.
    """


@_hookspec
def lore_register_curators(register: Callable[[CuratorFactory], None]) -> None:
    """Register curators: what turns stored exchanges into derived memory.

    ``register(Factory(name, factory, kind=kind))``: ``kind`` is ``"observer"`` (segments -> observation
    logs), ``"reflector"`` (logs -> a meta-distillation) or ``"knowledge"``; ``factory``
    takes a :class:`~lore_core.interfaces.CuratorContext` and returns the curator (see
    :class:`~lore_core.interfaces.Curator` for each kind's method), or ``None`` when it
    cannot work in that context. ``distill.observer`` and
    ``distill.reflector`` in ``.lore.json`` choose by name; the kernel registers ``llm``
    (the default, through the worker model) and ``extractive`` (deterministic, no LLM).
    Curators run off the request path and must be safe to run again on the same input.
    """


# ---------------------------------------------------------------------------------------------
# Commands and mounted applications
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_register_commands(register: Callable[[Command], None]) -> None:
    """Register ``lore`` subcommands: ``register(command)``, keyed by ``command.name``.

    A :class:`~lore_core.interfaces.Command` names the subcommand, gives its one-line
    ``help``, adds its arguments (``configure(parser)``) and runs it (``run(args)``, the exit
    status). The ``lore`` parser asks for them only when the command line does not name a
    built-in command (so ``lore serve`` loads no plugin to parse its arguments, while ``lore
    --help`` lists them). A name that is a built-in command's, or registered twice, is a
    :class:`~lore_core.plugins.PluginError`.
    """


@_hookspec
def lore_register_mounts(register: Callable[[Mount], None]) -> None:
    """Register ASGI applications the gateway serves under a path of its own:
    ``register(mount)``, keyed by ``mount.name``.

    A :class:`~lore_core.interfaces.Mount` has a one-segment ``path`` (``"/mcp"``: that path
    and everything below it; not ``/v1``, ``/lore`` or ``/health``, and no two mounts on one
    path). The kernel dispatches those HTTP requests to the mount before its own routes, only
    after the Host, Origin and peer checks and the gateway token that ``/lore/api`` requires
    (:mod:`lore_core.http.access`), the token excepted for a mount declaring
    ``authenticates_itself`` (it gets a :class:`~lore_core.interfaces.MountAuth` in its scope
    and checks its own credential); ``start(api)`` is awaited after ``lore_startup`` (``api``:
    a :class:`~lore_core.interfaces.LocalApi` calling the gateway's own routes in-process),
    ``stop()`` before ``lore_shutdown``. A bad path is a
    :class:`~lore_core.plugins.PluginError`.
    """


# ---------------------------------------------------------------------------------------------
# Lifecycle and exchange events
# ---------------------------------------------------------------------------------------------


@_hookspec
def lore_startup(app: LoreApp) -> Awaitable[None] | None:
    """Called when the gateway starts serving, after the store is open. ``app``: the
    running gateway as plugins see it (:class:`~lore_core.interfaces.LoreApp`).

    May return an awaitable; the kernel awaits it before accepting requests. Use it to open
    connections or start background tasks owned by the plugin.
    """


@_hookspec
def lore_shutdown(app: LoreApp) -> Awaitable[None] | None:
    """Called on clean shutdown, before the store is flushed and closed.

    May return an awaitable; the kernel awaits it (bounded by the shutdown grace period).
    Plugins stop their background tasks here.
    """


@_hookspec
def lore_exchange_complete(app: LoreApp, exchange: Exchange) -> None:
    """Notified after every proxied exchange has finished (or was cut short by the client).

    ``exchange`` carries the request view, the assembled assistant message (``complete`` is
    false when the stream was cut), the status code, the session and the harness. Runs on
    the event loop after the response is sent: implementations must only enqueue work,
    never block. Exceptions are logged and swallowed.
    """


def all_hookspec_names() -> list[str]:
    """Names of every hook specified here, for tests and ``lore plugins``."""
    return sorted(name for name, value in globals().items() if name.startswith("lore_") and callable(value))
