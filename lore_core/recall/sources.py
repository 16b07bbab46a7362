"""What the recall engine needs from the places it searches, as small protocols.

The engine does not know stores, tiers or tables: each tier that can be searched registers
sources for its result kind (:class:`~lore_core.recall.ids.Kind`):

* a :class:`TextSource` answers full-text (BM25) searches, best first; it may offer
  ``doc_freq(term)`` so the relaxed cascade can drop the commonest terms first;
* a :class:`VectorSource` answers nearest-neighbour searches for a query embedding;
* an :class:`Opener` returns one item in full for ``recall(id=...)``.

Sources return :class:`SourceHit` keys *without* the id prefix; the engine adds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from lore_core.config import ConfigError, LoreConfig
from lore_core.interfaces import DistillationStore, Embedder, EmbedderFactory, Store, VectorStore, tier_of
from lore_core.recall.ids import Kind, Scope
from lore_core.storage.passages import (
    VECTOR_RULES,
    Passage,
    cut_text,
    message_passages,
    passage_key,
    split_key,
)
from lore_core.storage.records import PassageRef, SearchHit

#: Meta keys of a passage hit (:mod:`lore_core.storage.passages`): the item it belongs to (its key
#: without the passage index), the passage's index, its ``(start, end)`` characters in the
#: item's text and the tool it came from.
ITEM = "item"
PASSAGE = "passage"
SPAN = "span"
TOOL = "tool"
SOURCE = "tool_source"
#: Meta keys of an opened region: the passages shown (first, last, of how many) and the keys
#: of the regions before and after it (``None`` at either end).
REGION = "region"
PREVIOUS = "previous"
NEXT = "next"

#: Sessions whose titles a query's session reference is matched against (the most recent).
MAX_SESSION_TITLES = 5000
SESSION_TITLES_TTL = 30.0

#: Characters of passages an opened item shows at once (the model pages with the ids in
#: ``previous``/``next``).
OPEN_REGION_CHARS = 8000


@attrs.define
class SourceHit:
    key: str
    score: float
    text: str
    # Shown with the result when present: session, project, role, created_at, title, ...
    meta: dict[str, Any] = attrs.field(factory=dict)
    # For a source whose one index holds several kinds (the store's BM25 corpus holds
    # messages and distillations): the kind of this hit. ``None``: the kind the source
    # was registered for.
    kind: Kind | None = None


@attrs.frozen
class SearchFilter:
    """Where a source must look. ``None`` means "do not filter on this"."""

    scope: Scope
    session: str | None = None
    project: str | None = None
    #: The asking session's project, also when ``project`` is ``None`` (a source may weigh
    #: other projects' items below its own).
    home: str | None = None
    #: What sources read for this one search, by a name of their choosing, so a kind's text
    #: and vector lists, the cascade's relaxed rounds and the rephrasings share one read. The
    #: engine makes a filter per search, so nothing read here outlives the search.
    reads: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)


class TextSource(Protocol):
    name: str

    async def search(self, query: str, where: SearchFilter, limit: int) -> Sequence[SourceHit]:
        """BM25 search, best first; ``query`` is space-separated terms."""


@runtime_checkable
class DocFreqSource(Protocol):
    """Optional capability of a :class:`TextSource`: in how many documents a term occurs
    (``None`` when unknown). Must be cheap; it is called once per query term."""

    def doc_freq(self, term: str) -> int | None: ...


class VectorSource(Protocol):
    name: str

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> Sequence[SourceHit]:
        """Nearest items to a unit-length query vector, best first."""


@runtime_checkable
class PassageVectorSource(Protocol):
    """Optional capability of a :class:`VectorSource`: its search in two steps, the nearest
    passages found first (their similarity and where they are) and their texts read after,
    for those that can still reach the answer. Reading a passage means reading and cutting
    its whole item, and most of a vector list never reaches the answer (the engine reads
    what the full-text hits do not already outrank: ``RecallEngine._rank``)."""

    name: str

    async def nearest(self, vector: Sequence[float], where: SearchFilter, limit: int) -> Sequence[PassageRef]:
        """What :meth:`VectorSource.search_vector` finds, not read yet."""

    async def read(self, refs: Sequence[PassageRef]) -> Sequence[SourceHit]:
        """The hits of these passages, as ``search_vector`` gives them (a passage whose item
        is gone is left out)."""


@attrs.frozen
class AliasExpansion:
    """One entity a query names: its ``e:`` id, the name matched (normalised) and the
    entity's other names (what the full-text lists also search for)."""

    entity: str
    matched: str
    names: list[str]

    def as_json(self) -> dict[str, Any]:
        return {"entity": self.entity, "matched": self.matched, "names": list(self.names)}


class AliasSource(Protocol):
    """Where recall finds the entities a query names (:class:`lore_core.recall.entities.EntityIndex`)."""

    async def expand(self, query: str, project: str | None) -> Sequence[AliasExpansion]:
        """The expansions of ``query`` for ``project``'s entities; must be cheap (it runs
        before every search) and ``[]`` when the query names none."""


class SessionDirectory(Protocol):
    """Where recall looks up a session a query names by its title (its first prompt)."""

    async def titles(self, project: str | None) -> Sequence[tuple[str, str]]:
        """``(session id, title)`` of the project's sessions (every project's with ``None``)."""


class StoreSessionDirectory:
    """The store's sessions as a :class:`SessionDirectory`; titles are read at most every
    :data:`SESSION_TITLES_TTL` seconds per project (a title never changes once set)."""

    def __init__(self, store: Any, max_sessions: int = MAX_SESSION_TITLES) -> None:
        self.store = store
        self.max_sessions = max_sessions
        self._cache: dict[str | None, tuple[float, list[tuple[str, str]]]] = {}

    async def titles(self, project: str | None) -> list[tuple[str, str]]:
        now = time.monotonic()
        cached = self._cache.get(project)
        if cached is not None and now - cached[0] < SESSION_TITLES_TTL:
            return cached[1]
        sessions = await self.store.list_sessions(project=project, limit=self.max_sessions)
        found = [(s.id, s.title) for s in sessions if s.title]
        self._cache[project] = (now, found)
        return found

    def forget(self, session_id: str) -> None:
        """Drop a forgotten session's title from every cached list (``lore forget``)."""
        for project, (at, found) in list(self._cache.items()):
            self._cache[project] = (at, [(sid, title) for sid, title in found if sid != session_id])


class Opener(Protocol):
    async def open(self, key: str) -> SourceHit | None:
        """The item in full, or ``None`` when no item has this key."""


class MessageStore(Protocol):
    """The parts of :class:`lore_core.interfaces.Store` the adapters use."""

    async def search(
        self, query: str, session_id: str | None = None, project: str | None = None, limit: int = 10
    ) -> Sequence[Any]: ...

    async def get_messages(self, ids: Sequence[str]) -> Sequence[Any]: ...


_DISTILLATION_PREFIX = f"{Kind.DISTILLATION.value}:"
_DISTILLATION_ROLE = "distillation"


def _hit_meta(h: Any) -> dict[str, Any]:
    return {
        "session": h.session_id,
        "project": h.project,
        "role": h.role,
        "position": h.position,
        "created_at": h.created_at,
    }


def _source_hit(h: SearchHit) -> SourceHit:
    """A store hit (BM25 or vector) as a source hit: the store's one corpus holds messages
    and distillations, whose ids are ``d:<id>`` with role ``distillation``. A passage hit's
    key is ``<item>:<passage>``, so both legs name the same unit."""
    key, kind = h.id, Kind.MESSAGE
    if key.startswith(_DISTILLATION_PREFIX) or h.role == _DISTILLATION_ROLE:
        key, kind = key.removeprefix(_DISTILLATION_PREFIX), Kind.DISTILLATION
    meta = _hit_meta(h)
    passage = h.passage  # None from a store that searches whole items
    if passage is not None:
        meta |= {ITEM: key, PASSAGE: passage, SPAN: (h.start, h.end), TOOL: h.tool, SOURCE: h.source}
        key = passage_key(key, passage)
    return SourceHit(key=key, score=float(h.score), text=h.text, meta=meta, kind=kind)


def region(passages: Sequence[Passage], index: int, budget: int = OPEN_REGION_CHARS) -> tuple[int, int]:
    """Which passages (``first``, ``last``, inclusive) an opened item shows for passage
    ``index``: one before it for context, then on until ``budget`` characters."""
    if not passages:
        return 0, -1
    index = max(0, min(index, len(passages) - 1))
    first = max(0, index - 1) if index else 0
    last, size = first, len(passages[first].text)
    while last + 1 < len(passages) and size + len(passages[last + 1].text) <= budget:
        last += 1
        size += len(passages[last].text)
    # Never stop before the passage asked for (a huge one shows alone).
    last = max(last, index)
    return first, last


def opened(item_key: str, passages: Sequence[Passage], index: int | None, meta: dict[str, Any]) -> str | None:
    """The text of the region of an item opened at ``index`` (its start when ``None``),
    and its paging keys in ``meta``."""
    if not passages:
        return None
    first, last = region(passages, index or 0)
    meta[REGION] = (first, last, len(passages))
    meta[PREVIOUS] = passage_key(item_key, max(0, first - 1)) if first > 0 else None
    meta[NEXT] = passage_key(item_key, last + 1) if last + 1 < len(passages) else None
    return "\n".join(p.text for p in passages[first : last + 1])


class StoreMessageSource:
    """The store's BM25 search as a text source, and its messages as the ``t:`` opener.

    The store indexes messages and distillations in one corpus; its distillation hits carry
    ids ``d:<id>`` and role ``distillation``, so they become ``d:`` results here (register
    this source under :attr:`Kind.MESSAGE`: both kinds share the same scopes)."""

    def __init__(self, store: MessageStore, name: str = "store") -> None:
        self.store = store
        self.name = name

    async def search(self, query: str, where: SearchFilter, limit: int) -> list[SourceHit]:
        hits = await self.store.search(query, session_id=where.session, project=where.project, limit=limit)
        return [_source_hit(h) for h in hits]

    async def open(self, key: str) -> SourceHit | None:
        item, index = split_key(key)
        found = await self.store.get_messages([item])
        if not found:
            return None
        m = found[0]
        meta = _hit_meta(m)
        text = opened(m.id, message_passages(m.role, m.blocks, m.text), index, meta)
        if text is None:
            text = m.text  # nothing searchable in it (an image, say): the stored text
        return SourceHit(key=m.id, score=0.0, text=text, meta=meta, kind=Kind.MESSAGE)


def embedder_model(embedder: Embedder) -> str:
    """The embedder's vector space: the provider's model (``model_id``) when it says, else
    its provider name. A different model is a different vector space."""
    return str(embedder.model_id or embedder.name)


#: Between the model and the passage rules in a vector index's name.
PASSAGE_SEPARATOR = "@"


def vector_index_name(embedder: Embedder) -> str:
    """The name a vector index is keyed by: the model and the vector rules (passages and
    their facets), so vectors of another model, or of passages cut by other rules, are
    never compared with these."""
    return f"{embedder_model(embedder)}{PASSAGE_SEPARATOR}{VECTOR_RULES}"


def same_passages(index: str, other: str) -> bool:
    """Whether two vector indexes (:func:`vector_index_name`) are of one model and number
    the same passages: only their facet rules differ, so either one's hits are passages of
    today's rules."""
    model, _, rules = index.partition(PASSAGE_SEPARATOR)
    other_model, _, other_rules = other.partition(PASSAGE_SEPARATOR)
    return model == other_model and rules.split(".")[0] == other_rules.split(".")[0]


class StoreVectorSource:
    """The store's vector index (``model``: :func:`vector_index_name`), as a vector source.

    Like :class:`StoreMessageSource`, one source for both kinds the store embeds (messages
    and distillations, archived ones too): register it under :attr:`Kind.MESSAGE`; its
    distillation hits become ``d:`` results. Hits are passages, keyed like the full-text
    source's. A store without vectors answers nothing. Hits less similar than
    ``min_similarity`` (the embedder's, see :class:`lore_core.interfaces.Embedder`) are
    dropped. ``serving``, when given, names the index to search at each query instead of
    ``model`` (the indexer's :meth:`~lore_core.recall.indexer.VectorIndexer.serving_index`:
    the index a new one replaces, while that one backfills)."""

    def __init__(
        self,
        store: Store,
        model: str,
        name: str = "store",
        min_similarity: float | None = None,
        serving: Callable[[], str] | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.name = name
        self.min_similarity = min_similarity
        self.serving = serving
        #: ``None``: a store without the vector tier (every search answers nothing).
        self.vectors = tier_of(store, VectorStore)

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> list[SourceHit]:
        return await self.read(await self.nearest(vector, where, limit))

    async def nearest(self, vector: Sequence[float], where: SearchFilter, limit: int) -> list[PassageRef]:
        if self.vectors is None:
            return []
        index = self.serving() if self.serving is not None else self.model
        found = await self.vectors.nearest_passages(
            index, list(vector), session_id=where.session, project=where.project, limit=limit
        )
        if self.min_similarity is not None:
            found = [ref for ref in found if ref.score >= self.min_similarity]
        return found

    async def read(self, refs: Sequence[PassageRef]) -> list[SourceHit]:
        if not refs or self.vectors is None:
            return []
        return [_source_hit(h) for h in await self.vectors.read_passages(refs)]


class StoreDistillationOpener:
    """``d:`` ids opened through the store's ``get_distillation`` (a store without
    distillations answers "not found")."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def open(self, key: str) -> SourceHit | None:
        item, index = split_key(key)
        distillations = tier_of(self.store, DistillationStore)
        d = await distillations.get_distillation(item) if distillations is not None else None
        if d is None:
            return None
        meta = {
            "session": d.session_id,
            "project": d.project,
            "generation": d.generation,
            "created_at": d.created_at,
            "archived": d.archived,
        }
        text = opened(d.id, cut_text(d.text), index, meta)
        return SourceHit(
            key=d.id, score=0.0, text=text if text is not None else d.text, meta=meta, kind=Kind.DISTILLATION
        )


def choose_embedder(config: LoreConfig, embedders: Mapping[str, EmbedderFactory]) -> Embedder | None:
    """The configured embedding provider, else the on-device one when installed. A hosted
    provider is only ever used when named in ``embedding.provider``, never as a fallback."""
    name = config.embedding.provider
    if name:
        if name not in embedders:
            installed = ", ".join(sorted(embedders)) or "none"
            raise ConfigError(f"embedding.provider: {name!r} is not installed (installed: {installed})")
        return embedders[name](config)
    if "local" in embedders:
        return embedders["local"](config)
    return None
