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

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from lore_core.recall.ids import Kind, Scope

#: Meta key of a hit found by vector search in a long text: the ``(start, end)`` characters
#: of the chunk that matched, which the snippet shows when no query term occurs.
MATCH_SPAN = "match_span"

#: ``(text, chunk number) -> (start, end)`` of that chunk in the text, or ``None``.
ChunkLocator = Callable[[str, int], "tuple[int, int] | None"]


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


def _source_hit(h: Any) -> SourceHit:
    """A store hit (BM25 or vector) as a source hit: the store's one corpus holds messages
    and distillations, whose ids are ``d:<id>`` with role ``distillation``."""
    key, kind = h.id, Kind.MESSAGE
    if key.startswith(_DISTILLATION_PREFIX) or h.role == _DISTILLATION_ROLE:
        key, kind = key.removeprefix(_DISTILLATION_PREFIX), Kind.DISTILLATION
    return SourceHit(key=key, score=float(h.score), text=h.text, meta=_hit_meta(h), kind=kind)


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
        found = await self.store.get_messages([key])
        if not found:
            return None
        m = found[0]
        return SourceHit(key=m.id, score=0.0, text=m.text, meta=_hit_meta(m), kind=Kind.MESSAGE)


def embedder_model(embedder: Any) -> str:
    """The name a vector index is keyed by: the provider's model (``model_id``) when it says,
    else its provider name. A different model is a different vector space."""
    return str(getattr(embedder, "model_id", None) or embedder.name)


class StoreVectorSource:
    """The store's vector index for the embedder's model, as a vector source.

    Like :class:`StoreMessageSource`, one source for both kinds the store embeds (messages
    and distillations, archived ones too): register it under :attr:`Kind.MESSAGE`; its
    distillation hits become ``d:`` results. A store without vectors answers nothing.

    With ``locate_chunk`` (the indexer's own chunking, :func:`lore_core.indexer.chunk_span`),
    a hit on a long text's later chunk carries that chunk's span (meta :data:`MATCH_SPAN`).
    Hits less similar than ``min_similarity`` (the embedder's, see
    :class:`lore_core.interfaces.Embedder`) are dropped."""

    def __init__(
        self,
        store: Any,
        model: str,
        name: str = "store",
        locate_chunk: ChunkLocator | None = None,
        min_similarity: float | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.name = name
        self.locate_chunk = locate_chunk
        self.min_similarity = min_similarity
        self.unsupported = False

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> list[SourceHit]:
        if self.unsupported:
            return []
        search = getattr(self.store, "vector_search", None)
        if search is None:
            self.unsupported = True
            return []
        try:
            hits = await search(
                self.model, list(vector), session_id=where.session, project=where.project, limit=limit
            )
        except NotImplementedError:
            self.unsupported = True
            return []
        if self.min_similarity is not None:
            hits = [h for h in hits if h.score >= self.min_similarity]
        found = [_source_hit(h) for h in hits]
        if self.locate_chunk is not None:
            # Cutting long texts again is CPU work: off the event loop.
            spans = await asyncio.to_thread(self._spans, hits)
            for hit, span in zip(found, spans, strict=True):
                if span is not None:
                    hit.meta[MATCH_SPAN] = span
        return found

    def _spans(self, hits: Sequence[Any]) -> list[tuple[int, int] | None]:
        assert self.locate_chunk is not None
        # Chunk 0 is the text's beginning, which a snippet shows anyway: not worth the cut.
        return [self.locate_chunk(h.text, h.chunk) if getattr(h, "chunk", None) else None for h in hits]


class StoreDistillationOpener:
    """``d:`` ids opened through the store's ``get_distillation`` (a store without
    distillations answers "not found")."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def open(self, key: str) -> SourceHit | None:
        get = getattr(self.store, "get_distillation", None)
        if get is None:
            return None
        try:
            d = await get(key)
        except NotImplementedError:
            return None
        if d is None:
            return None
        meta = {
            "session": d.session_id,
            "project": d.project,
            "generation": d.generation,
            "created_at": d.created_at,
            "archived": d.archived,
        }
        return SourceHit(key=d.id, score=0.0, text=d.text, meta=meta, kind=Kind.DISTILLATION)
