"""A new database takes every migration in one transaction: its schema is the one a database
migrated a version at a time has, and its file holds it with nothing left in the WAL."""

from __future__ import annotations

from pathlib import Path

import duckdb
from lore_store_duckdb import schema

CATALOG = [
    "SELECT table_name, column_name, column_index, data_type, column_default, is_nullable "
    "FROM duckdb_columns() WHERE NOT internal ORDER BY ALL",
    "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints() ORDER BY ALL",
    "SELECT index_name, table_name, is_unique, sql FROM duckdb_indexes() ORDER BY ALL",
    "SELECT sequence_name, start_value, increment_by FROM duckdb_sequences() ORDER BY ALL",
    "SELECT table_name, sql FROM duckdb_tables() ORDER BY ALL",
    "SELECT key, value FROM lore_meta ORDER BY ALL",
]


def catalog(path: Path) -> list[list[tuple[object, ...]]]:
    con = duckdb.connect(str(path))
    try:
        return [con.execute(query).fetchall() for query in CATALOG]
    finally:
        con.close()


def test_a_new_database_has_the_schema_of_one_migrated_version_by_version(tmp_path: Path) -> None:
    new = tmp_path / "new.duckdb"
    con = duckdb.connect(str(new))
    assert schema.migrate(con) == 0
    con.close()
    assert not Path(str(new) + ".wal").exists()  # checkpointed at its commit

    # Version 1 as the first release made it, then each later version in its own transaction.
    stepped = tmp_path / "stepped.duckdb"
    con = duckdb.connect(str(stepped))
    schema.current_version(con)
    for statement in schema.MIGRATIONS[0]:
        con.execute(statement)
    con.execute("INSERT INTO lore_meta VALUES ('schema_version', '1')")
    assert schema.migrate(con) == 1
    con.close()

    found = catalog(new)
    assert found == catalog(stepped)
    assert found[-1] == [("schema_version", str(schema.SCHEMA_VERSION))]
    assert {"messages", "sessions", "projects"} <= {row[0] for row in found[0]}
