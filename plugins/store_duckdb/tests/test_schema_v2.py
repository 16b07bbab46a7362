"""A database created by schema version 1 migrates to version 2 (distillations with
provenance) keeping its messages, and its full-text index then covers both."""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
from lore_store_duckdb import schema
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.records import StoredDistillation, distillation_id


def test_version_1_database_migrates_and_keeps_its_messages(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"

    # A version-1 file, as the version-1 plugin left it: its migration, one message.
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE lore_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")
    for statement in schema.V1:
        con.execute(statement)
    con.execute("INSERT INTO lore_meta VALUES ('schema_version', '1')")
    con.execute(
        """INSERT INTO messages (id, session_id, position, role, blocks, text, created_at, complete, origin)
        VALUES ('m1', 's-1', 0, 'user', '[{"type": "text", "text": "the heron nests"}]', 'the heron nests',
            1.0, true, 'request')"""
    )
    con.close()
    ids = ["m1"]

    async def use_v2() -> None:
        store = DuckDBStore(db)
        await store.open()
        try:
            assert (await store.stats())["schema_version"] == schema.SCHEMA_VERSION  # through 2
            assert [m.id for m in await store.session_messages("s-1")] == ids
            row = StoredDistillation(
                id=distillation_id("s-1", 0, ids),
                session_id="s-1",
                generation=0,
                text="- the heron log",
                source_ids=ids,
                created_at=1.0,
            )
            assert await store.write_distillation(row)
            assert {h.id for h in await store.search("heron")} == {ids[0], row.ref}
        finally:
            await store.close()

    asyncio.run(use_v2())
