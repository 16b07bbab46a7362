"""``.lore.json``: attrs classes, one strict cattrs converter, environment overrides.

Keys are camelCase in JSON and snake_case in Python. Every field is optional with a default
documented in ``docs/configuration.md`` (a test checks that every field is documented there).
Unknown or mistyped keys fail startup with a message naming the key path, e.g.
``.lore.json: upstream.byModelPrefx: unknown key``.

Where a configuration comes from, later wins:
1. defaults below;
2. the user file ``$XDG_CONFIG_HOME/lore/.lore.json`` (``~/.config/lore/.lore.json``);
3. the project file: ``.lore.json`` in the working directory or its nearest parent;
4. ``LORE_CONFIG=<path>`` replaces 2 and 3 with one explicit file;
5. ``LORE_*`` environment variables (table ``ENV_OVERRIDES``).
"""

from __future__ import annotations

import json
import os
import re
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs
import platformdirs
from cattrs.gen import make_dict_structure_fn, override

if typing.TYPE_CHECKING:
    from lore_core.interfaces import Provider

CONFIG_FILENAME = ".lore.json"


class ConfigError(Exception):
    """The configuration is invalid; the message names the offending key path."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# ---------------------------------------------------------------------------------------------
# Ranges: every numeric setting says what it accepts; load_config checks it.
# ---------------------------------------------------------------------------------------------

RANGE_KEY = "lore_range"
#: Metadata of a ``dict`` field whose keys are written beside its section's own keys, not
#: under the field's name (``upstream.<provider>``).
FLAT_KEY = "lore_flat"


@attrs.frozen
class Range:
    """Inclusive bounds of a numeric setting (``None``: unbounded on that side)."""

    low: float | None = None
    high: float | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is out of range, or ``None``. ``None`` values (unset optionals) pass."""
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return f"must be {self.text()}, got {value!r}"
        return None

    def text(self) -> str:
        """``between 1 and 65535``, ``at least 0``, ``at most 1``."""
        if self.low is not None and self.high is not None:
            return f"between {_number(self.low)} and {_number(self.high)}"
        if self.low is not None:
            return f"at least {_number(self.low)}"
        return f"at most {_number(self.high)}"


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value}"


def setting(default: Any, *, low: float | None = None, high: float | None = None, **kwargs: Any) -> Any:
    """A numeric configuration field with the range ``load_config`` checks, e.g.
    ``port: int = setting(8377, low=1, high=65535)``. Plugins use it for their own sections:
    a value out of range stops start-up with the key path (``server.port: must be between 1
    and 65535, got 99999``)."""
    return attrs.field(default=default, metadata={RANGE_KEY: Range(low, high)}, **kwargs)


def field_range(field: attrs.Attribute) -> Range | None:  # type: ignore[type-arg]
    """The range a field was declared with (:func:`setting`), if any."""
    return field.metadata.get(RANGE_KEY)


def range_problems(value: Any, path: str) -> list[str]:
    """Every field of a structured section (nested sections and ``dict`` values included)
    that is out of its declared range, as ``key.path: must be ..., got ...``."""
    if isinstance(value, Mapping):
        return [p for key, item in value.items() for p in range_problems(item, f"{path}.{key}")]
    if not attrs.has(type(value)):
        return []
    problems = []
    for field in attrs.fields(type(value)):
        item = getattr(value, field.name)  # an attrs field read by name
        where = f"{path}.{_camel(field.name)}"
        bounds = field_range(field)
        problem = bounds.problem(item) if bounds is not None else None
        if problem is not None:
            problems.append(f"{where}: {problem}")
        problems += range_problems(item, where) if attrs.has(type(item)) or isinstance(item, Mapping) else []
    return problems


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------


@attrs.define
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = setting(8377, low=1, high=65535)
    # Largest request body accepted, in bytes; larger bodies get a 413 in the API's shape.
    max_body_bytes: int = setting(64 * 1024 * 1024, low=1)
    # Largest body of a local API request (/lore/api, /v1/events, /v1/pack); 413 past it.
    max_api_body_bytes: int = setting(16 * 1024 * 1024, low=1)
    # Seconds a client has to send a request's headers (from connecting, or from the end of
    # the previous response on the connection); also how long an idle connection is kept.
    header_timeout_seconds: float = setting(30.0, low=0.1, high=3600)
    # Seconds a client has to send a whole request body; 408 past it.
    body_timeout_seconds: float = setting(300.0, low=0.1, high=86_400)
    # Seconds a clean shutdown waits for in-flight streams and background flushes.
    shutdown_grace_seconds: float = setting(10.0, low=0, high=3600)
    # The gateway token (lore_core/http/access.py); empty: the one in the data directory, made at
    # first start. repr=False: configuration objects are printed in errors and logs.
    token: str = attrs.field(default="", repr=False)
    # Host names (besides loopback names and addresses) requests may be addressed to.
    allowed_hosts: list[str] = attrs.field(factory=list)
    # Answer peers that are not on loopback (every request then needs the token).
    allow_remote: bool = False
    # Memory (knowledge, distillations, recall, commands, storing the session) only for
    # model requests that carry the token in X-Lore-Token; others are relayed untouched.
    require_token_for_memory: bool = False
    # One INFO line per model request on the "lore.requests" logger (lore_core/http/metrics.py):
    # ids, names, token counts and times, never content or keys.
    log_requests: bool = True
    # OpenTelemetry spans per pipeline phase, when the opentelemetry API is installed (where
    # they go is the OpenTelemetry SDK's configuration). Off: not a single call of it.
    trace_requests: bool = False


@attrs.define
class UpstreamConfig:
    # Provider name -> the base URL of its upstream. Written ``upstream.<provider>`` in the
    # file, beside the keys below (``"upstream": {"anthropic": "https://..."}``), or
    # ``LORE_UPSTREAM_<PROVIDER>``; load_config starts it from the defaults of the providers
    # the plugins declare (interfaces.Provider) and refuses a name none declares.
    urls: dict[str, str] = attrs.field(factory=dict, metadata={FLAT_KEY: True})
    # Model-name prefix -> upstream base URL; the longest matching prefix wins.
    by_model_prefix: dict[str, str] = attrs.field(factory=dict)
    # Base URLs a client may name in X-Lore-Upstream-URL and keep its memory without the
    # token (besides the ones above); any other named upstream gets the request untouched.
    allowed_urls: list[str] = attrs.field(factory=list)
    connect_timeout_seconds: float = setting(10.0, low=0.01, high=3600)
    # Time allowed until the upstream's response headers arrive (non-streamed answers from
    # large models can take minutes).
    header_timeout_seconds: float = setting(600.0, low=0.01, high=86400)
    # Longest silence tolerated between two chunks of a response.
    read_timeout_seconds: float = setting(600.0, low=0.01, high=86400)
    # Retries for connect errors, header timeouts and 502/503/504 (never for 4xx or 429).
    max_retries: int = setting(2, low=0, high=10)
    retry_backoff_seconds: float = setting(0.25, low=0, high=60)
    max_connections: int = setting(100, low=1, high=10_000)


@attrs.define
class StoreConfig:
    # Name of a registered store backend; "memory" is the kernel's reference store (nothing
    # survives a restart). The default becomes "duckdb" when lore-store-duckdb is installed.
    backend: str = ""
    # Store location; the default is the user's data directory (LORE_DB_PATH overrides).
    path: str = ""
    # Longest wait (ms) of a finished exchange in the writer queue before it is written: an
    # exchange is durable within about this delay plus one write. Keep it well under 1000.
    flush_interval_ms: int = setting(250, low=0, high=60_000)
    # Messages held in memory while the store fails (disk full, locked file); past this the
    # oldest pending writes are dropped and counted on /health, so memory stays bounded.
    max_pending_messages: int = setting(200_000, low=1)
    # Flush each journal append to the disk before the response completes: survives a power
    # loss too, at a few ms per exchange (without it, a crashed or killed process loses
    # nothing; see lore_core/storage/journal.py).
    fsync: bool = False


@attrs.define
class EmbeddingConfig:
    # Name of a registered embedding provider; empty means the first on-device one found.
    provider: str = ""
    # Embed stored messages and distillations in the background (vector half of recall).
    index: bool = True
    # Items (messages, distillations) embedded per indexing batch: the memory one batch holds.
    batch_size: int = setting(64, low=1, high=4096)
    # Passages embedded per item at most; a longer item keeps its first ones and its last.
    max_chunks_per_item: int = setting(16, low=1, high=4096)
    # A batch the embedder has not answered within this fails (said on /health, retried
    # with backoff): a hung embedder never stops indexing for good.
    batch_timeout_seconds: float = setting(600.0, low=0.1, high=86_400)


WorkerAPI = Literal["", "anthropic-messages", "openai-chat", "openai-responses"]
RecallExpand = Literal["auto", "always", "never"]


@attrs.define
class WorkerConfig:
    """The worker model for background LLM calls (observer, reflector, curator, ...)."""

    # Empty: the model of the session whose data is being processed.
    model: str = ""
    # Base URL of a separate worker upstream; empty: the session's own upstream.
    upstream: str = ""
    # Key for ``upstream`` (or for the provider's default upstream). repr=False: the
    # configuration object is printed in errors and debug logs, the key must never be.
    api_key: str = attrs.field(default="", repr=False)
    # Wire API of the worker; empty: the session's own API, or inferred from the model name
    # for a configured upstream.
    api: WorkerAPI = ""
    max_concurrency: int = setting(2, low=1, high=64)
    # Retries of one call on 429, 5xx, connect errors and timeouts.
    max_retries: int = setting(3, low=0, high=20)
    # First retry delay when the upstream gives no Retry-After; doubles each retry.
    retry_backoff_seconds: float = setting(1.0, low=0, high=600)
    # Consecutive failed calls that open the circuit breaker (calls then fail fast) ...
    circuit_breaker_threshold: int = setting(5, low=1, high=10_000)
    # ... and how long it stays open before one trial call is let through.
    circuit_breaker_cooldown_seconds: float = setting(300.0, low=0, high=86400)
    timeout_seconds: float = setting(120.0, low=0.01, high=86400)
    max_output_tokens: int = setting(4096, low=1)


@attrs.define
class DistillConfig:
    """Distillation (tier 2): when conversation segments become observation logs."""

    # A session with no request for this long is idle and gets distilled (debounced).
    idle_timeout_seconds: float = setting(60.0, low=0, high=604_800)
    # Largest segment one observer call reads, in estimated tokens; more undistilled tokens
    # than this after a turn distil at once, without waiting for idle.
    segment_max_tokens: int = setting(16_000, low=1)
    # The first distillation of a session waits for this many messages ...
    first_segment_min_messages: int = setting(5, low=1)
    # ... and this many estimated tokens.
    first_segment_min_tokens: int = setting(64, low=0)
    # Tool outputs longer than this are replaced by an annotation in the observer's input.
    tool_output_max_chars: int = setting(4000, low=1)
    # Unarchived generation-0 logs of a session that trigger a reflector call ...
    meta_threshold: int = setting(20, low=1)
    # ... which consolidates all but this many of the newest.
    recent_segments_to_keep: int = setting(5, low=0)
    # How long a gateway's claim on a session's distillation and curation runs before it is
    # renewed (after each segment) or, its gateway gone, free for another (a shared store).
    lease_seconds: float = setting(300.0, low=1, high=86_400)
    # Which registered curator writes observation logs: "llm" (the worker model; falls back
    # to "extractive" when no worker is usable) or "extractive" (deterministic, no LLM).
    observer: str = "llm"
    # Which registered curator consolidates logs into a meta-distillation.
    reflector: str = "llm"


@attrs.define
class BudgetConfig:
    # What reading one turn's prompt may cost (USD) before the context manager prefers
    # compressing to sending the full raw conversation: the layer-0 cap is
    # max(target / input price per token, 40K tokens). The design's example (docs/context.md)
    # prices the read at Sonnet's $3/Mtok input rate (33K, so the 40K floor); see
    # economics.layer0_cap.
    target_cache_read_cost_per_turn: float = setting(0.10, low=0)
    # Pins the layer-0 cap (tokens); 0 disables it; null computes it from the target.
    max_layer0_tokens: int | None = setting(None, low=0)
    # Spend (USD) per local day; 0 means no budget. Projected overspend compresses earlier
    # and delays upstream calls.
    daily_budget_usd: float = setting(0.0, low=0)
    # Longest delay added before one upstream call when spend is projected past the budget.
    max_delay_seconds: float = setting(30.0, low=0, high=3600)
    # The share of the model's context window the client is told its prompt uses, at most:
    # larger prompts are reported scaled down so the harness never auto-compacts on its own
    # (Lore's accounting keeps the real numbers). 0 or 1 reports the real usage.
    client_usage_share: float = setting(0.5, low=0, high=1)


@attrs.define
class RecallConfig:
    # Offer the model the recall tool on requests that already offer tools.
    tool: bool = True
    # Recall rounds the gateway runs inside one client turn; past them the turn ends with
    # what the model said.
    max_rounds: int = setting(3, low=0, high=20)
    # Ask the worker model for 2-3 rephrasings of each recall query and search them too
    # (at half weight), waiting at most expandTimeoutSeconds. "auto": when a worker is
    # configured (worker.model, worker.upstream or worker.apiKey: a model chosen for
    # background work); "always": also with the session's own model and credentials (every
    # recall then waits for a call of the main model and pays for it); "never".
    expand: RecallExpand = "auto"
    expand_timeout_seconds: float = setting(3.0, low=0.01, high=600)
    # When a query names a known entity (its name or an alias, as a whole word), also search
    # it with the entity's other names in the full-text lists. No cost without entities.
    expand_aliases: bool = True


@attrs.define
class KnowledgeConfig:
    """Long-term knowledge (tier 3): curated entries injected into every later session."""

    # Inject knowledge into requests that offer tools (the agent's own loop), curate it
    # with the worker model, and keep .lore.md in step. Off: nothing is injected or curated
    # (entries stay in the store; the CLI and the API still work).
    enabled: bool = True
    # The knowledge curator runs after a session's idle distillation and, during long
    # sessions, after this many turns since it last ran.
    curate_every_turns: int = setting(20, low=1, high=100_000)
    # Tokens of the frozen baseline block (preferences in full, a catalogue of the rest).
    baseline_max_tokens: int = setting(1_500, low=0, high=100_000)
    # Tokens and entries of the session's context-bound block (the most relevant entries).
    context_max_tokens: int = setting(2_000, low=0, high=100_000)
    context_entries: int = setting(8, low=0, high=200)
    # Known entities (name, kind, aliases) the baseline block lists at most, within its
    # tokens; 0: none.
    baseline_entities: int = setting(30, low=0, high=500)
    # Entries whose confidence fell below this are no longer injected (still searchable).
    confidence_floor: float = setting(0.2, low=0, high=1)
    # Once a day, entries nothing reinforced for decayAfterDays lose this share of their
    # confidence (0.02: about a third in 20 days).
    decay_per_day: float = setting(0.02, low=0, high=1)
    decay_after_days: float = setting(14.0, low=0, high=3650)
    # Keep the project root's .lore.md in step on idle (entries of sensitivity "normal" only)
    # and import it when it changes. Only where the repository has one (`lore export` writes
    # the first, or a teammate commits it) unless createLoreMd: a file never appears unasked.
    lore_md: bool = True
    # Also write .lore.md into repositories that have none.
    create_lore_md: bool = False
    # Which registered knowledge curator curates: "llm" (the worker model, with
    # distill.observer "llm" only: "extractive" means no LLM calls in the background).
    # Plugins may register more (lore_register_curators).
    curator: str = "llm"
    # Show entries of sensitivity "sensitive" to the worker model (the knowledge curator's
    # prompt). Off by default: the worker is often a hosted model. Restricted entries never.
    worker_sees_sensitive: bool = False


@attrs.define
class EventsConfig:
    """The event log and packs (``POST /v1/events``, ``POST /v1/pack``; docs/events.md)."""

    # After a write, the run is consolidated (events -> distilled memories) once no write
    # came for this long; a steady stream is consolidated at least every 4 x this.
    consolidate_delay_ms: int = setting(250, low=0, high=600_000)
    # One distilled memory holds consecutive events up to these many characters and events.
    memory_max_chars: int = setting(1_500, low=200, high=20_000)
    memory_max_events: int = setting(20, low=1, high=1_000)
    # Recent undistilled events a pack always shows in its raw tail (beside every event up
    # to the reader's min_seq, which is never cut).
    raw_tail_recent: int = setting(20, low=0, high=10_000)
    # Memories (and knowledge entries) a pack retrieves before its token budget applies.
    distilled_limit: int = setting(12, low=1, high=200)
    # A retrieval leg (full text or vectors, of memories or knowledge) that has not
    # answered within this is left out; the pack names it in "degraded" and stays 200.
    retrieval_partial_timeout_ms: int = setting(2_000, low=1, high=600_000)


@attrs.define
class ModelConfig:
    """One entry of ``models``: overrides of the shipped price table for a model-name prefix.

    Prices are USD per million tokens; an unset field keeps what the table says for the
    longest shipped prefix that matches this one (or the documented default).
    """

    input: float | None = setting(None, low=0)
    output: float | None = setting(None, low=0)
    cache_read: float | None = setting(None, low=0)
    # Cache write with the 5-minute TTL (OpenAI: the input price, writes are not billed extra).
    cache_write: float | None = setting(None, low=0)
    # Cache write with the 1-hour TTL, where the provider has one.
    cache_write_hour: float | None = setting(None, low=0)
    context_window: int | None = setting(None, low=1)
    max_input_tokens: int | None = setting(None, low=1)
    max_output_tokens: int | None = setting(None, low=1)
    # How long an unused prompt-cache entry lives upstream.
    cache_ttl_seconds: int | None = setting(None, low=0)


@attrs.define
class LoreConfig:
    server: ServerConfig = attrs.field(factory=ServerConfig)
    upstream: UpstreamConfig = attrs.field(factory=UpstreamConfig)
    store: StoreConfig = attrs.field(factory=StoreConfig)
    embedding: EmbeddingConfig = attrs.field(factory=EmbeddingConfig)
    worker: WorkerConfig = attrs.field(factory=WorkerConfig)
    distill: DistillConfig = attrs.field(factory=DistillConfig)
    budget: BudgetConfig = attrs.field(factory=BudgetConfig)
    recall: RecallConfig = attrs.field(factory=RecallConfig)
    knowledge: KnowledgeConfig = attrs.field(factory=KnowledgeConfig)
    events: EventsConfig = attrs.field(factory=EventsConfig)
    # Model-name prefix -> price/limit overrides (the longest matching prefix wins).
    models: dict[str, ModelConfig] = attrs.field(factory=dict)
    # Plugin sections, structured by each plugin's own class (see ``lore_config_sections``).
    plugin_sections: dict[str, Any] = attrs.field(factory=dict)
    # Files the configuration was read from, for ``lore status``.
    sources: list[str] = attrs.field(factory=list)

    def section(self, key: str) -> Any:
        """A plugin's structured section (its defaults when the file has none)."""
        return self.plugin_sections[key]


CORE_SECTIONS: dict[str, Any] = {
    "server": ServerConfig,
    "upstream": UpstreamConfig,
    "store": StoreConfig,
    "embedding": EmbeddingConfig,
    "worker": WorkerConfig,
    "distill": DistillConfig,
    "budget": BudgetConfig,
    "recall": RecallConfig,
    "knowledge": KnowledgeConfig,
    "events": EventsConfig,
    # Keyed by model-name prefix rather than by fixed field names.
    "models": dict[str, ModelConfig],
}

# Environment variable -> (section, field). Plugins document their own variables; each
# declared provider's upstream is ``LORE_UPSTREAM_<PROVIDER>`` (upstream_env_var).
ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "LORE_HOST": ("server", "host"),
    "LORE_PORT": ("server", "port"),
    "LORE_MAX_BODY_BYTES": ("server", "maxBodyBytes"),
    "LORE_TOKEN": ("server", "token"),
    "LORE_STORE": ("store", "backend"),
    "LORE_DB_PATH": ("store", "path"),
    "LORE_EMBEDDING_PROVIDER": ("embedding", "provider"),
    "LORE_WORKER_MODEL": ("worker", "model"),
    "LORE_WORKER_UPSTREAM": ("worker", "upstream"),
    "LORE_WORKER_API_KEY": ("worker", "apiKey"),
    "LORE_IDLE_TIMEOUT": ("distill", "idleTimeoutSeconds"),
    "LORE_DAILY_BUDGET": ("budget", "dailyBudgetUsd"),
    "LORE_RETRIEVAL_PARTIAL_TIMEOUT": ("events", "retrievalPartialTimeoutMs"),
}


def upstream_settings() -> frozenset[str]:
    """The upstream section's own keys (``maxRetries``, ...): names no provider may take, as
    ``upstream.<provider>`` sits beside them."""
    return frozenset(_camel(f.name) for f in attrs.fields(UpstreamConfig) if not f.metadata.get(FLAT_KEY))


def upstream_env_var(provider: str) -> str:
    """The environment variable that sets a provider's upstream: ``LORE_UPSTREAM_<PROVIDER>``,
    the name upper-cased with every run of other characters than letters and digits as
    ``_`` (``my-vendor`` -> ``LORE_UPSTREAM_MY_VENDOR``)."""
    return "LORE_UPSTREAM_" + re.sub(r"[^A-Z0-9]+", "_", provider.upper())


def env_overrides(
    providers: Iterable[str] = (), extra: Mapping[str, tuple[str, str]] | None = None
) -> dict[str, tuple[str, str]]:
    """Every environment override: the core table, each provider's upstream, ``extra``
    (the plugins' own)."""
    upstreams = {upstream_env_var(name): ("upstream", name) for name in providers}
    return {**ENV_OVERRIDES, **upstreams, **(extra or {})}


# ---------------------------------------------------------------------------------------------
# The converter
# ---------------------------------------------------------------------------------------------


def make_converter() -> cattrs.Converter:
    """One converter for all configuration: camelCase keys, unknown keys forbidden."""
    conv = cattrs.Converter(forbid_extra_keys=True)

    def attrs_hook(cls: type) -> Any:
        # Any: the field names become keyword arguments, which mypy would check against
        # make_dict_structure_fn's own typed parameters.
        overrides: dict[str, Any] = {a.name: override(rename=_camel(a.name)) for a in attrs.fields(cls)}
        return make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **overrides)

    conv.register_structure_hook_factory(attrs.has, attrs_hook)

    # cattrs would happily turn "yes" into True and 1.5 into 1; configuration must not.
    def strict(kind: type) -> Any:
        def hook(value: Any, _: type) -> Any:
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                return float(value)
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
            return value

        return hook

    for kind in (str, int, float, bool):
        conv.register_structure_hook(kind, strict(kind))
    return conv


_CONVERTER = make_converter()


def _error_lines(exc: Exception, path: str, field_names: set[str]) -> list[str]:
    lines = []
    for msg in cattrs.transform_error(exc, path=path):
        # cattrs says "extra fields found (a, b) @ $.server"; say it per key, as a path.
        m = re.match(r"extra fields found \((.*)\) @ (.*)", msg)
        if m:
            for key in m.group(1).split(", "):
                lines.append(f"{_display_path(m.group(2), field_names)}.{key}: unknown key")
        else:
            text, _, where = msg.rpartition(" @ ")
            lines.append(f"{_display_path(where, field_names)}: {text}")
    return lines


def _display_path(path: str, field_names: set[str]) -> str:
    """``$.upstream.max_retries`` -> ``upstream.maxRetries`` (the key as written in JSON)."""
    path = re.sub(r"^\$\.?", "", path).replace("['", ".").replace("']", "")
    return ".".join(_camel(part) if part in field_names else part for part in path.split("."))


def _field_names(cls: Any) -> set[str]:
    if not attrs.has(cls):
        # A dict section (``models``): its keys are the value class's fields.
        return set().union(*(_field_names(arg) for arg in typing.get_args(cls)))
    names: set[str] = set()
    for field in attrs.fields(attrs.resolve_types(cls)):
        names.add(field.name)
        if isinstance(field.type, type) and attrs.has(field.type):
            names |= _field_names(field.type)
    return names


def _flat_field(cls: type) -> attrs.Attribute | None:  # type: ignore[type-arg]
    """The field of ``cls`` whose keys sit beside the others (:data:`FLAT_KEY`), if any."""
    if not attrs.has(cls):
        return None
    flat = [f for f in attrs.fields(attrs.resolve_types(cls)) if f.metadata.get(FLAT_KEY)]
    return flat[0] if flat else None


def structure_section(raw: Any, cls: type, path: str) -> Any:
    """Structure one section strictly; raise :class:`ConfigError` naming the key path."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: expected an object, got {type(raw).__name__}")
    raw = dict(raw)
    flat = _flat_field(cls)
    if flat is not None:
        # The flat field's keys are the ones that are not another field's.
        others = {_camel(f.name) for f in attrs.fields(cls) if f is not flat}
        loose = {key: raw.pop(key) for key in list(raw) if key not in others}
    try:
        value: Any = _CONVERTER.structure(raw, cls)
        if flat is not None:
            setattr(value, flat.name, _CONVERTER.structure(loose, flat.type or dict[str, str]))
    except Exception as exc:
        lines = _error_lines(exc, "$." + path, _field_names(cls))
        raise ConfigError("; ".join(lines) or f"{path}: {exc}") from None
    problems = range_problems(value, path)
    if problems:
        raise ConfigError("; ".join(problems))
    return value


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "lore" / CONFIG_FILENAME
    return Path(platformdirs.user_config_dir("lore")) / CONFIG_FILENAME


def find_project_config(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object")
    return data


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _coerce_env(value: str, cls: type, field_key: str) -> Any:
    """Environment values are strings; turn them into the field's type."""
    for field in attrs.fields(attrs.resolve_types(cls)):
        if _camel(field.name) == field_key:
            kind = field.type
            if kind is bool:
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(f"expected a boolean, got {value!r}")
            if kind is int:
                return int(value)
            if kind is float:
                return float(value)
            return value
    return value


def load_config(
    plugin_sections: Mapping[str, type] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    extra_env: Mapping[str, tuple[str, str]] | None = None,
    core_only: bool = False,
    providers: Iterable[Provider] | None = None,
) -> LoreConfig:
    """Read, merge, override and validate the configuration.

    ``plugin_sections`` maps plugin keys to their attrs classes (from
    ``lore_config_sections``); ``extra_env`` adds plugins' environment overrides.
    ``core_only``: read the core sections and leave the others unchecked (a command that
    only asks a running gateway, which checked them, loads no plugin to know them).
    ``providers`` are the declared providers (``lore_register_providers``): ``upstream.urls``
    starts from their defaults, ``LORE_UPSTREAM_<PROVIDER>`` sets theirs, and an
    ``upstream.<name>`` none of them declares is an unknown key. ``None`` (no plugins asked,
    as with ``core_only``): ``upstream.urls`` holds what the file says, of any name.
    """
    declared = None if providers is None else {p.name: p for p in providers}
    env = os.environ if env is None else env
    plugin_sections = dict(plugin_sections or {})
    clash = set(plugin_sections) & set(CORE_SECTIONS)
    if clash:
        raise ConfigError(f"plugin sections clash with core sections: {sorted(clash)}")

    raw: dict[str, Any] = {}
    sources: list[str] = []
    explicit = env.get("LORE_CONFIG")
    if explicit:
        path = Path(explicit)
        raw = _read_json(path)
        sources.append(str(path))
    else:
        for found in (user_config_path(env), find_project_config(cwd)):
            if found is not None and found.is_file():
                raw = _deep_merge(raw, _read_json(found))
                sources.append(str(found))

    all_sections = {**CORE_SECTIONS, **plugin_sections}
    overrides = env_overrides(declared or (), extra_env)
    for var, (section, key) in overrides.items():
        if var in env and env[var] != "":
            cls = all_sections.get(section)
            if cls is None:
                continue
            try:
                value = _coerce_env(env[var], cls, key)
            except ValueError as exc:
                raise ConfigError(f"{var} ({section}.{key}): {exc}") from None
            section_raw = raw.get(section)
            raw[section] = {**(section_raw if isinstance(section_raw, Mapping) else {}), key: value}

    unknown = sorted(set(raw) - set(all_sections) - {"$schema"})
    if unknown and not core_only:
        known = ", ".join(sorted(all_sections))
        raise ConfigError(f"{unknown[0]}: unknown key (known top-level keys: {known})")

    errors: list[str] = []
    values: dict[str, Any] = {}
    for key, cls in all_sections.items():
        try:
            values[key] = structure_section(raw.get(key), cls, key)
        except ConfigError as exc:
            errors.append(str(exc))
    if not errors and declared is not None:
        upstream = values["upstream"]
        for name in sorted(set(upstream.urls) - set(declared)):
            known = ", ".join(sorted(declared)) or "none"
            errors.append(f"upstream.{name}: unknown key (no plugin declares that provider; known: {known})")
        defaults = {name: p.upstream for name, p in declared.items() if p.upstream}
        upstream.urls = {**defaults, **upstream.urls}
    if errors:
        raise ConfigError("; ".join(errors))

    return LoreConfig(
        server=values["server"],
        upstream=values["upstream"],
        store=values["store"],
        embedding=values["embedding"],
        worker=values["worker"],
        distill=values["distill"],
        budget=values["budget"],
        recall=values["recall"],
        knowledge=values["knowledge"],
        events=values["events"],
        models=values["models"],
        plugin_sections={k: values[k] for k in plugin_sections},
        sources=sources,
    )


def default_data_dir() -> Path:
    """Where stores keep their files unless configured otherwise."""
    return Path(platformdirs.user_data_dir("lore"))
