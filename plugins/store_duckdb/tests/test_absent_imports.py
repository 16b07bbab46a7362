"""Store queries do not search ``sys.path`` for pandas when it is not installed (DuckDB's
client tries to import it on every parameterised query: see ``lore_store_duckdb/absent.py``)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from lore_store_duckdb.absent import AbsentModules
from lore_store_duckdb.store import DuckDBStore

# The path search itself, not the import system (where AbsentModules answers first).
pandas_installed = importlib.machinery.PathFinder.find_spec("pandas") is not None


@pytest.mark.skipif(pandas_installed, reason="pandas is installed: DuckDB imports it once")
def test_store_queries_never_search_the_path_for_pandas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    searched: list[str] = []
    path_search = importlib.machinery.PathFinder.find_spec

    def recording(fullname: str, path: Any = None, target: Any = None) -> Any:
        searched.append(fullname)
        return path_search(fullname, path, target)

    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", recording)

    async def queries() -> None:
        store = DuckDBStore(tmp_path / "lore.duckdb")
        await store.open()
        try:
            await store.set_state("s-1", "k", 1)
            for _ in range(5):
                assert await store.get_state("s-1", "k") == 1
                assert await store.get_state("s-2", "k", 0) == 0
        finally:
            await store.close()

    asyncio.run(queries())
    assert "pandas" not in searched


def test_an_absent_module_fails_at_once_as_a_missing_one_would() -> None:
    finder = AbsentModules(["lore_no_such_module"])
    with pytest.raises(ModuleNotFoundError) as raised:
        finder.find_spec("lore_no_such_module")
    assert raised.value.name == "lore_no_such_module"
    assert finder.find_spec("json") is None  # everything else is left to the other finders
