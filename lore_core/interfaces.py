"""The interfaces plugins implement. The kernel owns them; plugins own the behaviour.

Objects implementing these are handed to the kernel through the registration hooks in
:mod:`lore_core.hookspecs`. ``Harness``, ``Store``, ``Embedder``, ``PromptLayer`` and
``Curator`` are base classes: an implementation inherits from one (``class
MyStore(Store)``), which gives it the documented default of every optional member, so the
kernel calls those members without probing for them. ``Harness``, ``Embedder``,
``PromptLayer`` and ``Curator`` are ``typing.Protocol`` classes so that a type checker also
reports a required member an implementation lacks. ``Store`` and the interfaces of its
optional tiers (:class:`Tier`) are abstract base classes: a store class missing a required
member cannot be instantiated, and the tiers a store declares are checked against the
interfaces it derives from when the kernel builds it (:func:`check_tiers`).
"""

from __future__ import annotations

import enum
import os
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

import attrs

from lore_core.model import TEXT, AssistantMessage, Block, Message, RequestView

if TYPE_CHECKING:
    import argparse

    from lore_core.config import LoreConfig
    from lore_core.curation import Curation, Distillation, DistillInput, ObservationInput
    from lore_core.storage.entities import Entity
    from lore_core.storage.events import NewEvent, RunEvent, RunState, WorkingSnapshot
    from lore_core.storage.forget import ForgetReport
    from lore_core.storage.knowledge import (
        KnowledgeContradiction,
        KnowledgeDecision,
        KnowledgeMetric,
        KnowledgeVersion,
        TeamBinding,
    )
    from lore_core.storage.records import (
        EmbeddingItem,
        ItemVectors,
        PassageRef,
        Project,
        ProjectSummary,
        SchemaMigration,
        SearchHit,
        Session,
        StoredDistillation,
        StoredMessage,
        StoreInventory,
        WriteBatch,
    )


# ---------------------------------------------------------------------------------------------
# Wire codecs
# ---------------------------------------------------------------------------------------------


class StreamAssembler(Protocol):
    """Rebuilds the full assistant message beside a relayed stream.

    ``feed`` receives decoded body bytes exactly as they arrive (chunk boundaries anywhere,
    even inside an SSE event); ``result`` may be called at any time and returns what was
    assembled so far, with ``complete`` set only once the API's terminal event was seen.
    """

    def feed(self, chunk: bytes) -> None: ...

    def result(self) -> AssistantMessage: ...

    @property
    def done(self) -> bool:
        """The API's terminal event was fed: nothing after it changes :meth:`result`. The
        relay finishes (and journals) the exchange before it passes that event on."""
        ...


class Codec:
    """One provider wire API (e.g. Anthropic Messages). Subclass it.

    A codec must implement :meth:`parse`, :meth:`render`, :meth:`parse_response`,
    :meth:`assembler`, :meth:`render_response` and :meth:`error_body`: with those alone the
    gateway proxies, stores and composes requests of the API. Everything below them is
    optional, declared here with its default; a feature a codec does not supply is switched
    off for its API (the gateway logs which at start-up):

    * :meth:`stream_editor` / :meth:`buffered_editor`: rewriting an answer the client sees
      (recall rounds, usage scaling). Without them answers are relayed as the upstream sent
      them.
    * :attr:`recall`: the recall tool's wire shapes. Without it the tool is not offered.
    * :meth:`add_system_text`, :attr:`starts_with_user`, :meth:`place_cache_breakpoints`:
      where the prompt layers put the gateway's own text.
    * :meth:`worker_request`: the one-turn request the worker model is sent in this API.
    * :meth:`may_fail_after_start`: a stream that can still refuse the prompt as too long.
    """

    #: Unique API name.
    api: str = ""
    #: Which family of upstream serves it: the name of a :class:`Provider` a plugin declares
    #: (``lore_register_providers``); its requests go to that provider's upstream.
    provider: str = ""
    #: Path suffixes this codec owns, e.g. ``("/v1/messages",)``; a prefix before them (a
    #: base URL such as ``/anthropic``) is allowed.
    paths: tuple[str, ...] = ()

    def parse(self, raw: dict[str, Any], body: bytes) -> RequestView:
        """Parse a request body into a view. Must accept unknown fields and item types."""
        raise NotImplementedError

    def render(self, view: RequestView) -> dict[str, Any]:
        """Render a view back into wire JSON, keeping every field of ``view.raw`` that the
        pipeline did not change."""
        raise NotImplementedError

    def parse_response(self, raw: dict[str, Any]) -> AssistantMessage:
        """Parse a non-streamed JSON response body."""
        raise NotImplementedError

    def assembler(self) -> StreamAssembler:
        """A fresh assembler for one streamed response."""
        raise NotImplementedError

    def render_response(self, text: str, model: str | None, stream: bool) -> tuple[bytes, str]:
        """A complete text answer the gateway makes itself (e.g. a compaction summary), as
        the API's JSON body or its SSE event sequence; returns (body, content type)."""
        raise NotImplementedError

    def error_body(self, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
        """An error body in this API's own shape."""
        raise NotImplementedError

    # -- optional members, with their defaults ---------------------------------------------

    #: The recall tool's shapes in this API; ``None``: the tool is never offered.
    recall: RecallWire | None = None
    #: Where the gateway's own requests of this API (the worker's) go on an upstream base
    #: URL; empty: the first of :attr:`paths`.
    request_path: str = ""

    #: The API the worker speaks to this codec's provider when a session's own is unknown.
    worker_default: bool = False
    #: Headers the API needs on the worker's requests (unless the credentials carry them).
    worker_headers: tuple[tuple[str, str], ...] = ()
    #: The API wants a conversation to open with a user message (the prompt layers add a
    #: placeholder when the window they keep starts with the assistant).
    starts_with_user: bool = False

    def stream_editor(self, policy: EditPolicy) -> StreamEditor | None:
        """An editor for one streamed answer (SSE events in, the client's bytes out);
        ``None``: the stream is relayed byte for byte."""
        return None

    def buffered_editor(self, policy: EditPolicy) -> BufferedEditor | None:
        """An editor for one non-streamed answer; ``None``: the body is relayed as is."""
        return None

    def add_system_text(self, view: RequestView, text: str) -> None:
        """Add the gateway's own system text (long-term knowledge) after the client's
        system prompt. Default: a synthetic system message after the messages placed so far
        (APIs that keep instructions in a field of their own override this)."""
        view.messages.append(Message(role="system", blocks=[Block(TEXT, text=text)], synthetic=True))

    def place_cache_breakpoints(self, view: RequestView, plan: Any) -> None:
        """Mark where the provider should cache the prompt (``plan`` is the context
        manager's :class:`~lore_core.context.compose.Composition`). Default: nothing (the
        provider caches by prefix, or not at all)."""

    def worker_request(self, model: str, system: str, prompt: str, max_tokens: int) -> dict[str, Any] | None:
        """The JSON body of a one-turn, non-streamed request for the worker model;
        ``None``: the worker cannot use this API."""
        return None

    #: The events a stream opens with, before anything a client shows (with
    #: :meth:`may_fail_after_start`).
    opening_events: frozenset[str] = frozenset()

    def continues_server_state(self, view: RequestView) -> bool:
        """Whether the request continues a conversation the provider keeps (it then carries
        only the new items: its prompt can be any size, and it cannot be made shorter
        here). Default: no."""
        return False

    def may_fail_after_start(self, view: RequestView) -> bool:
        """Whether the upstream may refuse this request as too long after it started
        streaming (the gateway then waits for the first event past the
        :attr:`opening_events` before relaying, so it can compose the request again).
        Default: no."""
        return False

    def stream_error(self, name: str, data: str) -> tuple[str, str] | None:
        """The (message, code) of an SSE event that fails a started stream; ``None`` for any
        other event. Default: streams do not fail after they started."""
        return None


@attrs.frozen
class Provider:
    """A family of upstreams that serve one or more wire APIs (a model vendor, a local
    server): declared with :func:`~lore_core.hookspecs.lore_register_providers` by the plugin
    whose codecs speak it, each codec naming it in :attr:`Codec.provider`. The kernel holds
    no list of providers: this declaration is what it knows of one. Every field but
    :attr:`name` is optional, with the default shown."""

    #: The name codecs give in :attr:`Codec.provider`; ``upstream.<name>`` in ``.lore.json``
    #: and ``LORE_UPSTREAM_<NAME>`` (:func:`lore_core.config.upstream_env_var`) set its
    #: upstream.
    name: str
    #: The base URL its requests go to unless ``upstream.<name>`` says otherwise; empty: none,
    #: so a request of its codecs is refused (502, in the codec's error shape) until one is
    #: configured, a model prefix (``upstream.byModelPrefix``) or ``X-Lore-Upstream-URL``
    #: names one.
    upstream: str = ""
    #: How a configured key (``worker.apiKey``) is sent to it: this header, the key after
    #: :attr:`key_prefix`.
    key_header: str = "authorization"
    key_prefix: str = "Bearer "
    #: Request headers (lower case) that go with a client's credentials besides
    #: ``Authorization`` and :attr:`key_header` (an API version, a beta flag, an
    #: organisation): the worker keeps them with the key for a session's background calls.
    credential_headers: tuple[str, ...] = ()
    #: Request headers (lower case) only its clients send, and fragments of its API's paths:
    #: a request outside every codec's paths (a models list, a file upload) that has one goes
    #: to this provider's upstream.
    request_headers: tuple[str, ...] = ()
    request_paths: tuple[str, ...] = ()
    #: Lower-case prefixes of its model names: a configured worker upstream without
    #: ``worker.api`` is spoken to in this provider's API for such a model.
    model_prefixes: tuple[str, ...] = ()
    #: The provider assumed when nothing names one (a request outside the codecs' paths with
    #: no provider's marks, a worker model no provider claims); the first declared wins.
    default: bool = False


@attrs.define
class RecallCall:
    """A recall tool call the model made in one upstream round."""

    #: The call id as the upstream sent it.
    id: Any
    arguments: Any


@attrs.define
class RoundResult:
    """What one upstream round of a turn produced, for the recall loop to decide what
    comes next."""

    recall_calls: list[RecallCall] = attrs.field(factory=list)
    #: Call ids of the client's own tool calls, in order.
    client_calls: list[Any] = attrs.field(factory=list)
    #: Every call id, in the model's order.
    order: list[Any] = attrs.field(factory=list)
    #: The round's answer as wire items, as they go back upstream in a follow-up.
    assistant: list[dict[str, Any]] = attrs.field(factory=list)
    #: Output items the client saw this round (APIs whose items are messages of their own).
    visible: int = 0
    #: The round ended with the API's terminal event.
    ok: bool = True


@attrs.frozen
class EditPolicy:
    """What a turn editor changes in the answer the client sees."""

    #: The tool whose calls the editor holds back from the client (the gateway runs them
    #: and continues the answer); ``None``: every call is the client's.
    hold_tool: str | None
    #: The model's context window in tokens (0: unknown, no usage scaling).
    context_limit: int
    #: The share of it the client may see as used (:func:`lore_core.wire.turns.scale_factor`).
    usage_share: float


class StreamEditor(Protocol):
    """Rewrites one streamed turn for the client, across the upstream rounds of a recall.

    The relay hands it every SSE event (name, data, the event's raw bytes) and sends what
    it returns; returning ``raw`` relays the event unchanged, ``b""`` holds or drops it."""

    def event(self, name: str, data: str, raw: bytes) -> bytes: ...

    def end_round(self) -> RoundResult:
        """The upstream round ended: what it asked for."""
        ...

    def next_round(self) -> None:
        """A follow-up round begins: its events continue the same client answer."""
        ...

    def markers(self, markers: list[str]) -> bytes:
        """The client's view of recall calls: one text line each."""
        ...

    def finish(self) -> bytes:
        """The closing events of the client's answer (what was held back, rewritten)."""
        ...

    def final_text(self) -> str:
        """The visible text of the last round (the fingerprint the next request is matched by)."""
        ...


class BufferedEditor(Protocol):
    """Builds one non-streamed client answer from the JSON responses of a turn's rounds."""

    def add_round(self, payload: dict[str, Any]) -> RoundResult: ...

    def add_markers(self, markers: list[str]) -> None: ...

    def rewrites(self, payload: dict[str, Any]) -> bool:
        """Whether the client's answer to a one-round turn differs from ``payload``."""
        ...

    def result(self) -> dict[str, Any]: ...

    def final_text(self) -> str: ...


class RecallWire:
    """The recall tool in one wire API: its declaration, its results, and how a recall the
    client saw only as a marker line is put back into the history as it went upstream.

    Records are JSON the gateway keeps per session (``kind`` ``"loop"``: the rounds of a
    turn that only recalled; ``"mixed"``: recall calls beside the client's own)."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec

    def tool(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The tool's declaration in the request's ``tools``."""
        raise NotImplementedError

    def tool_name(self, tool: object) -> str | None:
        """The name of a tool entry (``None`` when it has none). Default: ``name``, or
        ``function.name``."""
        if not isinstance(tool, Mapping):
            return None
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
        name = tool.get("name")
        return name if isinstance(name, str) else None

    def result_items(self, results: Mapping[str, str]) -> list[dict[str, Any]]:
        """Wire items carrying the tool results (call id -> text) in a follow-up."""
        raise NotImplementedError

    def messages(self, items: list[Any]) -> list[Message]:
        """Wire items as messages, parsed by the codec itself (so blocks and raw agree)."""
        raise NotImplementedError

    def mixed_record(self, result: RoundResult, results: Mapping[str, str]) -> dict[str, Any]:
        """What to keep of a round whose recall calls sat beside the client's own calls."""
        raise NotImplementedError

    def restore_loop(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        """Put a ``loop`` record back at ``out[i]`` (the client's message holding its
        markers): the new history and where to continue, or ``None`` when it does not fit."""
        raise NotImplementedError

    def restore_mixed(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        """Put a ``mixed`` record back at ``out[i]`` (the message holding its anchor call)."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# The application plugins see
# ---------------------------------------------------------------------------------------------


class LoreApp(Protocol):
    """What the lifecycle and exchange hooks hand a plugin: the running gateway's
    configuration and store, nothing of its internals."""

    @property
    def config(self) -> LoreConfig:
        """The loaded ``.lore.json`` (a plugin's own section: ``config.section(key)``)."""
        ...

    @property
    def store(self) -> Store:
        """The store the gateway writes (read it; the gateway's writer owns the writes)."""
        ...

    @property
    def store_open(self) -> bool:
        """The store is open: the gateway can write exchanges now."""
        ...

    @property
    def cwd(self) -> str:
        """The directory the gateway runs in."""
        ...

    def stats(self) -> Mapping[str, int]:
        """A copy of the gateway's counters (requests, errors, ...), as ``/health`` shows them."""
        ...


# ---------------------------------------------------------------------------------------------
# Request handlers
# ---------------------------------------------------------------------------------------------


@attrs.define
class HandlerAnswer:
    """A text answer the gateway gives a model request itself (no upstream call), rendered
    by the request's codec. ``store``: kept as an exchange of the session, like an answer
    from upstream."""

    text: str
    store: bool = False


@attrs.frozen
class RequestInfo:
    """What a request handler sees of a model request (read-only)."""

    #: The wire API (the codec's ``api``) and the path it came to.
    api: str
    path: str
    #: The request's headers, lower-cased.
    headers: Mapping[str, str]
    #: The request as the codec parsed it.
    view: RequestView
    #: The harness that recognised it (``None`` if none did), and what it was shown.
    harness: Harness | None
    context: RequestContext | None
    session_id: str
    project: str
    #: Whether the request may reach the session's memory (docs/security.md, "Memory follows
    #: its owner"); ``False`` only reaches a handler with ``answers_strangers``.
    may_reach_memory: bool


class RequestHandler:
    """Answers some model requests before they go upstream (the built-ins: ``/lore:``
    commands, compaction answers). Handlers run in ascending ``priority``; the first answer
    wins. ``request`` is what a handler sees of the request; ``app`` the running gateway as
    plugins see it."""

    name: str = ""
    priority: int = 500
    #: Whether the handler also sees requests that may not reach memory (``turn.access``
    #: refused: another OS user's, another session owner's, one sent to an upstream the
    #: client chose); such a handler must read and change nothing of memory for them.
    #: By default it does not: those requests go upstream untouched.
    answers_strangers: bool = False

    async def answer(self, request: RequestInfo, app: LoreApp) -> HandlerAnswer | None:
        """The answer, or ``None`` to let the request go on."""
        return None


# ---------------------------------------------------------------------------------------------
# Harnesses
# ---------------------------------------------------------------------------------------------


@attrs.define
class RequestContext:
    """What a harness sees of an incoming request (headers lower-cased)."""

    path: str
    headers: Mapping[str, str]
    view: RequestView | None
    gateway_cwd: str = attrs.field(factory=os.getcwd)


@attrs.define
class LaunchPlan:
    """How to start a client wired to the gateway: argv, extra environment, files to write."""

    argv: list[str]
    env: dict[str, str] = attrs.field(factory=dict)
    # Temporary config files the launcher writes before starting (path -> content) and
    # removes afterwards.
    files: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class ClientSetting:
    """One setting ``lore setup <agent>`` writes into the client's own configuration file, so
    that the client reaches the gateway when it is started without ``lore run`` (from an IDE,
    a script, a desktop launcher). ``lore setup undo <agent>`` puts back what was there."""

    #: The client's configuration file (created when missing). Its suffix says the format:
    #: ``.json``, or ``.toml`` (top-level keys only: ``key`` then has one part).
    path: Path
    #: Where in the file: the nested object keys (``("env", "ANTHROPIC_BASE_URL")``).
    key: tuple[str, ...]
    #: The value to set: a string, a boolean or a number, as the client expects it.
    value: str | bool | int


@attrs.frozen
class HistorySource:
    """One piece of a client's local history that its harness reads by itself: a transcript
    file, or one session of the client's database. ``lore import --from`` reads each source
    once: a source whose ``size`` and ``modified`` are as they were when it was imported is
    skipped (so an interrupted import resumes where it stopped)."""

    #: Where it is, unique and stable across runs: a path, or a path and a session id.
    key: str
    #: Its size in bytes: how far the progress bar moves once it is read.
    size: int
    #: When it last changed (epoch seconds): nothing in it is newer, so ``--since`` skips
    #: an older source without reading it.
    modified: float


@attrs.define
class HistoryWindow:
    """One context window of an imported session: a request body of the session's wire API
    whose conversation (``messages``, or ``input`` items) is the window's, as the client
    would have sent it (its ``model``, when known, is stored as the session's; a system
    prompt and tools may be left out: only the conversation is stored), and when each of
    those messages or items was written (epoch seconds, 0 when the transcript does not say),
    in the same order."""

    request: dict[str, Any]
    times: list[float] = attrs.field(factory=list)


@attrs.define
class ImportedSession:
    """One session read from a client's local history: what the client sent, in the wire
    API it would send it in, so that the kernel parses it with that API's codec and stores
    it exactly as a proxied request of the session (same blocks, same message ids: a later
    request resending this history through the gateway stores nothing twice)."""

    #: The client's own session id (the one its requests carry).
    id: str
    #: The directory the client worked in (absolute), or ``""`` when the transcript does
    #: not say.
    project: str
    #: The wire API of the windows' requests (a codec's :attr:`Codec.api`).
    api: str
    #: The conversation, context window by context window: after the client compacted its
    #: context it went on from a summary, which the gateway stores as a new history.
    windows: list[HistoryWindow] = attrs.field(factory=list)


class Harness(Protocol):
    """Knowledge of one coding client. Implementations inherit from it.

    :meth:`history_root`, :meth:`history_sources` and :meth:`read_history` are optional:
    they let ``lore import --from <name>`` read the client's own transcripts. By default a
    harness has no history to import. :meth:`setup_settings` is optional too: by default
    ``lore setup <name>`` has nothing to write."""

    #: Name used by ``lore run <name>`` and stored with every session.
    name: str
    #: The npm package that installs the client, named in ``lore run``'s hint when its
    #: executable is missing; ``None``: no hint.
    npm_package: str | None = None
    #: ``lore run <name>`` can start the client (:meth:`launch`); ``False`` for a harness
    #: that only recognises requests (the kernel's ``generic``): its :meth:`launch` is never
    #: called, and ``lore run`` says it cannot launch a client.
    launches: bool = True

    @property
    def display_name(self) -> str:
        """The client's name for people (``"Claude Code"``); by default :attr:`name`. A
        plugin overrides it with a plain class attribute."""
        return self.name

    def recognise(self, ctx: RequestContext) -> int:
        """How surely this request came from this client: 0 = not at all, higher = surer."""

    def session_id(self, ctx: RequestContext) -> str | None:
        """The client's session id, or ``None`` to fall back to a content fingerprint."""

    def project(self, ctx: RequestContext) -> str | None:
        """The project (an absolute directory) the request works on, or ``None``."""

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        """How ``lore run <name> args...`` starts the client pointed at ``gateway_url``
        (called only when :attr:`launches`)."""

    def setup_settings(self, gateway_url: str) -> list[ClientSetting]:
        """What ``lore setup <name>`` writes into the client's own configuration files so it
        talks to ``gateway_url`` whenever it starts, with the same effect as :meth:`launch`'s
        plan. Default: none (``lore setup`` says the client cannot be set up that way)."""
        return []

    def compaction_request(self, ctx: RequestContext) -> bool:
        """The request is the client's own "summarise the conversation" call; the gateway then
        answers it from the session's distillations without an upstream call, so the client's
        summary is Lore's memory. By default no request is."""
        return False

    def history_root(self) -> Path | None:
        """Where the client keeps its transcripts on this machine (e.g.
        ``~/.claude/projects``), read when ``lore import`` is given no ``--path``; ``None``
        (the default): the client keeps none that this harness reads."""
        return None

    def history_sources(self, root: Path) -> list[HistorySource]:
        """The sources under ``root`` (the :meth:`history_root`, or a folder or file the user
        named with ``--path``), in the order to read them. Must be cheap (listing and
        ``stat``, no reading). Default: none."""
        return []

    def read_history(self, source: HistorySource) -> Iterator[ImportedSession]:
        """The sessions of one source. Yields nothing for a file that is not in the client's
        format (``--path`` may name a folder holding other files); raises ``OSError`` or
        ``ValueError`` for one that cannot be read (the import reports it and goes on).
        Default: nothing."""
        return iter(())


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


class Tier(enum.Enum):
    """An optional part of the store contract, beyond the messages every store keeps.

    A store declares the tiers it has in :attr:`Store.tiers` and derives from each one's
    interface (:data:`TIER_INTERFACES`); the kernel asks the declared set (:func:`has_tier`,
    :func:`tier_of`) before it uses a tier, and leaves out what a tier would add (recall
    without vectors is full-text only; without knowledge the prompt carries none)."""

    #: Observation logs and their consolidations (:class:`DistillationStore`).
    DISTILLATIONS = "distillations"
    #: The embedding index of hybrid recall (:class:`VectorStore`).
    VECTORS = "vectors"
    #: Long-term knowledge: versions, metrics, contradictions, teams (:class:`KnowledgeStore`).
    KNOWLEDGE = "knowledge"
    #: Named things and their relations (:class:`EntityStore`).
    ENTITIES = "entities"
    #: The event log of ``/v1/events``: runs, checkpoints, working snapshots (:class:`EventLogStore`).
    EVENTS = "events"

    @property
    def label(self) -> str:
        """What a person reads: "the memory store has no {label}"."""
        return _TIER_LABELS[self]


_TIER_LABELS = {
    Tier.DISTILLATIONS: "distillations",
    Tier.VECTORS: "vector index",
    Tier.KNOWLEDGE: "knowledge",
    Tier.ENTITIES: "entities",
    Tier.EVENTS: "event log",
}


class Store(ABC):
    """A storage backend: the temporal store (messages, sessions, projects, per-session state
    and full-text search) that every optional tier derives from.

    The full contract is written down as tests by the conformance suite in
    :mod:`lore_core.testing.conformance.store` (one mixin per tier); a backend proves itself by
    passing the suites of what it declares. Records are the attrs classes of
    :mod:`lore_core.storage.records`; message ids are computed by the kernel
    (:func:`lore_core.storage.identity.message_id`), never by a backend, so every backend agrees.

    Methods are coroutines and must not block the event loop (run blocking I/O in a thread).
    One gateway writes at a time, unless the store is :attr:`shared` (a server database:
    several gateways and ``lore`` commands at once; each write is then idempotent under
    concurrent writers, and :meth:`claim_lease` gives a piece of work to one of them). Messages
    arrive through :meth:`write` from the kernel's writer queue
    (:mod:`lore_core.storage.writer`).

    Every member without a default is abstract: a store missing one cannot be instantiated.
    The optional tiers (:class:`Tier`) are interfaces of their own, abstract likewise; a store
    derives from those it implements and names them in :attr:`tiers`, which the kernel
    checks once when it builds the store (:func:`check_tiers`)::

        class MyStore(Store, DistillationStore, VectorStore):
            tiers = frozenset({Tier.DISTILLATIONS, Tier.VECTORS})
    """

    #: Registered backend name (``"duckdb"``, ``"memory"``, ...).
    name: str
    #: The optional tiers this store has; each must be one whose interface the class derives
    #: from. Empty: messages only (no distillations, vectors, knowledge, entities or events).
    tiers: ClassVar[frozenset[Tier]] = frozenset()
    #: Where the store keeps its data, for people (a file path); ``None``: nowhere to show.
    location: str | None = None
    #: Where the kernel keeps this store's write-ahead journal (:mod:`lore_core.storage.journal`):
    #: records acknowledged to clients and not yet committed, replayed at the next start.
    #: Beside the store's own files; ``None`` for a store that keeps nothing across a
    #: restart (then there is nothing to protect).
    journal_dir: Path | None
    #: Set by :meth:`open` in a store with versioned schema migrations: the version it found
    #: and the version it left (``lore store migrate`` reports both); ``None``: a store
    #: without versioned migrations (nothing to migrate).
    migration: SchemaMigration | None = None
    #: Other processes (gateways on other machines or ports, ``lore`` commands) write this
    #: store at the same time: a server database. A gateway on a shared store commits each
    #: answered exchange before the answer's last event goes out (a reader on another
    #: gateway reads its writes), and checks what it caches of the store (the knowledge the
    #: prompt carries) against the store. ``False`` (a file one process holds): neither.
    shared: bool = False

    # -- lifecycle -------------------------------------------------------------------------

    @abstractmethod
    async def open(self) -> None:
        """Open (creating and migrating the schema when needed). Raise
        :class:`~lore_core.storage.records.StoreUnavailable` with a one-line reason on failure."""

    @abstractmethod
    async def close(self) -> None:
        """Make everything written durable and release files and locks."""

    @abstractmethod
    def health(self) -> dict[str, Any]:
        """``{"ok": bool, "detail": str, ...}`` for ``/health`` and ``lore status``."""

    # -- writes ----------------------------------------------------------------------------

    @abstractmethod
    async def write(self, batch: WriteBatch) -> int:
        """Apply a batch atomically and durably; return how many new messages were stored.

        Idempotent: a message whose id is stored is skipped, sessions and projects are
        upserted with :func:`lore_core.storage.records.merge_session`. Raise on failure (the writer
        keeps the batch and retries); a partial batch must never become visible."""

    @abstractmethod
    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        """Persist one per-session value (JSON-serialisable), e.g. ``forceMinLayer``."""

    async def set_states(self, values: Sequence[tuple[str, str, Any]]) -> None:
        """Persist several ``(session_id, key, value)`` at once. By default one
        :meth:`set_state` each; a store with transactions should write them in one (the
        spend of every session that spent since the last save is written together)."""
        for session_id, key, value in values:
            await self.set_state(session_id, key, value)

    # -- reads -----------------------------------------------------------------------------

    @abstractmethod
    async def get_state(self, session_id: str, key: str, default: Any = None) -> Any: ...

    async def get_states(self, key: str, session_ids: Sequence[str]) -> dict[str, Any]:
        """One key's value for several sessions: those that have it, by session id. By
        default one :meth:`session_state` each; a store with queries should read them in one."""
        found: dict[str, Any] = {}
        for session_id in session_ids:
            state = await self.session_state(session_id)
            if key in state:
                found[session_id] = state[key]
        return found

    @abstractmethod
    async def session_state(self, session_id: str) -> dict[str, Any]:
        """Every state value of a session."""

    @abstractmethod
    async def get_session(self, session_id: str) -> Session | None:
        """The session with ``message_count`` and ``branch_count`` filled in."""

    @abstractmethod
    async def list_sessions(
        self,
        project: str | None = None,
        limit: int = 50,
        *,
        before: tuple[float, str] | None = None,
        since: float | None = None,
        harness: str | None = None,
        model: str | None = None,
        text: str | None = None,
    ) -> list[Session]:
        """Most recently updated first (``(updated_at, id)`` descending), at most ``limit``,
        each with ``message_count`` and ``branch_count``; only those of ``project``, older than
        ``before`` (an ``(updated_at, id)`` the previous page ended at: a keyset page, not
        shifted by sessions arriving meanwhile), updated at or after ``since``, of this
        ``harness``, of this ``model``, and whose title, id, model or project holds ``text``
        (case-insensitive), as given. Its cost must not grow with the messages stored: a
        page of the dashboard and ``lore sessions`` read it."""

    @abstractmethod
    async def list_projects(self) -> list[Project]: ...

    @abstractmethod
    async def project_summaries(self, spend_key: str) -> list[ProjectSummary]:
        """Every project that has a session, a project row or (with the knowledge tier) a
        current, alive knowledge entry scoped to it (``""`` for sessions filed under no
        project), with its counts (:class:`~lore_core.storage.records.ProjectSummary`;
        ``knowledge`` 0 without that tier); ``spend_usd`` sums the numeric
        state values of its sessions under ``spend_key``. Most recent activity first, then by
        project. Computed by the store (``/lore/api/projects``, the dashboard's projects page),
        not by reading every session."""

    @abstractmethod
    async def session_messages(self, session_id: str) -> list[StoredMessage]:
        """Every message of a session, every branch, ordered by position then creation."""

    @abstractmethod
    async def get_messages(self, ids: Sequence[str]) -> list[StoredMessage]:
        """The messages with these ids that exist (in the order given)."""

    @abstractmethod
    async def search(
        self,
        query: str,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        """BM25 full-text search over the passages of messages and distillations
        (:mod:`lore_core.storage.passages`: cut by the kernel's rules, so every backend indexes the
        same units), best first, one hit per passage: ``id`` the item, ``passage`` its index,
        ``text`` the passage's text, ``start``/``end`` and ``tool`` as the passage has them.
        A message is searchable as soon as :meth:`write` returned. An empty or
        stop-word-only query returns ``[]``."""

    @abstractmethod
    async def sync_search_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Bring the full-text index fully up to date now and return the items it indexed;
        ``progress(done, total)`` as it goes. After the passage or tag rules changed
        (:func:`lore_core.storage.passages.fulltext_rules`) this is the rebuild (``lore reindex``)."""

    # -- forgetting (lore_core.storage.forget) ---------------------------------------------

    @abstractmethod
    async def forget_session(self, session_id: str, keep_state: Sequence[str] = ()) -> ForgetReport:
        """Remove the session for good: its row, its messages, its distillations (every
        generation, with the distillation tier), their full-text passages and vectors (every
        model's, with the vector tier), and its state but the keys in ``keep_state``;
        ``found`` is false when the store had no row, message or distillation of it (the rest
        is removed all the same). Afterwards no read, search or
        vector search returns any of it, and no file of the store holds its text: a backend
        that keeps deleted data in its files (free pages, unmerged deletions, old versions)
        rewrites them before it returns. Other sessions are untouched (their vectors stay, so
        nothing becomes pending). The kernel's mark that keeps a resent history out is a state
        key it keeps (:mod:`lore_core.storage.forget`)."""

    # -- leases: one gateway at a time on a piece of work (a shared store) -------------------

    async def claim_lease(self, key: str, holder: str, seconds: float) -> bool:
        """Claim (or renew) the lease ``key`` for ``holder`` until ``seconds`` from now:
        ``True`` when it was free, expired or ``holder``'s already; ``False`` while another
        holder's lease runs. A lease is stored, so it outlives a crashed holder until it
        expires. The distillation scheduler claims ``distill:<session>`` around a session's
        distillation and curation. By default every claim is granted: a store one process
        holds at a time has nobody to share with; a :attr:`shared` store implements them."""
        return True

    async def release_lease(self, key: str, holder: str) -> None:
        """End ``holder``'s lease ``key`` (nothing when it is not ``holder``'s)."""
        return None

    # -- copying a whole store (lore_core.storage.copy, ``lore store copy``) -----------------

    @abstractmethod
    async def inventory(self) -> StoreInventory:
        """The keys no other read lists: session ids with state, event-log runs, projects
        with a team binding, teams with a policy (empty where the store lacks the tier).
        ``lore store copy`` walks them (with the reads of each tier) to copy every tier
        through these interfaces."""

    @abstractmethod
    async def stats(self) -> dict[str, Any]:
        """Counts (``projects``, ``sessions``, ``messages``), ``path``, ``size_bytes``,
        ``schema_version`` and backend-specific figures, for ``lore status``; ``advice``
        (optional, a list of one-line strings) is printed under them: something the user
        can do for the store (a command to run), never an error."""


class DistillationStore(ABC):
    """Tier :attr:`Tier.DISTILLATIONS`: the observation logs the distillation scheduler writes
    and the meta-distillations that consolidate them (:mod:`lore_core.distill`)."""

    tier: ClassVar[Tier] = Tier.DISTILLATIONS

    @abstractmethod
    async def write_distillation(self, distillation: StoredDistillation, archive: Sequence[str] = ()) -> bool:
        """Store one distillation and archive the distillations ``archive`` names, in one
        transaction (a meta-distillation and the archiving of what it consolidated happen
        together or not at all). Idempotent: an id already stored is skipped (``False``).
        Searchable at once, as ``d:<id>`` hits with role ``distillation``."""

    @abstractmethod
    async def list_distillations(
        self, session_id: str | None = None, include_archived: bool = True
    ) -> list[StoredDistillation]:
        """A session's distillations (every session's with ``None``), oldest first."""

    @abstractmethod
    async def get_distillation(self, distillation_id: str) -> StoredDistillation | None:
        """One distillation by id (with or without the ``d:`` prefix)."""

    @abstractmethod
    async def archive_distillations(self, ids: Sequence[str]) -> int:
        """Mark distillations archived (never deleted); return how many changed."""

    @abstractmethod
    async def distilled_message_ids(self, session_id: str) -> set[str]:
        """Every message id of the session that some generation-0 distillation covers."""


class VectorStore(ABC):
    """Tier :attr:`Tier.VECTORS`: the embedding index of hybrid recall
    (:mod:`lore_core.recall.indexer`). Without it recall uses full-text search only.

    One index per embedding model (``model`` is the embedder's model name): a model change
    starts a new index that is backfilled from the store, and vectors of two models (or two
    sizes) are never compared. Messages and distillations (archived ones too) are embedded.
    """

    tier: ClassVar[Tier] = Tier.VECTORS

    @abstractmethod
    async def pending_embeddings(self, model: str, limit: int = 256) -> list[EmbeddingItem]:
        """Items with no vectors yet for ``model``, in ascending ``cursor`` order (oldest
        first). Resumable by construction: what is pending is derived from what is stored."""

    @abstractmethod
    async def write_vectors(self, model: str, dimensions: int, items: Sequence[ItemVectors]) -> int:
        """Store the passage vectors of ``items`` (a prefix of what :meth:`pending_embeddings`
        returned, in order) and mark them embedded for ``model``; return vectors stored.
        Raise :class:`~lore_core.storage.records.VectorDimensionError` if ``dimensions`` differs from
        what the model's index holds. Searchable once it returned."""

    async def vector_search(
        self,
        model: str,
        vector: Sequence[float],
        kinds: Sequence[str] | None = None,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        """Nearest passages to a unit-length vector by cosine similarity (``score``), best
        first, one hit per embedded passage (a passage written with several vectors, its
        facets, counts once, at its best; a store may then return fewer than ``limit``),
        filtered by kind, session and project. Hits
        look like :meth:`search` hits (``passage`` the index the vector was written under,
        ``text`` that passage's text): distillations as ``d:<id>`` with role
        ``distillation``. An unknown model gives ``[]``. By default
        :meth:`nearest_passages` then :meth:`read_passages`."""
        found = await self.nearest_passages(model, vector, kinds, session_id, project, limit)
        return await self.read_passages(found)

    @abstractmethod
    async def nearest_passages(
        self,
        model: str,
        vector: Sequence[float],
        kinds: Sequence[str] | None = None,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[PassageRef]:
        """What :meth:`vector_search` finds, without reading the passages: recall reads only
        those that can still reach its answer once the full-text hits are known (reading a
        passage means reading and cutting its whole item)."""

    @abstractmethod
    async def read_passages(self, refs: Sequence[PassageRef]) -> list[SearchHit]:
        """The hits of passages :meth:`nearest_passages` found, as :meth:`vector_search`
        returns them, in the order given; a passage whose item is gone, or that its item
        no longer has (cut by other rules), is left out."""

    @abstractmethod
    async def vector_stats(self, model: str | None = None) -> dict[str, Any]:
        """``{model: {"dimensions", "vectors", "pending", ...}}`` for every indexed model (or
        only ``model``; a model never indexed reports 0 vectors and everything pending)."""

    @abstractmethod
    async def reset_vectors(self, model: str) -> None:
        """Drop ``model``'s vectors: everything becomes pending again (``lore reindex --full``)."""

    async def optimize_vectors(self, model: str) -> None:
        """Compact ``model``'s index; the indexer calls it when idle and after ``lore
        reindex``. By default there is nothing to compact."""
        return None


class KnowledgeStore(ABC):
    """Tier :attr:`Tier.KNOWLEDGE`: long-term knowledge (:mod:`lore_core.storage.knowledge`),
    its metric register and contradictions, and the teams that govern it
    (:mod:`lore_core.knowledge.teams`: bindings, policies, approval decisions).

    Versions are immutable and appended; the current one per entry is the latest; deletes
    append a death certificate. The metric register holds the two mutable numbers.
    """

    tier: ClassVar[Tier] = Tier.KNOWLEDGE

    @abstractmethod
    async def write_knowledge(self, version: KnowledgeVersion) -> bool:
        """Append one version and make it its entry's current one, in one transaction (the
        previous version stays, no longer current). ``version.version`` must be 1 for an id
        never stored and the current version + 1 otherwise, else raise
        :class:`~lore_core.storage.knowledge.KnowledgeConflict` and write nothing. Idempotent:
        a ``version_id`` already stored is skipped (``False``). Version 1 also creates the
        entry's metric at :data:`~lore_core.storage.knowledge.INITIAL_CONFIDENCE` of its
        author; a death certificate leaves the metric as it is."""

    @abstractmethod
    async def knowledge_versions(self, logical_id: str) -> list[KnowledgeVersion]:
        """Every version of one entry, oldest first, death certificates included (the base
        table), ``is_current`` set on the latest."""

    @abstractmethod
    async def current_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        """The "current and alive" view: the current version of every entry that is not
        deleted, of ``project`` (plus scope ``global`` entries when ``include_global``;
        ``None``: every project), in :func:`~lore_core.storage.knowledge.canonical_order`."""

    @abstractmethod
    async def deleted_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        """The entries that are deleted now, each as its current version (the death
        certificate, which keeps the entry's title and text), chosen as
        :meth:`current_knowledge` chooses, most recently deleted first (then by id): what a
        person may restore, listed (the dashboard's knowledge page)."""

    @abstractmethod
    async def knowledge_tombstone(
        self, project: str, *, logical_id: str | None = None, title: str | None = None
    ) -> KnowledgeVersion | None:
        """The death certificate that an import must respect, read from the base table: the
        current version of the entry ``logical_id`` if it is deleted, else a deleted current
        version of ``project`` or of scope ``global`` whose title equals ``title`` under
        :func:`~lore_core.storage.knowledge.normalize_title`. ``None`` when there is none."""

    @abstractmethod
    async def knowledge_metrics(self, logical_ids: Sequence[str] | None = None) -> dict[str, KnowledgeMetric]:
        """The metric register of these entries (every entry's with ``None``)."""

    @abstractmethod
    async def set_knowledge_metrics(self, metrics: Sequence[KnowledgeMetric]) -> int:
        """Set these entries' metrics to exactly these values (a copy of another store's
        register), in one transaction; returns how many were written."""

    @abstractmethod
    async def reinforce_knowledge(self, logical_ids: Sequence[str], amount: float, at: float) -> int:
        """Raise these entries' confidence by ``amount`` (at most 1.0) and set
        ``last_reinforced_at`` to ``at``; entries without a metric start at
        :data:`~lore_core.storage.knowledge.DEFAULT_CONFIDENCE`. Returns entries changed."""

    @abstractmethod
    async def decay_knowledge(self, factor: float, not_reinforced_since: float) -> int:
        """Multiply by ``factor`` the confidence of every entry whose ``last_reinforced_at``
        is before ``not_reinforced_since`` (or was never set); returns entries changed."""

    @abstractmethod
    async def record_contradiction(self, judgement: KnowledgeContradiction) -> None:
        """Store the latest judgement of a pair (``first_id`` < ``second_id``), replacing the
        one before it."""

    @abstractmethod
    async def knowledge_contradictions(
        self, project: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[KnowledgeContradiction]:
        """The judged pairs of ``project`` (``None``: every project's), with one of
        ``statuses`` when given, newest judgement first."""

    # -- teams (lore_core.knowledge.teams): bindings and approval decision records ---------

    @abstractmethod
    async def team_binding(self, project: str) -> TeamBinding | None:
        """The team ``project`` is bound to, or ``None``."""

    @abstractmethod
    async def set_team_binding(self, project: str, binding: TeamBinding | None) -> None:
        """Bind ``project`` (replacing its binding), or unbind it with ``None``."""

    @abstractmethod
    async def team_policy(self, team: str) -> str | None:
        """The promotion policy set for the whole team, or ``None`` when none was set."""

    @abstractmethod
    async def set_team_policy(self, team: str, policy: str) -> None:
        """Set the promotion policy of the whole team (replacing the one set before)."""

    @abstractmethod
    async def record_decisions(self, decisions: Sequence[KnowledgeDecision]) -> int:
        """Add approval decisions (append-only: a ``decision_id`` already held is skipped,
        whatever its ``project``); returns how many were new."""

    @abstractmethod
    async def knowledge_decisions(
        self, project: str | None = None, *, logical_ids: Sequence[str] | None = None
    ) -> list[KnowledgeDecision]:
        """The decision records of ``project`` (``None``: all), of ``logical_ids`` when
        given, ordered by entry, time and id."""


class EntityStore(ABC):
    """Tier :attr:`Tier.ENTITIES` (:mod:`lore_core.storage.entities`): one mutable row per
    entity; the rules (names unique within what a project sees, merges) are the kernel's
    (:mod:`lore_core.knowledge.entities`), a backend stores and reads."""

    tier: ClassVar[Tier] = Tier.ENTITIES

    @abstractmethod
    async def write_entities(self, entities: Sequence[Entity]) -> None:
        """Store these entities in one transaction: an id not stored is added, a stored id
        is replaced whole (a merge writes the survivor and the redirect together, or
        neither)."""

    @abstractmethod
    async def delete_entities(self, entity_ids: Sequence[str], updated: Sequence[Entity] = ()) -> int:
        """Remove these entities (ids without ``e:``; an unknown id is skipped) and write
        ``updated`` as :meth:`write_entities` does, in one transaction (``lore entity delete``:
        the entity and the redirects merged into it go, and the others' relations to them with
        them); returns how many were removed."""

    @abstractmethod
    async def get_entity(self, entity_id: str) -> Entity | None:
        """One entity by id (without ``e:``), a merged one too (``merged_into`` says where
        it went); ``None`` when no entity has this id."""

    @abstractmethod
    async def list_entities(
        self, project: str | None = None, *, include_global: bool = True, include_merged: bool = False
    ) -> list[Entity]:
        """The entities of ``project`` (plus global ones, project ``""``, when
        ``include_global``; ``None``: every project's), without merged ones unless
        ``include_merged``, in :func:`~lore_core.storage.entities.entity_order`."""


class EventLogStore(ABC):
    """Tier :attr:`Tier.EVENTS`: the event log of ``/v1/events`` (:mod:`lore_core.storage.events`,
    :mod:`lore_core.events`): numbered runs of events, each with its checkpoint and working
    snapshot."""

    tier: ClassVar[Tier] = Tier.EVENTS

    @abstractmethod
    async def append_events(self, project: str, run: str, events: Sequence[NewEvent], at: float) -> list[int]:
        """Append ``events`` to the run in one transaction, numbered from its ``last_seq``
        + 1 in order (a new run starts at 1), and return their seqs. Durable when it
        returns: the writer is told its seqs only after the commit."""

    @abstractmethod
    async def run_events(
        self,
        project: str,
        run: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
        limit: int | None = None,
        newest: bool = False,
    ) -> list[RunEvent]:
        """The run's events with ``after_seq < seq <= upto_seq``, in ascending seq; at most
        ``limit`` of them, the first ones (or with ``newest`` the last ones)."""

    @abstractmethod
    async def run_state(self, project: str, run: str) -> RunState | None:
        """The run's ``last_seq`` and ``covered_seq``; ``None`` for a run never written."""

    @abstractmethod
    async def advance_run(
        self, project: str, run: str, covered_seq: int, snapshot: WorkingSnapshot | None, at: float
    ) -> None:
        """Move the run's checkpoint to ``covered_seq`` (never backwards: a lower value
        changes nothing) and, with ``snapshot``, replace its durable working snapshot, in one
        transaction."""

    @abstractmethod
    async def working_snapshot(self, project: str, run: str) -> WorkingSnapshot | None:
        """The durable snapshot of the run's working facts, or ``None`` when none was taken."""

    @abstractmethod
    async def list_runs(self, project: str | None = None, limit: int = 100) -> list[RunState]:
        """The event log's runs (only ``project``'s when given), most recently updated first
        (then by project and run), at most ``limit``: ``/lore/api/runs`` and the
        dashboard's events page."""

    @abstractmethod
    async def runs_behind(self, limit: int = 1_000) -> list[RunState]:
        """Runs with events past their checkpoint (``last_seq > covered_seq``), oldest
        update first: what the consolidation pipeline resumes after a restart."""


#: Each optional tier's interface.
TIER_INTERFACES: Mapping[Tier, type[Any]] = {
    Tier.DISTILLATIONS: DistillationStore,
    Tier.VECTORS: VectorStore,
    Tier.KNOWLEDGE: KnowledgeStore,
    Tier.ENTITIES: EntityStore,
    Tier.EVENTS: EventLogStore,
}

_TierT = TypeVar("_TierT", DistillationStore, VectorStore, KnowledgeStore, EntityStore, EventLogStore)


class StoreTierError(TypeError):
    """A store declares a tier whose interface its class does not derive from."""


def check_tiers(store: Store) -> None:
    """Check once, when the kernel builds a store, that every tier it declares is one its class
    implements: raise :class:`StoreTierError` naming what is missing."""
    cls = type(store)
    missing = [t for t in sorted(cls.tiers, key=lambda t: t.value) if not issubclass(cls, TIER_INTERFACES[t])]
    if missing:
        wanted = ", ".join(f"{t.name} (derive from {TIER_INTERFACES[t].__name__})" for t in missing)
        raise StoreTierError(
            f"the {store.name} store ({cls.__qualname__}) declares tiers it does not implement: {wanted}"
        )


def has_tier(store: Store, tier: Tier) -> bool:
    """Whether ``store`` declares ``tier`` (and so implements it: :func:`check_tiers`)."""
    return tier in store.tiers


def tier_of(store: Store, interface: type[_TierT]) -> _TierT | None:
    """``store`` seen as one tier's interface when it declares that tier, else ``None``. The
    declaration is trusted: :func:`check_tiers` checked it when the store was built."""
    if interface.tier in store.tiers:
        return cast(_TierT, store)
    return None


class TierUnavailable(RuntimeError):
    """A use of a tier the store does not declare (:func:`require_tier`); the message says
    which store lacks what, for people."""

    def __init__(self, store: Store, tier: Tier) -> None:
        super().__init__(f"the {store.name} store has no {tier.label}")
        self.tier = tier


def require_tier(store: Store, interface: type[_TierT]) -> _TierT:
    """``store`` seen as one tier's interface; :class:`TierUnavailable` when it lacks the tier
    (a path that cannot work without it, such as ``lore knowledge add`` on such a store)."""
    found = tier_of(store, interface)
    if found is None:
        raise TierUnavailable(store, interface.tier)
    return found


class StoreFactory(Protocol):
    """What ``lore_register_stores`` registers: a named constructor of a store from the
    configuration (``lore_core.plugins.Factory``, or a store class with a ``name``)."""

    @property
    def name(self) -> str: ...

    def __call__(self, config: LoreConfig, /) -> Store: ...


# ---------------------------------------------------------------------------------------------
# Embeddings
# ---------------------------------------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into unit-length vectors. ``embed`` must not block the event loop.
    Implementations inherit from it; the members after ``health`` are optional."""

    name: str
    dimensions: int
    #: Names the vector space (the model and its version). Stored vectors are indexed under
    #: it (``None``: under ``name``), so a provider whose vectors change (another model,
    #: another size) must change it: the store then starts a new index and re-embeds,
    #: instead of comparing vectors of two spaces.
    model_id: str | None = None
    #: The cosine below which a text is unrelated to a query for this model: recall drops
    #: vector hits under it (``None``: none), so a query that matches nothing is not
    #: answered with whatever the store holds.
    min_similarity: float | None = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def health(self) -> dict[str, Any]: ...

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a search's query: the same vectors as ``embed``, but interactive, so a
        provider that queues background work (the indexer's) runs it first. Default:
        ``embed``."""
        return await self.embed(texts)

    def chunk(self, text: str) -> list[str]:
        """Split a long text into pieces that fit the model. The indexer embeds passages,
        which are sized to fit, and does not use it. Default: the text whole."""
        return [text]

    async def load(self) -> None:
        """Called at gateway start (in the background) and before indexing, so the first
        recall does not pay for loading a model. Default: nothing to load."""
        return None

    async def close(self) -> None:
        """Called at gateway stop: release threads and models. Default: nothing to release."""
        return None


class EmbedderUnavailable(RuntimeError):
    """An embedding provider cannot work (its model did not load, its host is unreachable).

    Providers raise a subclass of this from ``embed``; callers then degrade to full-text
    search only. ``reason`` is one line, safe to show on ``/health``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EmbedderFactory(Protocol):
    """What ``lore_register_embedders`` registers: a named constructor of an embedder from
    the configuration."""

    @property
    def name(self) -> str: ...

    def __call__(self, config: LoreConfig, /) -> Embedder: ...


# ---------------------------------------------------------------------------------------------
# Prompt composition
# ---------------------------------------------------------------------------------------------


@attrs.define
class CompositionContext:
    """Per-request facts a prompt layer may use.

    ``composition`` is the context manager's plan for this turn (a
    :class:`lore_core.context.compose.Composition`, ``None`` outside a gateway): which layer
    (0-4) was chosen and the parts of the prompt, top to bottom. The built-in layers each
    place one part; a third-party layer may read it too."""

    session_id: str
    project: str
    harness: str
    codec: Codec
    composition: Any = None
    #: The context manager's own record of the turn (what it must learn from the answer).
    record: Any = None
    #: The client's view, when the layers composed another one (what the store records).
    client_view: RequestView | None = None


class PromptLayer(Protocol):
    """One step of prompt composition, run in ascending ``priority`` order. Implementations
    inherit from it.

    The built-in layers (:mod:`lore_core.builtin.context_layers`) use priorities 100 (the
    harness's system prompt) to 600 (the conversation) and 900 (cache breakpoints); a plugin
    picks a priority between them to add its own part at that place in the prompt."""

    name: str
    priority: int
    #: A layer of the kernel's own: if it fails on a turn the context manager compressed,
    #: the request goes out as the client sent it (a plugin's failing layer is skipped).
    builtin: bool = False

    def compose(self, view: RequestView, ctx: CompositionContext) -> RequestView | Awaitable[RequestView]:
        """Return the view (possibly changed, with ``modified`` set); may be a coroutine.
        Must be fast: it runs on the request path of every API call."""


# ---------------------------------------------------------------------------------------------
# Curation
# ---------------------------------------------------------------------------------------------


@attrs.define
class CuratorContext:
    """What a curator factory gets: the configuration and the gateway's worker client
    (``None`` outside a gateway; an LLM-backed curator then falls back or declines)."""

    config: LoreConfig
    worker: Any = None


class Curator(Protocol):
    """Turns stored exchanges into derived memory, off the request path.

    ``kind`` says which job it does, and so which of the kinds below it is and which method
    it has: :class:`Observer`, :class:`Reflector` or :class:`KnowledgeCurator`
    (:data:`CURATOR_KINDS`). Implementations inherit from the kind's class (the kernel
    checks that, so a curator of a kind it does not run is refused, not ignored). Observers and
    reflectors must be deterministic in what they consume: the scheduler may run one again
    on the same input after a crash, and stores keep one row per input."""

    name: str
    kind: str


class Observer(Curator):
    """Writes observation logs: a segment of undistilled messages in, one log out."""

    kind: str = "observer"

    @abstractmethod
    async def observe(
        self,
        messages: Sequence[DistillInput],
        previous: str = "",
        *,
        session_id: str | None = None,
        tool_names: Mapping[str, str] | None = None,
    ) -> Distillation:
        """The log of ``messages``; ``previous`` is the session's last log (for continuity),
        ``tool_names`` a tool call id's tool where the messages do not say it."""


class Reflector(Curator):
    """Consolidates observation logs: logs in, one meta-distillation out."""

    kind: str = "reflector"

    @abstractmethod
    async def reflect(
        self,
        observations: Sequence[ObservationInput],
        previous_meta: str = "",
        *,
        session_id: str | None = None,
    ) -> Distillation:
        """One meta-distillation of ``observations``, continuing ``previous_meta``."""


class KnowledgeCurator(Curator):
    """Curates long-term knowledge: recent observation logs and the project's entries in,
    operations on entries (create, update, delete, reconfirm) and named entities out. The
    caller validates and applies them through the knowledge book."""

    kind: str = "knowledge"

    @abstractmethod
    async def curate(
        self,
        observations: Sequence[StoredDistillation],
        entries: Sequence[KnowledgeVersion],
        *,
        session_id: str | None = None,
        entities: Sequence[Entity] = (),
    ) -> Curation:
        """The operations ``observations`` call for on ``entries``."""


#: Each curator kind the kernel runs, and the class its curators are.
CURATOR_KINDS: dict[str, type[Curator]] = {
    "observer": Observer,
    "reflector": Reflector,
    "knowledge": KnowledgeCurator,
}


#: ``None``: the curator cannot work here (e.g. an LLM curator without a worker client);
#: the scheduler then goes without it.
class CuratorFactory(Protocol):
    """What ``lore_register_curators`` registers: a named constructor of a curator of one
    ``kind`` (``"observer"``, ``"reflector"``, ``"knowledge"``); ``None`` when it cannot
    work in that context."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def __call__(self, ctx: CuratorContext, /) -> Curator | None: ...


# ---------------------------------------------------------------------------------------------
# Commands and mounted applications
# ---------------------------------------------------------------------------------------------


class Command:
    """A ``lore <name>`` subcommand a plugin adds (``lore_register_commands``). The kernel
    adds a subparser named ``name`` with ``help``, lets ``configure`` add its arguments and,
    when it is chosen, returns ``run(args)`` as the exit status. ``run`` starts from nothing:
    it bootstraps (:func:`lore_core.plugins.bootstrap`) itself when it needs the
    configuration. Implementations inherit from it."""

    name: str = ""
    help: str = ""
    #: What ``lore <name> --help`` says under the usage line (default: ``help``).
    description: str = ""
    #: Command lines shown under "examples:" in ``--help`` (``"lore x --y  # why"``).
    examples: tuple[str, ...] = ()

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's arguments to its subparser (default: none)."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command; the exit status."""
        raise NotImplementedError


#: ASGI's three callables, as the kernel hands them to a :class:`Mount`.
ASGIScope = dict[str, Any]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]
ASGISend = Callable[[dict[str, Any]], Awaitable[None]]


@attrs.frozen
class ApiAnswer:
    """One answer of the gateway's own HTTP API: its status and its decoded JSON body
    (``None`` when the body is empty or not JSON)."""

    status: int
    body: Any


class LocalApi(Protocol):
    """The running gateway's own HTTP routes (``/lore/api/...``, ``/v1/events``, ...),
    called in-process, without a socket, with the gateway token: a mounted application that
    uses them gets exactly what a client of the API gets, under the same rules."""

    async def call(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None
    ) -> ApiAnswer:
        """``method path?params`` with ``body`` sent as JSON (when not ``None``)."""
        ...


#: The ASGI scope key under which an ``authenticates_itself`` mount finds its :class:`MountAuth`.
MOUNT_AUTH_SCOPE_KEY = "lore.mount_auth"


@attrs.frozen
class MountAuth:
    """What the kernel tells an ``authenticates_itself`` mount about one request.

    ``token_valid``: the request carried the gateway token in ``Authorization: Bearer``.
    ``key``: a secret derived from the current gateway token for this mount (an HMAC of the
    token keyed by the mount's name, never the token itself); it changes when the token is
    rotated, so what the mount signs or binds with it (a session) ends with the token."""

    token_valid: bool
    key: bytes = attrs.field(repr=False)


class Mount:
    """An ASGI application the gateway serves under ``path`` (``lore_register_mounts``):
    one segment such as ``"/mcp"``, matching that path and everything below it.

    The kernel dispatches those HTTP requests to ``__call__`` before its own routes, and
    only after the checks every ``/lore/api`` request passes (Host, Origin, peer, and the
    gateway token in ``Authorization: Bearer``): a mounted application never sees a request
    that failed them. WebSocket requests to the path are refused. ``start`` runs once the
    gateway has started serving (after ``lore_startup``), ``stop`` at shutdown (before
    ``lore_shutdown``); until ``start`` has returned, requests are answered 503 without
    calling the application. An exception out of ``__call__`` is logged and answered 500
    when no response was started. A request body larger than ``server.maxApiBodyBytes`` is
    answered 413 (declared) or cut off with ``http.disconnect`` and answered 413 (chunked).
    Implementations inherit from it.

    ``authenticates_itself`` (default ``False``): the mount checks its own credential (a
    browser's session cookie: the lore-dashboard plugin) instead of the gateway token. The
    kernel still applies the Host, Origin and peer checks (a remote peer, with
    ``server.allowRemote``, must still send the token in ``X-Lore-Token``) and then calls the
    mount whether or not ``Authorization: Bearer`` carried the token; it puts a
    :class:`MountAuth` in ``scope[MOUNT_AUTH_SCOPE_KEY]`` saying whether it did, with a key
    derived from the current token that the mount binds its credentials to. Such a mount
    must refuse, itself, every request it cannot authenticate."""

    name: str = ""
    path: str = ""
    authenticates_itself: bool = False

    async def start(self, api: LocalApi) -> None:
        """Get ready to serve; ``api`` reaches the gateway's own routes in-process."""

    async def stop(self) -> None:
        """Stop what ``start`` started."""

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        """Answer one HTTP request (``scope["type"] == "http"``) for ``path`` or below."""
        raise NotImplementedError
