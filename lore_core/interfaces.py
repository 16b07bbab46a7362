"""The interfaces plugins implement. The kernel owns them; plugins own the behaviour.

Objects implementing these are handed to the kernel through the registration hooks in
:mod:`lore_core.hookspecs`. They are plain classes (``typing.Protocol`` is used for
documentation and type checking, not for runtime checks).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from lore_core.config import LoreConfig
    from lore_core.model import AssistantMessage, RequestView
    from lore_core.storage.records import (
        EmbeddingItem,
        ItemVectors,
        Project,
        SearchHit,
        Session,
        StoredDistillation,
        StoredMessage,
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


class Codec(Protocol):
    """One provider wire API (e.g. ``"anthropic-messages"``)."""

    #: Unique API name.
    api: str
    #: Which family of upstream serves it: ``"anthropic"`` or ``"openai"``.
    provider: str
    #: Path suffixes this codec owns, e.g. ``("/v1/messages",)``; a prefix before them (a
    #: base URL such as ``/anthropic``) is allowed.
    paths: Sequence[str]

    def parse(self, raw: dict[str, Any], body: bytes) -> RequestView:
        """Parse a request body into a view. Must accept unknown fields and item types."""

    def render(self, view: RequestView) -> dict[str, Any]:
        """Render a view back into wire JSON, keeping every field of ``view.raw`` that the
        pipeline did not change."""

    def parse_response(self, raw: dict[str, Any]) -> AssistantMessage:
        """Parse a non-streamed JSON response body."""

    def assembler(self) -> StreamAssembler:
        """A fresh assembler for one streamed response."""

    def render_response(self, text: str, model: str | None, stream: bool) -> tuple[bytes, str]:
        """A complete text answer the gateway makes itself (e.g. a compaction summary), as
        the API's JSON body or its SSE event sequence; returns (body, content type)."""

    def error_body(self, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
        """An error body in this API's own shape."""


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


class Harness(Protocol):
    """Knowledge of one coding client."""

    #: Name used by ``lore run <name>`` and stored with every session.
    name: str

    def recognise(self, ctx: RequestContext) -> int:
        """How surely this request came from this client: 0 = not at all, higher = surer."""

    def session_id(self, ctx: RequestContext) -> str | None:
        """The client's session id, or ``None`` to fall back to a content fingerprint."""

    def project(self, ctx: RequestContext) -> str | None:
        """The project (an absolute directory) the request works on, or ``None``."""

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        """How ``lore run <name> args...`` starts the client pointed at ``gateway_url``."""

    # Optional: ``compaction_request(ctx) -> bool`` says the request is the client's own
    # "summarise the conversation" call; the gateway then answers it from the session's
    # distillations without an upstream call, so the client's summary is Lore's memory.


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


class Store(Protocol):
    """A storage backend: the temporal store (tier 1) that every later tier derives from.

    The full contract is written down as tests by the conformance suite in
    :mod:`lore_core.testing.conformance.store`; a backend proves itself by passing it. Records
    are the attrs classes of :mod:`lore_core.storage.records`; message ids are computed by the kernel
    (:func:`lore_core.storage.records.message_id`), never by a backend, so every backend agrees.

    Methods are coroutines and must not block the event loop (run blocking I/O in a thread).
    Only one gateway writes at a time; all writes arrive through :meth:`write` from the
    kernel's writer queue (:mod:`lore_core.storage.writer`), except :meth:`set_state`.

    Later tiers (distillations, knowledge versions, entities, the event log) add their own
    methods here together with a schema migration; a backend that does not implement them
    yet raises ``NotImplementedError``, which callers treat as "not available".
    """

    #: Registered backend name (``"duckdb"``, ``"memory"``, ...).
    name: str
    #: Where the kernel keeps this store's write-ahead journal (:mod:`lore_core.storage.journal`):
    #: records acknowledged to clients and not yet committed, replayed at the next start.
    #: Beside the store's own files; ``None`` for a store that keeps nothing across a
    #: restart (then there is nothing to protect).
    journal_dir: Path | None

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Open (creating and migrating the schema when needed). Raise
        :class:`~lore_core.storage.records.StoreUnavailable` with a one-line reason on failure."""

    async def close(self) -> None:
        """Make everything written durable and release files and locks."""

    def health(self) -> dict[str, Any]:
        """``{"ok": bool, "detail": str, ...}`` for ``/health`` and ``lore status``."""

    # -- writes ----------------------------------------------------------------------------

    async def write(self, batch: WriteBatch) -> int:
        """Apply a batch atomically and durably; return how many new messages were stored.

        Idempotent: a message whose id is stored is skipped, sessions and projects are
        upserted with :func:`lore_core.storage.records.merge_session`. Raise on failure (the writer
        keeps the batch and retries); a partial batch must never become visible."""

    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        """Persist one per-session value (JSON-serialisable), e.g. ``forceMinLayer``."""

    # -- reads -----------------------------------------------------------------------------

    async def get_state(self, session_id: str, key: str, default: Any = None) -> Any: ...

    async def session_state(self, session_id: str) -> dict[str, Any]:
        """Every state value of a session."""

    async def get_session(self, session_id: str) -> Session | None:
        """The session with ``message_count`` and ``branch_count`` filled in."""

    async def list_sessions(self, project: str | None = None, limit: int = 50) -> list[Session]:
        """Most recently updated first, optionally only one project's."""

    async def list_projects(self) -> list[Project]: ...

    async def session_messages(self, session_id: str) -> list[StoredMessage]:
        """Every message of a session, every branch, ordered by position then creation."""

    async def get_messages(self, ids: Sequence[str]) -> list[StoredMessage]:
        """The messages with these ids that exist (in the order given)."""

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

    async def sync_search_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Bring the full-text index fully up to date now and return the items it indexed;
        ``progress(done, total)`` as it goes. After the passage rules changed
        (:data:`lore_core.storage.passages.PASSAGE_RULES`) this is the rebuild (``lore reindex``)."""

    # -- distillations (tier 2) ------------------------------------------------------------

    async def write_distillation(self, distillation: StoredDistillation, archive: Sequence[str] = ()) -> bool:
        """Store one distillation and archive the distillations ``archive`` names, in one
        transaction (a meta-distillation and the archiving of what it consolidated happen
        together or not at all). Idempotent: an id already stored is skipped (``False``).
        Searchable at once, as ``d:<id>`` hits with role ``distillation``."""

    async def list_distillations(
        self, session_id: str | None = None, include_archived: bool = True
    ) -> list[StoredDistillation]:
        """A session's distillations (every session's with ``None``), oldest first."""

    async def get_distillation(self, distillation_id: str) -> StoredDistillation | None:
        """One distillation by id (with or without the ``d:`` prefix)."""

    async def archive_distillations(self, ids: Sequence[str]) -> int:
        """Mark distillations archived (never deleted); return how many changed."""

    async def distilled_message_ids(self, session_id: str) -> set[str]:
        """Every message id of the session that some generation-0 distillation covers."""

    # -- vectors (hybrid recall) -----------------------------------------------------------
    #
    # One index per embedding model (``model`` is the embedder's model name): a model change
    # starts a new index that is backfilled from the store, and vectors of two models (or
    # two sizes) are never compared. Messages and distillations (archived ones too) are
    # embedded; knowledge and entities join as their tiers arrive. A backend without vectors
    # raises ``NotImplementedError`` from these; recall then uses full-text search only.

    async def pending_embeddings(self, model: str, limit: int = 256) -> list[EmbeddingItem]:
        """Items with no vectors yet for ``model``, in ascending ``cursor`` order (oldest
        first). Resumable by construction: what is pending is derived from what is stored."""

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
        first, one hit per embedded passage, filtered by kind, session and project. Hits
        look like :meth:`search` hits (``passage`` the index the vector was written under,
        ``text`` that passage's text): distillations as ``d:<id>`` with role
        ``distillation``. An unknown model gives ``[]``."""

    async def vector_stats(self, model: str | None = None) -> dict[str, Any]:
        """``{model: {"dimensions", "vectors", "pending", ...}}`` for every indexed model (or
        only ``model``; a model never indexed reports 0 vectors and everything pending)."""

    async def reset_vectors(self, model: str) -> None:
        """Drop ``model``'s vectors: everything becomes pending again (``lore reindex --full``)."""

    async def stats(self) -> dict[str, Any]:
        """Counts (``projects``, ``sessions``, ``messages``), ``path``, ``size_bytes``,
        ``schema_version`` and backend-specific figures, for ``lore status``."""


StoreFactory = Callable[["LoreConfig"], Store]


# ---------------------------------------------------------------------------------------------
# Embeddings
# ---------------------------------------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into unit-length vectors. ``embed`` must not block the event loop.

    Optional: ``model_id`` names the vector space (the model and its version). Stored
    vectors are indexed under it (else under ``name``), so a provider whose vectors change
    (another model, another size) must change it: the store then starts a new index and
    re-embeds, instead of comparing vectors of two spaces. ``chunk(text) -> list[str]``
    may split a long text into pieces that fit the model (the indexer embeds passages,
    which are sized to fit, and does not use it). ``load()`` and ``close()`` are called at
    gateway start and stop.
    ``min_similarity`` (a float) is the cosine below which a text is unrelated to a query
    for this model: recall drops vector hits under it (without it, none), so a query that
    matches nothing is not answered with whatever the store holds."""

    name: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def health(self) -> dict[str, Any]: ...


class EmbedderUnavailable(RuntimeError):
    """An embedding provider cannot work (its model did not load, its host is unreachable).

    Providers raise a subclass of this from ``embed``; callers then degrade to full-text
    search only. ``reason`` is one line, safe to show on ``/health``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


EmbedderFactory = Callable[["LoreConfig"], Embedder]


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


class PromptLayer(Protocol):
    """One step of prompt composition, run in ascending ``priority`` order.

    The built-in layers (:mod:`lore_core.builtin.context_layers`) use priorities 100 (the
    harness's system prompt) to 600 (the conversation) and 900 (cache breakpoints); a plugin
    picks a priority between them to add its own part at that place in the prompt."""

    name: str
    priority: int

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

    ``kind`` says which job it does and so which method it has: an ``"observer"`` has
    ``async observe(messages, previous, *, session_id, tool_names) -> Distillation`` (a
    segment of undistilled messages in, one observation log out); a ``"reflector"`` has
    ``async reflect(...)`` (observation logs in, one meta-distillation out). Both must be
    deterministic in what they consume: the scheduler may run one again on the same input
    after a crash, and stores keep one row per input."""

    name: str
    kind: str


CuratorFactory = Callable[[CuratorContext], Curator]
