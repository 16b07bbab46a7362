"""A database of schema version 8 migrates to version 9 (an answer keeps the context layer its
request was sent at): the answers stored before read back with no layer (not known), and
answers written after the migration keep theirs; a process killed right after migrating
leaves a store that opens."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
from lore_store_duckdb import schema
from lore_store_duckdb.store import DuckDBStore

from lore_core.testing.builders import answer, batch_of, exchange, text


def version_8_database(db: Path) -> None:
    """A store as the version-8 plugin left it, holding one answer."""
    old = exchange([text("user", "q1")], answer("a1"), session="s", at=100.0)
    old.context_layer = 2  # a version-8 store could not keep it: the column is dropped below

    async def write_with_version_8() -> None:
        store = DuckDBStore(db)
        await store.open()
        try:
            await store.write(batch_of(old))
        finally:
            await store.close()

    asyncio.run(write_with_version_8())
    # As the version-8 plugin left the file: no context_layer column, version 8.
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE messages DROP COLUMN context_layer")
    con.execute("UPDATE lore_meta SET value = '8' WHERE key = 'schema_version'")
    con.execute("CHECKPOINT")
    con.close()


def test_version_8_database_reads_old_answers_without_a_layer(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"
    version_8_database(db)

    async def use_version_9() -> list[tuple[str, int | None]]:
        store = DuckDBStore(db)
        await store.open()
        try:
            assert (await store.stats())["schema_version"] == schema.SCHEMA_VERSION
            new = exchange(
                [text("user", "q1"), text("assistant", "a1"), text("user", "q2")],
                answer("a2"),
                session="s",
                at=200.0,
            )
            new.context_layer = 1
            await store.write(batch_of(new))
            return [(m.text, m.context_layer) for m in await store.session_messages("s")]
        finally:
            await store.close()

    assert asyncio.run(use_version_9()) == [("q1", None), ("a1", None), ("q2", None), ("a2", 1)]


def test_a_process_killed_after_migrating_leaves_a_store_that_opens(tmp_path: Path) -> None:
    """DuckDB cannot replay version 9's ALTER TABLE from its WAL (the messages table has a
    sequence default): the migration must be checkpointed, not left in the WAL for a killed
    process's successor to replay."""
    db = tmp_path / "lore.duckdb"
    version_8_database(db)
    script = f"""
        import asyncio, os
        from lore_store_duckdb.store import DuckDBStore
        from lore_core.testing.builders import answer, batch_of, exchange, text

        async def main():
            store = DuckDBStore({str(db)!r})
            await store.open()
            new = exchange([text("user", "q9")], answer("a9"), session="after", at=300.0)
            new.context_layer = 4
            await store.write(batch_of(new))
            os._exit(0)  # killed: no close, no checkpoint

        asyncio.run(main())
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    async def read() -> list[tuple[str, int | None]]:
        store = DuckDBStore(db)
        await store.open()
        try:
            return [(m.text, m.context_layer) for m in await store.session_messages("after")]
        finally:
            await store.close()

    assert asyncio.run(read()) == [("q9", None), ("a9", 4)]
