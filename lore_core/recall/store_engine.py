"""The recall engine over what a store holds today: BM25 over messages and distillations,
``t:`` and ``d:`` ids opened from the store. Vector, knowledge and entity sources join here
as those tiers arrive."""

from __future__ import annotations

from typing import Any

from lore_core.recall.engine import RecallEngine, RecallResponse
from lore_core.recall.ids import Kind, RecallIdError, parse_id
from lore_core.recall.sources import StoreDistillationOpener, StoreMessageSource


def store_recall_engine(store: Any, worker: Any = None) -> RecallEngine:
    engine = RecallEngine(worker=worker)
    messages = StoreMessageSource(store)
    engine.add_text_source(Kind.MESSAGE, messages)
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
