"""A database of schema version 4 migrates to version 5 (BM25's counts): the passages already
stored are counted by the migration, so searches rank them as if written under version 5."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.schema import SCHEMA_VERSION
from lore_store_postgres.store import PostgresStore

from lore_core.testing.builders import answer, batch_of, exchange, text


def test_version_4_database_counts_its_passages_when_migrated(pg_dsn: str, tmp_path: Path) -> None:
    settings = PostgresConfig(dsn=pg_dsn, pool_size=2)
    history = batch_of(
        *(
            exchange([text("user", f"the widget build failed again, attempt {i}")], answer("retry it"),
                     session=f"s-{i}", at=100.0 + i)
            for i in range(4)
        ),
        exchange([text("user", "a deadlock in the zanzibar importer")], answer("lock order"),
                 session="z", at=200.0),
    )  # fmt: skip

    async def search(write: bool) -> list[tuple[str, float]]:
        store = PostgresStore(settings, journal_dir=tmp_path / "journal")
        await store.open()
        try:
            assert (await store.stats())["schema_version"] == SCHEMA_VERSION
            if write:
                await store.write(history)
            return [(h.id, round(h.score, 6)) for h in await store.search("widget zanzibar deadlock")]
        finally:
            await store.close()

    def counts() -> list[tuple[str, int, int]]:
        with psycopg.connect(pg_dsn) as con:
            return [tuple(r) for r in con.execute("SELECT * FROM passage_terms ORDER BY lexeme").fetchall()]

    written = asyncio.run(search(write=True))
    assert written[0][1] > 0 and len(written) == 5
    counted = counts()
    # As the version-4 plugin left the database: no counts, no passage lengths, version 4.
    with psycopg.connect(pg_dsn, autocommit=True) as con:
        con.execute("DROP TABLE passage_terms")
        con.execute("ALTER TABLE passages DROP COLUMN terms")
        con.execute("DROP FUNCTION lore_tsv_terms(tsvector)")
        con.execute("UPDATE lore_meta SET value = '4' WHERE key = 'schema_version'")

    assert asyncio.run(search(write=False)) == written
    assert counts() == counted
