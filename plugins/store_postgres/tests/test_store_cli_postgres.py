"""``lore store migrate`` and ``lore store copy`` against a real PostgreSQL server, through
real ``lore`` processes: a DuckDB file copied into PostgreSQL (when lore-store-duckdb is
installed), one database copied into another, every tier counted on both sides and equal
read back, a second copy adding nothing, the password never on the command line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.schema import MIGRATIONS, SCHEMA_VERSION
from lore_store_postgres.store import PostgresStore
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lore_core.config import LoreConfig
from lore_core.interfaces import Store
from lore_core.plugins import Registry, make_plugin_manager
from lore_core.testing.copying import fill_every_tier, picture
from lore_core.testing.net import free_port, refusing_url


def lore(tmp_path: Path, store: dict[str, Any], *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / ".lore.json"
    config.write_text(json.dumps({"store": store, "server": {"port": free_port()}}))
    env = {k: v for k, v in os.environ.items() if k not in ("LORE_DB_PATH", "LORE_STORE")}
    env["LORE_CONFIG"] = str(config)
    return subprocess.run(
        [sys.executable, "-m", "lore_core.cli", *argv], capture_output=True, text=True, env=env, timeout=300
    )


def pg_store(dsn: str) -> PostgresStore:
    return PostgresStore(PostgresConfig(dsn=dsn), journal_dir=None)


def with_store(make: Any, body: Any) -> Any:
    async def main() -> Any:
        store: Store = make()
        await store.open()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


async def fill(store: Store) -> dict[str, Any]:
    await fill_every_tier(store)
    return await picture(store)


async def read(store: Store) -> dict[str, Any]:
    assert await store.search("deploy billing"), "the copy's full-text index finds nothing"
    return await picture(store)


@pytest.fixture
def other_dsn(pg_server: str) -> Iterator[str]:
    """A second empty database on the same server."""
    name = f"lore_copy_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as con:
        con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        con.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(pg_server)
    params["dbname"] = name
    try:
        yield make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
    finally:
        with psycopg.connect(pg_server, autocommit=True) as con:
            con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_migrate_on_postgres_reports_the_versions(tmp_path: Path, pg_dsn: str) -> None:
    config = {"backend": "postgres", "path": pg_dsn}
    first = lore(tmp_path, config, "store", "migrate", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) | {"location": None} == {
        "backend": "postgres",
        "location": None,
        "versioned": True,
        "before": 0,
        "after": SCHEMA_VERSION,
        "applied": list(range(1, SCHEMA_VERSION + 1)),
    }
    again = lore(tmp_path, config, "store", "migrate")
    assert again.returncode == 0 and f"up to date: schema version {SCHEMA_VERSION}" in again.stdout


def test_migrate_applies_what_a_version_1_database_lacks(tmp_path: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as con:
        con.execute("CREATE TABLE lore_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for statement in MIGRATIONS[0]:
            con.execute(statement)  # type: ignore[arg-type]  # the plugin's literal SQL
        con.execute("INSERT INTO lore_meta VALUES ('schema_version', '1')")
    done = lore(tmp_path, {"backend": "postgres", "path": pg_dsn}, "store", "migrate")
    assert done.returncode == 0, done.stderr
    applied = ", ".join(str(v) for v in range(2, SCHEMA_VERSION + 1))
    assert f"migrated from schema version 1 to {SCHEMA_VERSION} (applied {applied})" in done.stdout


def test_copy_duckdb_file_into_postgres(tmp_path: Path, pg_dsn: str) -> None:
    # The DuckDB store through the plugin registry, as lore opens it: a plugin never imports
    # another plugin (tests/test_import_rules.py), and this one must run installed alone.
    stores = Registry.collect(make_plugin_manager()).stores
    if "duckdb" not in stores:
        pytest.skip("lore-store-duckdb is not installed")
    source = tmp_path / "lore.duckdb"
    config = LoreConfig()
    config.store.backend, config.store.path = "duckdb", str(source)
    expected = with_store(lambda: stores["duckdb"](config), fill)
    done = lore(tmp_path, {"path": str(source)}, "store", "copy", "--to", f"postgres:{pg_dsn}", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (
        report["ok"]
        and report["source"].startswith("duckdb ")
        and report["destination"].startswith("postgres ")
    )
    assert all(t["source"] == t["destination"] > 0 for t in report["tiers"])
    assert with_store(lambda: pg_store(pg_dsn), read) == expected

    # Resent: refused without --merge, and with it nothing is added.
    refused = lore(tmp_path, {"path": str(source)}, "store", "copy", "--to", f"postgres:{pg_dsn}")
    assert refused.returncode == 2 and "already holds data" in refused.stderr
    again = lore(
        tmp_path, {"path": str(source)}, "store", "copy", "--to", f"postgres:{pg_dsn}", "--merge", "--json"
    )
    assert again.returncode == 0, again.stderr
    written = {t["tier"]: t["written"] for t in json.loads(again.stdout)["tiers"]}
    assert written["messages"] == written["knowledge versions"] == written["events"] == 0
    assert with_store(lambda: pg_store(pg_dsn), read) == expected


# Slow: two lore processes and a database filled with every tier, copied into a second one
# (the copy from a DuckDB file above keeps lore store copy in the fast run).
@pytest.mark.slow
def test_copy_postgres_database_into_another(tmp_path: Path, pg_dsn: str, other_dsn: str) -> None:
    expected = with_store(lambda: pg_store(pg_dsn), fill)
    # The configured store is the source; the destination named by its DSN.
    config = {"backend": "postgres", "path": pg_dsn}
    done = lore(tmp_path, config, "store", "copy", "--to", f"postgres:{other_dsn}")
    assert done.returncode == 0, done.stderr
    assert "MISMATCH" not in done.stdout and "vectors: not copied" in done.stdout
    assert with_store(lambda: pg_store(other_dsn), read) == expected
    # A server that is not there: one line, exit 3, no traceback.
    with refusing_url() as url:
        down = url.replace("http://", "postgresql://lore@") + "/lore?connect_timeout=1"
        failed = lore(tmp_path, config, "store", "copy", "--to", down)
    assert failed.returncode == 3 and "cannot open the destination" in failed.stderr
    assert "Traceback" not in failed.stderr
