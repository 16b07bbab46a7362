"""The entities tier (:class:`~lore_core.interfaces.EntityStore`) on DuckDB.

One row per entity, names and relations as JSON text; a merged entity keeps its row with
``merged_into`` set. Listings are read whole and filtered by project in SQL only: the kernel
matches names in its own normalised form.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from lore_core.interfaces import EntityStore
from lore_core.storage.entities import (
    Entity,
    aliases_from_json,
    entity_order,
    relations_from_json,
    relations_json,
)
from lore_core.storage.knowledge import AUTHOR_USER
from lore_store_duckdb.database import Database

#: The entities table's columns, in _entity_row's order.
_ENTITY_COLUMNS = (
    "id",
    "kind",
    "canonical_name",
    "aliases",
    "relations",
    "project",
    "sensitivity",
    "created_at",
    "updated_at",
    "created_by",
    "updated_by",
    "merged_into",
)
_ENTITY_SELECT = f"SELECT {', '.join(_ENTITY_COLUMNS)} FROM entities"


class EntityTables(Database, EntityStore):
    """:class:`~lore_core.interfaces.EntityStore` on the ``entities`` table."""

    async def write_entities(self, entities: Sequence[Entity]) -> None:
        rows = [_entity_row(e) for e in entities]
        if not rows:
            return

        def run() -> None:
            with self._transaction() as cur:
                cur.executemany(
                    f"""INSERT OR REPLACE INTO entities ({", ".join(_ENTITY_COLUMNS)})
                    VALUES ({", ".join("?" * len(_ENTITY_COLUMNS))})""",
                    rows,
                )

        await asyncio.to_thread(run)

    async def delete_entities(self, entity_ids: Sequence[str], updated: Sequence[Entity] = ()) -> int:
        ids, rows = sorted(set(entity_ids)), [_entity_row(e) for e in updated]

        def run() -> int:
            with self._transaction() as cur:
                removed = 0
                if ids:
                    found = cur.execute(
                        "DELETE FROM entities WHERE id IN (SELECT unnest(?))", (ids,)
                    ).fetchone()
                    removed = int(found[0]) if found else 0
                if rows:
                    cur.executemany(
                        f"""INSERT OR REPLACE INTO entities ({", ".join(_ENTITY_COLUMNS)})
                        VALUES ({", ".join("?" * len(_ENTITY_COLUMNS))})""",
                        rows,
                    )
            return removed

        return await asyncio.to_thread(run)

    async def get_entity(self, entity_id: str) -> Entity | None:
        rows = await asyncio.to_thread(self._query, f"{_ENTITY_SELECT} WHERE id = ?", (entity_id,))
        return _entity(rows[0]) if rows else None

    async def list_entities(
        self, project: str | None = None, *, include_global: bool = True, include_merged: bool = False
    ) -> list[Entity]:
        sql = f"{_ENTITY_SELECT} WHERE (? OR merged_into IS NULL)"
        params: list[Any] = [include_merged]
        if project is not None:
            sql += " AND (coalesce(project, '') = ? OR (? AND coalesce(project, '') = ''))"
            params += [project, include_global]
        rows = await asyncio.to_thread(self._query, sql, params)
        return sorted((_entity(r) for r in rows), key=entity_order)


def _entity_row(e: Entity) -> tuple[Any, ...]:
    return (
        e.id,
        e.kind,
        e.name,
        json.dumps(e.aliases, ensure_ascii=False),
        json.dumps(relations_json(e.relations), ensure_ascii=False),
        e.project,
        e.sensitivity,
        e.created_at,
        e.updated_at,
        e.created_by,
        e.updated_by,
        e.merged_into,
    )


def _entity(row: tuple[Any, ...]) -> Entity:
    r = dict(zip(_ENTITY_COLUMNS, row, strict=True))
    created_by = r["created_by"] or AUTHOR_USER
    return Entity(
        id=r["id"],
        kind=r["kind"],
        name=r["canonical_name"],
        aliases=aliases_from_json(json.loads(r["aliases"] or "[]")),
        relations=relations_from_json(json.loads(r["relations"] or "[]")),
        project=r["project"] or "",
        sensitivity=r["sensitivity"] or "normal",
        created_at=float(r["created_at"]),
        updated_at=float(r["updated_at"]),
        created_by=created_by,
        updated_by=r["updated_by"] or created_by,
        merged_into=r["merged_into"],
    )
