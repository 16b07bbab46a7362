"""lore-store-postgres passes the kernel's store conformance suite, on a real server: once
with pgvector's HNSW index, once with the exact vector search a server without pgvector gets."""

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
    pgvector = True

    @pytest.fixture
    def make_store(self, pg_dsn: str, tmp_path: Path) -> Callable[[], Store]:
        # The HNSW index made with the table, so the suite's few vectors go through it
        # (tests/test_vectors_postgres.py covers the index built later, in bulk).
        settings = PostgresConfig(dsn=pg_dsn, pool_size=4, pgvector=self.pgvector, hnsw_min_vectors=0)
        return lambda: PostgresStore(settings, journal_dir=tmp_path / "journal")

    def test_health_says_which_vector_search(self, make_store: Callable[[], Store]) -> None:
        async def body(store: Store) -> None:
            health = store.health()
            assert health["ok"] and health["detail"].startswith("PostgreSQL ")
            if self.pgvector:
                assert "HNSW" in health["vectors"]
            else:
                assert health["vectors"].startswith("exact")
            assert (await store.vector_stats("never-written"))["never-written"]["index"] is None

        self.run(make_store, body)
        closed = make_store()
        assert closed.health()["ok"] is False

    def test_vector_index_kind(self, make_store: Callable[[], Store]) -> None:
        """The model's table is made with the kind the server allows, and says so."""

        async def body(store: Store) -> None:
            await store.write(self._corpus())
            await self._embed_pending(store)
            stats = (await store.vector_stats(self.MODEL))[self.MODEL]
            assert stats["index"] == ("hnsw" if self.pgvector else "exact")
            assert stats["vectors"] == 6

        self.run(make_store, body)


class TestPostgresStoreExactVectors(TestPostgresStore):
    """The suite's tests that store or search vectors (conftest.py deselects the rest, which
    the class above runs on the same code)."""

    pgvector = False
    only_tests_about = ("vector", "facets", "forget", "health")
