"""The vectors tier (:class:`~lore_core.interfaces.VectorStore`) on DuckDB: the items not
embedded yet (messages and distillations past a model's watermark), the vectors written into
the per-model LanceDB tables (:mod:`lore_store_duckdb.vectors`), and the passages they find
read back from the database, cut by the kernel's rules.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from lore_core.interfaces import VectorStore
from lore_core.storage.passages import cut_text, message_passages
from lore_core.storage.records import (
    DISTILLATION_PREFIX,
    DISTILLATION_ROLE,
    VECTOR_DISTILLATION,
    VECTOR_MESSAGE,
    EmbeddingItem,
    ItemVectors,
    PassageRef,
    SearchHit,
)
from lore_store_duckdb.connection import literals
from lore_store_duckdb.database import Database


class VectorTables(Database, VectorStore):
    """:class:`~lore_core.interfaces.VectorStore` over the database and its vector index."""

    # Messages and distillations share the seq, so one watermark per model covers both.
    _PENDING_SQL = f"""SELECT * FROM (
            SELECT seq, '{VECTOR_MESSAGE}' AS kind, id, text, session_id, project, created_at, role, blocks
            FROM messages WHERE seq > $1
            UNION ALL
            SELECT seq, '{VECTOR_DISTILLATION}', id, content, session_id, project, created_at, NULL, NULL
            FROM distillations WHERE seq > $1
        ) ORDER BY seq LIMIT $2"""

    async def pending_embeddings(self, model: str, limit: int = 256) -> list[EmbeddingItem]:
        def run() -> list[EmbeddingItem]:
            # The recorded watermark first: with nothing pending, LanceDB is not loaded.
            watermark = self._vectors.watermark(model)
            rows = self._query(self._PENDING_SQL, (watermark, max(0, limit)))
            if rows and (table_watermark := self._vectors.table_watermark(model)) != watermark:
                rows = self._query(self._PENDING_SQL, (table_watermark, max(0, limit)))
            return [
                EmbeddingItem(
                    kind,
                    ident,
                    text or "",
                    session or "",
                    project or "",
                    float(at or 0.0),
                    int(seq),
                    role or "",
                    json.loads(blocks) if blocks else [],
                )
                for seq, kind, ident, text, session, project, at, role, blocks in rows
            ]

        return await asyncio.to_thread(run)

    async def write_vectors(self, model: str, dimensions: int, items: Sequence[ItemVectors]) -> int:
        return await asyncio.to_thread(self._vectors.write, model, dimensions, list(items))

    async def nearest_passages(
        self,
        model: str,
        vector: Sequence[float],
        kinds: Sequence[str] | None = None,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[PassageRef]:
        search = self._vectors.search
        found = await asyncio.to_thread(search, model, vector, kinds, session_id, project, limit)
        return [PassageRef(ident, index, score) for ident, score, index in found]

    async def read_passages(self, refs: Sequence[PassageRef]) -> list[SearchHit]:
        def run() -> list[SearchHit]:
            if not refs:
                return []
            # Each item is cut only as far as the last passage asked of it.
            last: dict[str, int] = {}
            for ref in refs:
                last[ref.item] = max(ref.passage, last.get(ref.item, 0))
            ids = list(last)
            # item id -> (search id, session, project, role, position, created_at, passages)
            items: dict[str, tuple[Any, ...]] = {}
            rows = self._query(
                "SELECT id, session_id, project, role, position, created_at, blocks FROM messages "
                f"WHERE id IN {literals(ids)}"
            )
            # The text only of messages without blocks (written by hand), in a query of its
            # own: a column read at all costs ~4 ms for 20 messages at 1M (each lookup
            # decompresses its row's block of the column), and nearly every message has blocks.
            bare = [r[0] for r in rows if not r[6] or r[6] == "[]"]
            texts: dict[str, str] = {}
            if bare:
                texts = dict(self._query(f"SELECT id, text FROM messages WHERE id IN {literals(bare)}"))
            for r in rows:
                blocks = json.loads(r[6]) if r[6] else []
                passages = message_passages(r[3], blocks, texts.get(r[0]) or "", until=last[r[0]])
                items[r[0]] = (*r[:6], passages)
            # The rest are distillations' (their ids, 24 hex digits, never meet a message's 32).
            rest = [ident for ident in ids if ident not in items]
            if rest:
                for r in self._query(
                    "SELECT id, session_id, project, created_at, content FROM distillations "
                    f"WHERE id IN {literals(rest)}"
                ):
                    ref = DISTILLATION_PREFIX + r[0]
                    items[r[0]] = (ref, r[1], r[2], DISTILLATION_ROLE, 0, r[3], cut_text(r[4] or ""))
            hits = []
            for found in refs:
                item = items.get(found.item)
                if item is None or found.passage >= len(item[6]):
                    continue  # an item gone, or cut by other rules
                passage = item[6][found.passage]
                hits.append(
                    SearchHit(
                        id=item[0],
                        session_id=item[1],
                        project=item[2] or "",
                        role=item[3],
                        score=found.score,
                        text=passage.text,
                        position=int(item[4] or 0),
                        created_at=float(item[5] or 0.0),
                        passage=passage.index,
                        start=passage.start,
                        end=passage.end,
                        tool=passage.tool,
                        source=passage.source,
                    )
                )
            return hits

        return await asyncio.to_thread(run)

    async def vector_stats(self, model: str | None = None) -> dict[str, Any]:
        return await asyncio.to_thread(self._vector_stats, model)

    def _vector_stats(self, model: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in [model] if model is not None else self._vectors.models():
            stats = self._vectors.stats(name)
            (pending,) = self._query(
                "SELECT (SELECT count(*) FROM messages WHERE seq > $1) "
                "+ (SELECT count(*) FROM distillations WHERE seq > $1)",
                (stats["watermark"],),
            )[0]
            out[name] = {**stats, "pending": int(pending)}
        return out

    async def reset_vectors(self, model: str) -> None:
        await asyncio.to_thread(self._vectors.reset, model)

    async def optimize_vectors(self, model: str) -> None:
        """Compact ``model``'s table now (the indexer calls it when idle; benchmarks too)."""
        await asyncio.to_thread(self._vectors.optimize, model)
