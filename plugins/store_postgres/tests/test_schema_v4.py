"""A database of schema version 3 migrates to version 4 (an answer keeps the context layer its
request was sent at): the answers stored before read back with no layer (not known), and
answers written after the migration keep theirs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.schema import SCHEMA_VERSION
from lore_store_postgres.store import PostgresStore

from lore_core.model import Exchange
from lore_core.testing.builders import answer, batch_of, exchange, text


def test_version_3_database_reads_old_answers_without_a_layer(pg_dsn: str, tmp_path: Path) -> None:
    settings = PostgresConfig(dsn=pg_dsn, pool_size=2)
    old = exchange([text("user", "q1")], answer("a1"), session="s", at=100.0)
    old.context_layer = 2  # a version-3 database could not keep it: the column is dropped below

    async def write(ex: Exchange | None = None) -> list[tuple[str, int | None]]:
        store = PostgresStore(settings, journal_dir=tmp_path / "journal")
        await store.open()
        try:
            assert (await store.stats())["schema_version"] == SCHEMA_VERSION
            if ex is not None:
                await store.write(batch_of(ex))
            return [(m.text, m.context_layer) for m in await store.session_messages("s")]
        finally:
            await store.close()

    assert asyncio.run(write(old)) == [("q1", None), ("a1", 2)]
    # As the version-3 plugin left the database: no context_layer column (nor version 5's
    # BM25 counts), version 3.
    with psycopg.connect(pg_dsn, autocommit=True) as con:
        con.execute("DROP TABLE passage_terms")
        con.execute("ALTER TABLE passages DROP COLUMN terms")
        con.execute("DROP FUNCTION lore_tsv_terms(tsvector)")
        con.execute("ALTER TABLE messages DROP COLUMN context_layer")
        con.execute("UPDATE lore_meta SET value = '3' WHERE key = 'schema_version'")

    new = exchange(
        [text("user", "q1"), text("assistant", "a1"), text("user", "q2")], answer("a2"), session="s", at=200.0
    )
    new.context_layer = 1
    assert asyncio.run(write(new)) == [("q1", None), ("a1", None), ("q2", None), ("a2", 1)]
