"""The recall engine over what a store holds today: BM25 and vector search over messages and
distillations (fused by RRF), ``t:`` and ``d:`` ids opened from the store. Knowledge and
entity sources join here as those tiers arrive.

Vectors need an embedder: without one (none installed) the engine searches full text only
and says so in each response's notes; with one whose model cannot load, the engine finds
out on the first search and says the same (see :mod:`lore_core.recall.engine`).

A vector hit of a long text says which chunk matched: its character span goes into the
result's meta (:data:`~lore_core.recall.sources.MATCH_SPAN`), so the snippet can show that part
when the query's words are not in the text (:func:`~lore_core.recall.tool.snippet`)."""

from __future__ import annotations

from typing import Any

from lore_core.indexer import DEFAULT_MAX_CHUNKS, chunk_span
from lore_core.recall.engine import RecallEngine, RecallResponse
from lore_core.recall.ids import Kind, RecallIdError, parse_id
from lore_core.recall.sources import (
    StoreDistillationOpener,
    StoreMessageSource,
    StoreVectorSource,
    embedder_model,
)

#: The note's reason when no embedding provider is installed.
NO_EMBEDDER = "no embedding provider is installed"


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
        source = StoreVectorSource(
            store,
            embedder_model(embedder),
            locate_chunk=lambda text, chunk: chunk_span(text, chunk, embedder, max_chunks),
            min_similarity=getattr(embedder, "min_similarity", None),
        )
        engine.add_vector_source(Kind.MESSAGE, source)
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
