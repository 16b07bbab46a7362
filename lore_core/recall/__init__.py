"""Recall: the model's ``recall`` tool searching everything the project remembers.

* :mod:`~lore_core.recall.ids`: result ids (``t:``/``d:``/``k:``/``e:``) and scopes;
* :mod:`~lore_core.recall.sources`: the protocols a searchable tier implements;
* :mod:`~lore_core.recall.cascade`: the relaxed full-text cascade;
* :mod:`~lore_core.recall.expansion`: optional LLM query expansion;
* :mod:`~lore_core.recall.fusion`: reciprocal rank fusion;
* :mod:`~lore_core.recall.intent`: how a query is read (one plan the later stages consume);
* :mod:`~lore_core.recall.entities`: alias expansion of queries, and entities as a searchable kind;
* :mod:`~lore_core.recall.ranking`: the answer made of a search's ranked lists (a pure function);
* :mod:`~lore_core.recall.engine`: :class:`RecallEngine` tying them together;
* :mod:`~lore_core.recall.store_engine`: the engine over a store, as the gateway and the CLI build it;
* :mod:`~lore_core.recall.indexer`: the background vector indexer;
* :mod:`~lore_core.recall.tool`: the tool declaration per wire API and its result text;
* :mod:`~lore_core.recall.rounds`: the relay's recall rounds (run the searches, send the follow-ups);
* :mod:`~lore_core.recall.memory`: what went upstream for each recall the client saw as a marker.
"""

from lore_core.recall.engine import RecallEngine, RecallResponse
from lore_core.recall.ids import (
    Kind,
    RecallId,
    RecallIdError,
    Scope,
    ScopeError,
    format_id,
    parse_id,
    parse_scope,
)
from lore_core.recall.ranking import RecallResult
from lore_core.recall.sources import SearchFilter, SourceHit, StoreDistillationOpener, StoreMessageSource

__all__ = [
    "Kind",
    "RecallEngine",
    "RecallId",
    "RecallIdError",
    "RecallResponse",
    "RecallResult",
    "Scope",
    "ScopeError",
    "SearchFilter",
    "SourceHit",
    "StoreDistillationOpener",
    "StoreMessageSource",
    "format_id",
    "parse_id",
    "parse_scope",
]
