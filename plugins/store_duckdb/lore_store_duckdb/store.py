"""The DuckDB store: DuckDB file as the store of record, a LanceDB full-text index beside it.

Why two engines (measured, see the README): DuckDB's own ``fts`` extension cannot add rows to
an index (a rebuild took 56 s at 500K rows) and answered in ~0.5 s at 500K; LanceDB's native
BM25 index answers in a few milliseconds and sees appended rows before they are merged into
the index. DuckDB is the ground truth; the index (``<file>.fts/``, :mod:`~lore_store_duckdb.fulltext`) is
derived from it and can be deleted at any time: it is rebuilt from DuckDB on the next open.

:class:`DuckDBStore` is the core and every optional tier put together, one class per tier
(:mod:`lore_store_duckdb.tiers`) over one database (:mod:`~lore_store_duckdb.database`: the connection, its
statements and transactions); forgetting a session is :mod:`~lore_store_duckdb.forget`. This module adds
opening, closing and what the store reports of itself.

One connection per process (DuckDB locks the file against other processes, even readers);
each operation uses its own cursor and runs in a worker thread so the event loop never
blocks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import duckdb

from lore_core.interfaces import Tier
from lore_core.storage.records import StoreInventory
from lore_store_duckdb import lance
from lore_store_duckdb.connection import NEW_FILE_BLOCK_BYTES, block_size, file_size
from lore_store_duckdb.forget import Forgetting
from lore_store_duckdb.schema import SCHEMA_VERSION
from lore_store_duckdb.tiers.distillations import DistillationTables
from lore_store_duckdb.tiers.entities import EntityTables
from lore_store_duckdb.tiers.events import EventLogTables
from lore_store_duckdb.tiers.knowledge import KnowledgeTables
from lore_store_duckdb.tiers.messages import MessageTables
from lore_store_duckdb.tiers.vectors import VectorTables


class DuckDBStore(
    MessageTables, Forgetting, DistillationTables, VectorTables, KnowledgeTables, EntityTables, EventLogTables
):
    """Every tier of the kernel's store contract on one DuckDB file (:attr:`tiers`)."""

    name = "duckdb"
    #: Every optional tier (lore_core.interfaces.Tier).
    tiers = frozenset(Tier)

    async def open(self) -> None:
        await asyncio.to_thread(self._open)

    async def close(self) -> None:
        self._closed = True
        await asyncio.to_thread(self._close)

    def health(self) -> dict[str, Any]:
        if self._con is None:
            return {"ok": False, "detail": f"{self.path} is not open", "path": str(self.path)}
        index = self._index.health() if self._index else {"ok": False}
        return {
            "ok": True,
            "detail": f"DuckDB {duckdb.__version__} at {self.path}",
            "path": str(self.path),
            "memory_mib": self._memory_mib(),
            "index_cache": lance.cache_usage(),
            "index": index,
        }

    async def inventory(self) -> StoreInventory:
        def run() -> StoreInventory:
            return StoreInventory(
                state_sessions=tuple(
                    str(r[0]) for r in self._query("SELECT DISTINCT session_id FROM session_state ORDER BY 1")
                ),
                runs=tuple(
                    (str(p), str(r))
                    for p, r in self._query("SELECT project, run FROM event_runs ORDER BY 1, 2")
                ),
                bound_projects=tuple(
                    str(r[0]) for r in self._query("SELECT project FROM team_bindings ORDER BY 1")
                ),
                policy_teams=tuple(
                    str(r[0]) for r in self._query("SELECT team FROM team_policies ORDER BY 1")
                ),
            )

        return await asyncio.to_thread(run)

    async def stats(self) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            (projects,), (sessions,), (messages,), (distillations,) = (
                self._query(f"SELECT count(*) FROM {table}")[0]
                for table in ("projects", "sessions", "messages", "distillations")
            )
            ((knowledge,),) = self._query(
                "SELECT count(*) FROM knowledge_versions WHERE is_current AND NOT is_deleted"
            )
            ((entities,),) = self._query("SELECT count(*) FROM entities WHERE merged_into IS NULL")
            version = self._query("SELECT value FROM lore_meta WHERE key = 'schema_version'")
            with self._statement() as cur:
                file_blocks = block_size(cur)
            advice = []
            if file_blocks > NEW_FILE_BLOCK_BYTES:
                advice.append(
                    f"the file has {file_blocks // 1024} KiB blocks (made by an older Lore): with the "
                    f"gateway stopped, `lore duckdb-compact` moves it to {NEW_FILE_BLOCK_BYTES // 1024} KiB "
                    "ones, which recall reads faster"
                )
            return {
                "backend": self.name,
                "path": str(self.path),
                "index_path": str(self.index_path),
                "size_bytes": file_size(self.path)
                + file_size(Path(str(self.path) + ".wal"))
                + file_size(self.index_path),
                "schema_version": int(version[0][0]) if version else 0,
                "projects": projects,
                "sessions": sessions,
                "messages": messages,
                "distillations": distillations,
                # Entries current and alive (deleted ones are kept, not counted).
                "knowledge": knowledge,
                "entities": entities,
                "index": self._index.health() if self._index else None,
                # Per embedding model; opening LanceDB only when some model was indexed.
                "vectors": self._vector_stats(None),
                "block_size_bytes": file_blocks,
                "advice": advice,
            }

        return await asyncio.to_thread(run)


__all__ = ["SCHEMA_VERSION", "DuckDBStore"]
