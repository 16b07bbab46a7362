"""A database created by schema version 2 migrates to version 3 (knowledge versions say who
wrote them) keeping its rows, and the knowledge tier then works on it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
from lore_store_duckdb import schema
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.knowledge import AUTHOR_CURATOR, AUTHOR_USER, KnowledgeMetric, next_version


def test_version_2_database_migrates_and_keeps_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"

    # A version-2 file, as the version-2 plugin left it: its migrations, a message, a
    # distillation, and a knowledge version with its metric (no updated_by column yet).
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE lore_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")
    for statement in [*schema.V1, *schema.V2]:
        con.execute(statement)
    con.execute("INSERT INTO lore_meta VALUES ('schema_version', '2')")
    con.execute(
        """INSERT INTO messages (id, session_id, position, role, blocks, text, created_at, complete, origin)
        VALUES ('m1', 's-1', 0, 'user', '[{"type": "text", "text": "the heron nests"}]', 'the heron nests',
            1.0, true, 'request')"""
    )
    con.execute(
        """INSERT INTO distillations (id, session_id, content, source_ids, created_at)
        VALUES ('d1', 's-1', '- the heron log', '["m1"]', 2.0)"""
    )
    con.execute(
        """INSERT INTO knowledge_versions (version_id, logical_id, version, is_current, category, title,
            content, scope, project, created_by, source_ref, created_at)
        VALUES ('heron-entry.1', 'heron-entry', 1, true, 'decision', 'Herons', 'they nest in March',
            'project', '/work/alpha', 'curator', 'd:d1', 3.0)"""
    )
    con.execute("INSERT INTO knowledge_metrics VALUES ('heron-entry', 0.6, 3.0)")
    con.close()

    async def use_v3() -> None:
        store = DuckDBStore(db)
        await store.open()
        try:
            stats = await store.stats()
            assert stats["schema_version"] == schema.SCHEMA_VERSION  # and on to the newest
            assert (stats["messages"], stats["distillations"], stats["knowledge"]) == (1, 1, 1)
            assert [m.id for m in await store.session_messages("s-1")] == ["m1"]
            assert [d.id for d in await store.list_distillations("s-1")] == ["d1"]
            (old,) = await store.knowledge_versions("heron-entry")
            # A version written before the column existed was written by its creator.
            assert (old.created_by, old.updated_by, old.source_ref) == (
                AUTHOR_CURATOR,
                AUTHOR_CURATOR,
                "d:d1",
            )
            assert (old.title, old.content, old.project, old.is_current) == (
                "Herons",
                "they nest in March",
                "/work/alpha",
                True,
            )
            assert await store.knowledge_metrics() == {
                "heron-entry": KnowledgeMetric("heron-entry", 0.6, 3.0)
            }
            edit = next_version(old, updated_by=AUTHOR_USER, at=4.0, content="they nest in April")
            assert await store.write_knowledge(edit) is True
            versions = await store.knowledge_versions("heron-entry")
            assert [(v.version, v.updated_by, v.is_current) for v in versions] == [
                (1, AUTHOR_CURATOR, False),
                (2, AUTHOR_USER, True),
            ]
        finally:
            await store.close()

    asyncio.run(use_v3())
