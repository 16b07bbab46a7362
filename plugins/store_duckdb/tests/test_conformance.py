"""lore-store-duckdb passes the kernel's store conformance suite."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lore_store_duckdb.store import DuckDBStore

from lore_core.interfaces import Store
from lore_core.testing.conformance.store import StoreConformance


class TestDuckDBStore(StoreConformance):
    persistent = True

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], Store]:
        return lambda: DuckDBStore(tmp_path / "data" / "lore.duckdb")
