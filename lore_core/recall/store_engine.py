"""The recall engine over what a store holds today: BM25 and vector search over messages and
distillations (fused by RRF), ``t:`` and ``d:`` ids opened from the store. Knowledge and
entity sources join here as those tiers arrive.

Vectors need an embedder: without one (none installed) the engine searches full text only
and says so in each response's notes; with one whose model cannot load, the engine finds
out on the first search and says the same (see :mod:`lore_core.recall.engine`).

A vector hit of a long text says which chunk matched: its character span goes into the
result's meta (:data:`~lore_core.recall.tool.MATCH_SPAN`), so the snippet can show that part
when the query's words are not in the text (:func:`~lore_core.recall.tool.snippet`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from lore_core.indexer import DEFAULT_MAX_CHUNKS, chunk_span
from lore_core.recall.engine import RecallEngine, RecallResponse
from lore_core.recall.ids import Kind, RecallIdError, parse_id
from lore_core.recall.sources import (
    SearchFilter,
    SourceHit,
    StoreDistillationOpener,
    StoreMessageSource,
    StoreVectorSource,
    _source_hit,
    embedder_model,
)
from lore_core.recall.tool import MATCH_SPAN
from lore_core.store import SearchHit

#: The note's reason when no embedding provider is installed.
NO_EMBEDDER = "no embedding provider is installed"


class StoreChunkVectorSource(StoreVectorSource):
    """:class:`StoreVectorSource` whose hits also carry where in the text the matched chunk
    lies (meta :data:`MATCH_SPAN`, ``(start, end)``), found again with the indexer's own
    chunking (:func:`~lore_core.indexer.chunk_span`) of ``embedder`` and ``max_chunks``."""

    def __init__(self, store: Any, embedder: Any, max_chunks: int = DEFAULT_MAX_CHUNKS) -> None:
        super().__init__(store, embedder_model(embedder))
        self.embedder = embedder
        self.max_chunks = max_chunks

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> list[SourceHit]:
        # As StoreVectorSource.search_vector, but keeping each store hit's chunk.
        search = None if self.unsupported else getattr(self.store, "vector_search", None)
        if search is None:
            self.unsupported = True
            return []
        try:
            hits: list[SearchHit] = await search(
                self.model, list(vector), session_id=where.session, project=where.project, limit=limit
            )
        except NotImplementedError:
            self.unsupported = True
            return []
        # Tokenizing long texts again is CPU work: off the event loop.
        spans = await asyncio.to_thread(self._spans, hits)
        found = [_source_hit(h) for h in hits]
        for hit, span in zip(found, spans, strict=True):
            if span is not None:
                hit.meta[MATCH_SPAN] = span
        return found

    def _spans(self, hits: Sequence[SearchHit]) -> list[tuple[int, int] | None]:
        # Chunk 0 is the text's beginning, which a snippet shows anyway: not worth the cut.
        return [
            chunk_span(h.text, h.chunk, self.embedder, self.max_chunks) if h.chunk else None for h in hits
        ]


def store_recall_engine(
    store: Any, worker: Any = None, embedder: Any = None, max_chunks: int = DEFAULT_MAX_CHUNKS
) -> RecallEngine:
    """Hybrid recall over ``store``: a BM25 list and, with ``embedder``, a vector list (the
    index of the embedder's model) per query, fused by RRF. ``max_chunks`` must be the
    indexer's (``embedding.maxChunksPerItem``), so a hit's chunk number names the same piece."""
    engine = RecallEngine(worker=worker, embedder=embedder)
    messages = StoreMessageSource(store)
    engine.add_text_source(Kind.MESSAGE, messages)
    if embedder is not None:
        engine.add_vector_source(Kind.MESSAGE, StoreChunkVectorSource(store, embedder, max_chunks))
    else:
        engine.vectors_unavailable = NO_EMBEDDER
    engine.add_opener(Kind.MESSAGE, messages)
    engine.add_opener(Kind.DISTILLATION, StoreDistillationOpener(store))
    return engine


async def recall(
    engine: RecallEngine,
    query: str,
    scope: str | None = None,
    session: str | None = None,
    project: str | None = None,
    limit: int = 10,
) -> RecallResponse:
    """Search, or open the item when the query is one result id (``t:...``, ``d:...``)."""
    try:
        parse_id(query.strip())
    except RecallIdError:
        return await engine.search(query, scope, session, project, limit)
    return await engine.open(query.strip())


def response_json(response: RecallResponse) -> dict[str, Any]:
    return {
        "query": response.query,
        "scope": response.scope,
        "results": [r.as_json() for r in response.results],
        "error": response.error,
        "notes": list(response.notes),
    }
