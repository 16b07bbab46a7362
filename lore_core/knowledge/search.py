"""Knowledge as a recall source (``k:`` ids; docs/recall.md): full text with the field
weights title 6, content 2, category 3, and vectors of each entry's title and content, over
the current alive entries of the project (plus global ones), and of every project when the
scope is ``all``, where other projects' entries count half when the session's own project
has results of its own (docs/recall.md). One entry is one passage: entries are short.

Entries are read from the store on each search (a few hundred rows) and their vectors are
kept by version id (a version never changes), so an entry is embedded once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from lore_core.interfaces import Embedder, KnowledgeStore, Store, tier_of
from lore_core.knowledge.prompt import entry_text, relevance
from lore_core.recall.ids import Kind
from lore_core.recall.sources import SearchFilter, SourceHit
from lore_core.storage.knowledge import KnowledgeVersion

log = logging.getLogger("lore.recall")

#: Weight of another project's entry (``all`` scope) beside this project's own.
OTHER_PROJECT_WEIGHT = 0.5
#: Confidence a recall hit adds to the entries the model opens.
RECALL_REINFORCEMENT = 0.05
MAX_CACHED_VECTORS = 20_000
#: The name of a search's read of the entries (:attr:`SearchFilter.reads`).
_ENTRIES_READ = "knowledge.entries"


class EntryVectors:
    """Embeddings of knowledge entries (title and content), kept by version id: a version
    never changes, so each is embedded once (recall, curation's duplicate check and the
    contradiction scan each keep one)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._vectors: dict[str, list[float]] = {}

    async def of(self, entries: Sequence[KnowledgeVersion]) -> dict[str, list[float]]:
        """``version_id -> vector`` of ``entries``; the embedder's errors propagate."""
        missing = [e for e in entries if e.version_id not in self._vectors]
        if missing:
            vectors = await self.embedder.embed([f"{e.title}\n{e.content}" for e in missing])
            if len(self._vectors) + len(missing) > MAX_CACHED_VECTORS:
                self._vectors.clear()
            for entry, vector in zip(missing, vectors, strict=True):
                self._vectors[entry.version_id] = list(vector)
        return {e.version_id: self._vectors[e.version_id] for e in entries}


def _meta(entry: KnowledgeVersion) -> dict[str, Any]:
    return {
        "title": entry.title,
        "category": entry.category,
        "project": entry.project,
        "knowledge_scope": entry.scope,
        "created_at": entry.created_at,
        "version": entry.version,
        "role": "knowledge",
    }


class KnowledgeSource:
    """Text source, vector source and opener of :attr:`Kind.KNOWLEDGE`."""

    name = "knowledge"

    def __init__(self, store: Store, embedder: Embedder | None = None) -> None:
        self.store = store
        #: ``None``: a store without the knowledge tier (nothing to find or open).
        self.knowledge = tier_of(store, KnowledgeStore)
        self.embedder = embedder
        self._vectors = EntryVectors(embedder) if embedder is not None else None

    async def _entries(self, where: SearchFilter) -> list[KnowledgeVersion]:
        """The entries a search may return, read once per search (its text list, the
        cascade's rounds and its vector list each asked: three reads at every search)."""
        read = where.reads.get(_ENTRIES_READ)
        if read is None:
            read = asyncio.ensure_future(self._read_entries(where.project))
            # Retrieved even when every list that asked gave up waiting (a timeout).
            read.add_done_callback(lambda done: done.cancelled() or done.exception())
            where.reads[_ENTRIES_READ] = read
        # Shielded: one list's timeout must not cancel the read the others wait for.
        entries: list[KnowledgeVersion] = await asyncio.shield(read)
        return entries

    async def _read_entries(self, project: str | None) -> list[KnowledgeVersion]:
        if self.knowledge is None:
            return []
        entries = await self.knowledge.current_knowledge(project)
        # Recall results go to the model, a hosted one most of the time: restricted entries
        # never leave the store (`lore knowledge list` and `show` are the owner's view).
        return [e for e in entries if e.sensitivity != "restricted"]

    @staticmethod
    def _other(entry: KnowledgeVersion, where: SearchFilter) -> bool:
        """Another project's entry (scope ``all`` only)."""
        crossing = where.project is None and where.home is not None
        return crossing and entry.scope == "project" and entry.project != where.home

    def _ranked(
        self, scored: list[tuple[float, KnowledgeVersion]], where: SearchFilter, limit: int
    ) -> list[SourceHit]:
        """Best first; other projects' entries at :data:`OTHER_PROJECT_WEIGHT` when this
        project has results of its own (alone, they compete at full weight)."""
        own = any(not self._other(e, where) for _, e in scored)
        weighed = [
            (score * (OTHER_PROJECT_WEIGHT if own and self._other(e, where) else 1.0), e)
            for score, e in scored
        ]
        weighed.sort(key=lambda pair: -pair[0])
        return [
            SourceHit(e.logical_id, score, entry_text(e), _meta(e), Kind.KNOWLEDGE)
            for score, e in weighed[:limit]
        ]

    async def search(self, query: str, where: SearchFilter, limit: int) -> list[SourceHit]:
        return self._ranked(relevance(query, await self._entries(where)), where, limit)

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> list[SourceHit]:
        if self.embedder is None or self._vectors is None:
            return []
        entries = await self._entries(where)
        vectors = await self._vectors.of(entries)
        floor = self.embedder.min_similarity
        scored = []
        for entry in entries:
            similarity = cosine(vector, vectors[entry.version_id])
            if floor is None or similarity >= floor:
                scored.append((similarity, entry))
        return self._ranked(scored, where, limit)

    async def open(self, key: str) -> SourceHit | None:
        if self.knowledge is None:
            return None
        versions = await self.knowledge.knowledge_versions(key)
        if not versions:
            return None
        current = versions[-1]
        if current.sensitivity == "restricted":
            text = f"[{current.ref}] restricted: not shown to the model (`lore knowledge show` shows it)"
            return SourceHit(current.logical_id, 0.0, text, {"role": "knowledge"}, Kind.KNOWLEDGE)
        lines = [entry_text(current)]
        if current.is_deleted:
            lines = [f"[{current.ref}] deleted: {current.title} (no longer applies)"]
        if len(versions) > 1:
            lines.append(f"(version {current.version}; earlier versions: {len(versions) - 1})")
        await self.knowledge.reinforce_knowledge([current.logical_id], RECALL_REINFORCEMENT, time.time())
        return SourceHit(current.logical_id, 0.0, "\n".join(lines), _meta(current), Kind.KNOWLEDGE)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity; 0 for an empty or zero vector."""
    if not a or not b:
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
