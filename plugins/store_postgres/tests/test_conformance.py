"""lore-store-postgres passes the kernel's store conformance suite, on a real server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.store import PostgresStore

from lore_core.interfaces import Store
from lore_core.testing.conformance.store import StoreConformance


class TestPostgresStore(StoreConformance):
    persistent = True

    @pytest.fixture
    def make_store(self, pg_dsn: str, tmp_path: Path) -> Callable[[], Store]:
        settings = PostgresConfig(dsn=pg_dsn, pool_size=4)
        return lambda: PostgresStore(settings, journal_dir=tmp_path / "journal")
