"""Records of the temporal store: what a backend stores and hands back (projects, sessions,
messages, distillations, search hits, the items and vectors of the vector tier, a write
batch), and the rules every backend applies to them (merging an upsert, a project's path).

What makes two messages the same message is :mod:`~lore_core.storage.identity`; how an
exchange becomes these records, :mod:`~lore_core.storage.convert`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import attrs

#: Where a stored message came from: the client sent it, or it was assembled from the
#: upstream's answer.
ORIGIN_REQUEST = "request"
ORIGIN_RESPONSE = "response"


class StoreUnavailable(Exception):
    """The store cannot be used (locked, corrupt, unwritable); the message is one line that
    says what and where, fit for the gateway log and ``/health``."""


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


@attrs.define
class Project:
    """A project is identified by the directory (or name) the harness reported."""

    id: str
    name: str = ""
    created_at: float = 0.0
    last_seen_at: float = 0.0


@attrs.define
class Session:
    """One conversation of one client. Upserted on every exchange: ``created_at`` keeps the
    earliest value, ``updated_at``/``model``/``harness`` the latest, ``title`` the first."""

    id: str
    project: str = ""
    harness: str = ""
    model: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    title: str = ""
    # Filled in by the store when read.
    message_count: int = 0
    branch_count: int = 0


@attrs.define
class ProjectSummary:
    """A project as ``/lore/api/projects`` and the dashboard show it (:meth:`Store.project_summaries`):
    its sessions and their messages, its current, alive knowledge entries scoped to it, what
    its sessions spent (the sum of their spend state) and its last activity (its latest
    session's ``updated_at``, else the project's ``last_seen_at``)."""

    project: str
    sessions: int = 0
    messages: int = 0
    knowledge: int = 0
    spend_usd: float = 0.0
    last_activity: float = 0.0


@attrs.define
class StoredMessage:
    """One message, stored once. ``blocks`` keep the structure (block types, tool names and
    ids, tool input); ``text`` is the searchable rendering, with obvious secrets masked."""

    id: str
    session_id: str
    parent_id: str | None
    position: int
    role: str
    blocks: list[dict[str, Any]] = attrs.field(factory=list)
    text: str = ""
    model: str | None = None
    usage: dict[str, int] | None = None
    harness: str = ""
    project: str = ""
    api: str = ""
    created_at: float = 0.0
    # False for a partial assistant message (client disconnect, stream cut, error event).
    complete: bool = True
    # "request" (the client sent it) or "response" (assembled from the upstream's answer).
    origin: str = ORIGIN_REQUEST
    stop_reason: str | None = None
    error: str | None = None
    #: On an answer: the context layer (0-4) its request was sent at. ``None``: not known
    #: (not composed by the gateway, a request message, or stored before the stores kept it).
    context_layer: int | None = None

    @property
    def tool_names(self) -> list[str]:
        return [b["tool_name"] for b in self.blocks if b.get("tool_name")]


@attrs.define
class SearchHit:
    id: str
    session_id: str
    project: str
    role: str
    score: float
    text: str
    position: int = 0
    created_at: float = 0.0
    #: Which passage of the item matched (:mod:`lore_core.storage.passages`): ``text`` is then that
    #: passage, ``start``/``end`` its characters in the item's text and ``tool`` the tool
    #: it came from. ``None`` from a store that searches whole items.
    passage: int | None = None
    start: int | None = None
    end: int | None = None
    tool: str | None = None
    #: The command, path or pattern of the tool call the passage belongs to.
    source: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "session": self.session_id,
            "project": self.project,
            "role": self.role,
            "score": round(float(self.score), 6),
            "text": self.text,
            "position": self.position,
            "created_at": self.created_at,
        }
        if self.passage is not None:
            out["passage"] = self.passage
            out["span"] = [self.start, self.end]
        if self.tool:
            out["tool"] = self.tool
        if self.source:
            out["source"] = self.source
        return out


@attrs.frozen
class PassageRef:
    """A passage a vector search found, before its text is read
    (:meth:`lore_core.interfaces.VectorStore.nearest_passages`): its item's id as stored (a
    distillation's without the ``d:`` prefix: :meth:`~lore_core.interfaces.VectorStore.read_passages`
    tells the kinds apart), the passage's index and the cosine similarity."""

    item: str
    passage: int
    score: float


#: Search hits and ids of distillations carry this prefix (``lore show d:<id>``), so they never
#: collide with message ids and a reader can tell the two apart.
DISTILLATION_PREFIX = "d:"
#: The ``role`` of a search hit that is a distillation.
DISTILLATION_ROLE = "distillation"


@attrs.define
class StoredDistillation:
    """One observation log (generation 0) or meta-distillation (generation 1), append-only.

    ``source_ids`` are the message ids (gen-0) or distillation ids (gen-1) it was made from:
    "undistilled" is derived from them, so a crash between the worker call and the write
    re-does the segment and a repeated write of the same segment is skipped (the id is a
    hash of session, generation and sources). Archived rows were consolidated into a newer
    generation; they stay stored and searchable.
    """

    id: str
    session_id: str
    generation: int
    text: str
    source_ids: list[str] = attrs.field(factory=list)
    project: str = ""
    created_at: float = 0.0
    # Time range of the source messages (epoch seconds).
    start: float = 0.0
    end: float = 0.0
    # "llm" or "extractive".
    method: str = "llm"
    # Estimated tokens of the source as sent, of the input the worker read, of the output.
    source_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    compression_ratio: float = 0.0
    worker_provider: str | None = None
    worker_model: str | None = None
    archived: bool = False

    @property
    def ref(self) -> str:
        """The id as shown to users and search: ``d:<id>``."""
        return DISTILLATION_PREFIX + self.id

    def as_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["ref"] = self.ref
        return out


def distillation_id(session_id: str, generation: int, source_ids: Sequence[str]) -> str:
    """Deterministic: the same sources distilled twice (a retry after a crash) get the same
    id, so the second write is a no-op rather than a duplicate."""
    data = "\x00".join(["d1", session_id, str(generation), *source_ids])
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:24]


# ---------------------------------------------------------------------------------------------
# Vectors
# ---------------------------------------------------------------------------------------------

#: Kinds of items a store embeds (``EmbeddingItem.kind``). Knowledge and entities add theirs
#: here when their tiers arrive; a store then only has to list them in ``pending_embeddings``.
VECTOR_MESSAGE = "message"
VECTOR_DISTILLATION = "distillation"
VECTOR_KINDS = (VECTOR_MESSAGE, VECTOR_DISTILLATION)


@attrs.define
class EmbeddingItem:
    """A stored item that has no vectors yet for some embedding model.

    ``cursor`` is the store's own order (DuckDB: the row's ``seq``): ``pending_embeddings``
    returns items in ascending cursor order, and a store may treat "embedded" as "cursor at
    or below the highest one written", so callers write vectors for a *prefix* of what it
    returned, in order. A message comes with its ``role`` and stored ``blocks``, which its
    passages are cut from (:func:`lore_core.storage.passages.message_passages`); a distillation with
    its ``text``."""

    kind: str
    id: str
    text: str
    session_id: str = ""
    project: str = ""
    created_at: float = 0.0
    cursor: int = 0
    role: str = ""
    blocks: list[dict[str, Any]] = attrs.field(factory=list)


@attrs.define
class ItemVectors:
    """The vectors of one item: one or more per embedded passage (the passage's own and its
    facets'), ``passages[i]`` the index of the passage ``vectors[i]`` belongs to (empty:
    ``0, 1, 2, ...``); none for an item without text (it is still marked embedded)."""

    item: EmbeddingItem
    vectors: list[Sequence[float]] = attrs.field(factory=list)
    passages: list[int] = attrs.field(factory=list)

    def passage_indexes(self) -> list[int]:
        return list(self.passages) if self.passages else list(range(len(self.vectors)))


class VectorDimensionError(ValueError):
    """Vectors of another size than the model's index holds: an index never mixes sizes."""


@attrs.frozen
class SchemaMigration:
    """What a store's :meth:`~lore_core.interfaces.Store.open` found and left: its schema
    version before (0: a new store) and after. ``lore store migrate`` reports it."""

    before: int
    after: int

    @property
    def applied(self) -> list[int]:
        """The versions this open applied, in order."""
        return list(range(self.before + 1, self.after + 1))


@attrs.frozen
class StoreInventory:
    """The keys of what a store holds that no other read lists (``lore store copy`` walks
    them): every session id with state (``""``, the gateway's own, and pseudo-sessions
    included), every run of the event log, every project with a team binding, every team
    with a team-wide policy."""

    state_sessions: tuple[str, ...] = ()
    runs: tuple[tuple[str, str], ...] = ()
    bound_projects: tuple[str, ...] = ()
    policy_teams: tuple[str, ...] = ()


@attrs.define
class WriteBatch:
    """What the writer hands a store in one call; the store applies it in one transaction.

    Applying a batch is idempotent: a message id already stored is skipped (the first
    version stored wins), sessions and projects are upserted.
    """

    projects: list[Project] = attrs.field(factory=list)
    sessions: list[Session] = attrs.field(factory=list)
    messages: list[StoredMessage] = attrs.field(factory=list)

    def __bool__(self) -> bool:
        return bool(self.projects or self.sessions or self.messages)

    def extend(self, other: WriteBatch) -> None:
        self.projects.extend(other.projects)
        self.sessions.extend(other.sessions)
        self.messages.extend(other.messages)

    def merged(self) -> WriteBatch:
        """One record per id: sessions and projects merged, and for a message seen twice the
        response-assembled version wins (it carries usage, model and stop reason)."""
        projects: dict[str, Project] = {}
        for p in self.projects:
            old = projects.get(p.id)
            projects[p.id] = p if old is None else merge_project(old, p)
        sessions: dict[str, Session] = {}
        for s in self.sessions:
            old_s = sessions.get(s.id)
            sessions[s.id] = s if old_s is None else merge_session(old_s, s)
        messages: dict[str, StoredMessage] = {}
        for m in self.messages:
            old_m = messages.get(m.id)
            if old_m is None or (m.origin == ORIGIN_RESPONSE and old_m.origin != ORIGIN_RESPONSE):
                messages[m.id] = m
        return WriteBatch(list(projects.values()), list(sessions.values()), list(messages.values()))


def normal_project(path: str) -> str | None:
    """``path`` as projects are stored: an absolute directory with no ``.`` or ``..``
    segments and no doubled or trailing slashes (:func:`os.path.normpath`); ``None`` when
    it is not an absolute path or holds a NUL. Lexical: symlinks are not resolved, so a
    project keeps the name its harness gives it (``realpath`` would file memory already
    stored under a symlinked path under a second name), and ``..`` climbs the path as
    written. What may be written into the directory is checked where it is written
    (:func:`lore_core.knowledge.lorefile.unsafe_to_write`)."""
    if not path or "\x00" in path or not os.path.isabs(path):
        return None
    normal = os.path.normpath(path)
    # POSIX lets normpath keep a leading "//" (an implementation-defined root): one "/".
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def merge_project(old: Project, new: Project) -> Project:
    return Project(
        id=old.id,
        name=old.name or new.name,
        created_at=min(old.created_at, new.created_at) if old.created_at else new.created_at,
        last_seen_at=max(old.last_seen_at, new.last_seen_at),
    )


def merge_session(old: Session, new: Session) -> Session:
    """The upsert rule every backend applies (``old`` is what is stored)."""
    newer = new.updated_at >= old.updated_at
    return Session(
        id=old.id,
        project=old.project or new.project,
        harness=(new.harness if newer and new.harness else old.harness) or new.harness,
        model=(new.model if newer and new.model else old.model) or new.model,
        created_at=min(old.created_at, new.created_at) if old.created_at else new.created_at,
        updated_at=max(old.updated_at, new.updated_at),
        title=old.title or new.title,
    )
