"""The distillations tier (:class:`~lore_core.interfaces.DistillationStore`) on DuckDB: one
row per observation log or meta-distillation, append-only, archived by a flag.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from lore_core.interfaces import DistillationStore
from lore_core.storage.records import DISTILLATION_PREFIX, StoredDistillation
from lore_store_duckdb.database import Database


class DistillationTables(Database, DistillationStore):
    """:class:`~lore_core.interfaces.DistillationStore` on the ``distillations`` table."""

    async def write_distillation(self, distillation: StoredDistillation, archive: Sequence[str] = ()) -> bool:
        return await asyncio.to_thread(self._write_distillation, distillation, list(archive))

    def _write_distillation(self, d: StoredDistillation, archive: list[str]) -> bool:
        with self._transaction() as cur:
            cur.execute(
                f"""INSERT OR IGNORE INTO distillations ({", ".join(_DISTILLATION_COLUMNS)})
                VALUES ({", ".join("?" * len(_DISTILLATION_COLUMNS))})""",
                _distillation_row(d),
            )
            fetched = cur.fetchone()
            added = bool(fetched and int(fetched[0]))
            ids = [i.removeprefix(DISTILLATION_PREFIX) for i in archive]
            if ids:
                cur.execute(
                    _ARCHIVE_SQL,
                    (ids,),
                )
        if added and self._index is not None:
            self._index.wake()
        return added

    async def list_distillations(
        self, session_id: str | None = None, include_archived: bool = True
    ) -> list[StoredDistillation]:
        where, params = [], []
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if not include_archived:
            where.append("NOT archived")
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        rows = await asyncio.to_thread(
            self._query,
            f"SELECT {', '.join(_DISTILLATION_COLUMNS)} FROM distillations {clause} "
            "ORDER BY created_at, generation, id",
            params,
        )
        return [_distillation(r) for r in rows]

    async def get_distillation(self, distillation_id: str) -> StoredDistillation | None:
        rows = await asyncio.to_thread(
            self._query,
            f"SELECT {', '.join(_DISTILLATION_COLUMNS)} FROM distillations WHERE id = ?",
            (distillation_id.removeprefix(DISTILLATION_PREFIX),),
        )
        return _distillation(rows[0]) if rows else None

    async def archive_distillations(self, ids: Sequence[str]) -> int:
        def run() -> int:
            with self._write_lock, self._statement() as cur:
                result = cur.execute(
                    _ARCHIVE_SQL,
                    ([i.removeprefix(DISTILLATION_PREFIX) for i in ids],),
                ).fetchone()
                return int(result[0]) if result else 0

        return await asyncio.to_thread(run) if ids else 0

    async def distilled_message_ids(self, session_id: str) -> set[str]:
        rows = await asyncio.to_thread(
            self._query,
            "SELECT source_ids FROM distillations WHERE session_id = ? AND generation = 0",
            (session_id,),
        )
        return {i for (source,) in rows for i in json.loads(source or "[]")}


_ARCHIVE_SQL = "UPDATE distillations SET archived = true WHERE id IN (SELECT unnest(?)) AND NOT archived"
_DISTILLATION_COLUMNS = (
    "id",
    "session_id",
    "project",
    "generation",
    "content",
    "source_ids",
    "start_at",
    "end_at",
    "method",
    "source_tokens",
    "input_tokens",
    "output_tokens",
    "compression_ratio",
    "archived",
    "worker_provider",
    "worker_model",
    "created_at",
)


def _distillation_row(d: StoredDistillation) -> tuple[Any, ...]:
    return (
        d.id,
        d.session_id,
        d.project,
        d.generation,
        d.text,
        json.dumps(d.source_ids),
        d.start,
        d.end,
        d.method,
        d.source_tokens,
        d.input_tokens,
        d.output_tokens,
        d.compression_ratio,
        d.archived,
        d.worker_provider,
        d.worker_model,
        d.created_at,
    )


def _distillation(row: tuple[Any, ...]) -> StoredDistillation:
    r = dict(zip(_DISTILLATION_COLUMNS, row, strict=True))
    return StoredDistillation(
        id=r["id"],
        session_id=r["session_id"],
        project=r["project"] or "",
        generation=int(r["generation"]),
        text=r["content"],
        source_ids=json.loads(r["source_ids"] or "[]"),
        start=float(r["start_at"]),
        end=float(r["end_at"]),
        method=r["method"],
        source_tokens=int(r["source_tokens"]),
        input_tokens=int(r["input_tokens"]),
        output_tokens=int(r["output_tokens"]),
        compression_ratio=float(r["compression_ratio"]),
        archived=bool(r["archived"]),
        worker_provider=r["worker_provider"],
        worker_model=r["worker_model"],
        created_at=float(r["created_at"]),
    )
