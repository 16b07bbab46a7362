"""The ``store-duckdb`` section reaches DuckDB, and its ranges are checked at load."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from lore_store_duckdb.config import SECTION, DuckDBConfig
from lore_store_duckdb.plugin import make_store
from lore_store_duckdb.store import DuckDBStore

from lore_core.config import ConfigError, load_config


def config_file(tmp_path: Path, section: dict[str, object]) -> dict[str, str]:
    path = tmp_path / ".lore.json"
    path.write_text(json.dumps({"store": {"path": str(tmp_path / "db")}, SECTION: section}))
    return {"LORE_CONFIG": str(path)}


def duckdb_setting(store: DuckDBStore, name: str) -> str:
    con = store._con
    assert con is not None
    return str(con.execute("SELECT current_setting(?)", [name]).fetchone()[0])


def opened_settings(store: DuckDBStore, *names: str) -> list[str]:
    async def read() -> list[str]:
        await store.open()
        try:
            return [duckdb_setting(store, name) for name in names]
        finally:
            await store.close()

    return asyncio.run(read())


def test_memory_limit_and_threads_reach_duckdb(tmp_path: Path) -> None:
    env = config_file(tmp_path, {"memoryLimitMb": 300, "threads": 1})
    config = load_config({SECTION: DuckDBConfig}, env=env)
    store = make_store(config)
    assert isinstance(store, DuckDBStore)
    memory_limit, threads = opened_settings(store, "memory_limit", "threads")
    assert threads == "1"
    # DuckDB reports the limit in its own units.
    assert memory_limit in {"300.0 MiB", "314.5 MB"}


def test_the_default_leaves_duckdbs_own_limit(tmp_path: Path) -> None:
    import duckdb

    (memory_limit,) = opened_settings(DuckDBStore(tmp_path / "db"), "memory_limit")
    plain = duckdb.connect(str(tmp_path / "plain.duckdb"))
    try:
        assert memory_limit == plain.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    finally:
        plain.close()


def test_out_of_range_settings_name_their_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"store-duckdb\.memoryLimitMb: must be"):
        load_config({SECTION: DuckDBConfig}, env=config_file(tmp_path, {"memoryLimitMb": -1}))
