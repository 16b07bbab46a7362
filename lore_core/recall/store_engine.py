"""The recall engine over what a store holds: BM25 and vector search over the passages of
messages and distillations and over knowledge entries, BM25 over entities (fused by RRF),
``t:``, ``d:``, ``k:`` and ``e:`` ids opened from the store, and queries naming an entity
also searched under its other names (:mod:`lore_core.recall.entities`).

Vectors need an embedder: without one (none installed) the engine searches full text only
and says so in each response's notes; with one whose model cannot load, the engine finds
out on the first search and says the same (see :mod:`lore_core.recall.engine`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lore_core.interfaces import Embedder, Store
from lore_core.knowledge.entities import EntityBook
from lore_core.knowledge.search import KnowledgeSource
from lore_core.recall.engine import DEFAULT_SOURCE_TIMEOUT_SECONDS, RecallEngine, RecallResponse
from lore_core.recall.entities import EntityIndex, EntitySource
from lore_core.recall.expansion import DEFAULT_TIMEOUT_SECONDS
from lore_core.recall.ids import Kind, RecallIdError, parse_id
from lore_core.recall.sources import (
    StoreDistillationOpener,
    StoreMessageSource,
    StoreSessionDirectory,
    StoreVectorSource,
    vector_index_name,
)

#: The note's reason when no embedding provider is installed.
NO_EMBEDDER = "no embedding provider is installed"


def store_recall_engine(
    store: Store,
    worker: Any = None,
    embedder: Embedder | None = None,
    expand: bool = False,
    expansion_timeout: float = DEFAULT_TIMEOUT_SECONDS,
    entities: EntityBook | None = None,
    expand_aliases: bool = True,
    source_timeout: float = DEFAULT_SOURCE_TIMEOUT_SECONDS,
    vector_index: Callable[[], str] | None = None,
    read_every_passage: bool = False,
) -> RecallEngine:
    """Hybrid recall over ``store``: a BM25 list and, with ``embedder``, a vector list (the
    index of the embedder's model and the passage rules) per query, fused by RRF; with
    ``expand`` and a ``worker``, the same for the worker's rephrasings of the query; with
    ``expand_aliases``, full-text lists for the other names of the entities a query names.
    ``entities``: the book entity writes go through (its counter keeps the entity table
    cached between writes). ``vector_index``: which vector index to search at each query
    (the indexer's ``serving_index``), instead of the embedder's own.
    ``read_every_passage``: see :class:`RecallEngine`."""
    index = EntityIndex(store, entities)
    engine = RecallEngine(
        worker=worker,
        embedder=embedder,
        expand=expand,
        expansion_timeout=expansion_timeout,
        sessions=StoreSessionDirectory(store),
        aliases=index if expand_aliases else None,
        source_timeout=source_timeout,
        read_every_passage=read_every_passage,
    )
    messages = StoreMessageSource(store)
    engine.add_text_source(Kind.MESSAGE, messages)
    if embedder is not None:
        source = StoreVectorSource(
            store, vector_index_name(embedder), min_similarity=embedder.min_similarity, serving=vector_index
        )
        engine.add_vector_source(Kind.MESSAGE, source)
    else:
        engine.vectors_unavailable = NO_EMBEDDER
    engine.add_opener(Kind.MESSAGE, messages)
    engine.add_opener(Kind.DISTILLATION, StoreDistillationOpener(store))
    knowledge = KnowledgeSource(store, embedder)
    engine.add_text_source(Kind.KNOWLEDGE, knowledge)
    if embedder is not None:
        engine.add_vector_source(Kind.KNOWLEDGE, knowledge)
    engine.add_opener(Kind.KNOWLEDGE, knowledge)
    entity_source = EntitySource(index)
    engine.add_text_source(Kind.ENTITY, entity_source)
    engine.add_opener(Kind.ENTITY, entity_source)
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
        # False when no result clears the relevance floor: the results are only the closest.
        "matched": response.matched,
        "error": response.error,
        "notes": list(response.notes),
        # The entities the query named and the other names searched for them.
        "aliases": list(response.metadata.get("aliases", [])),
    }
