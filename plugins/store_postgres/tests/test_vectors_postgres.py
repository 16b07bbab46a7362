"""pgvector's HNSW under the filters recall uses: a session's or a project's rows fill the
limit (PostgreSQL's planner answers a selective filter from the session and project indexes,
exactly, and a broad one from the HNSW index, where pgvector 0.8's iterative scan keeps going
until enough rows pass), and the approximate index agrees with the exact search on a store of
2,000 passages (measured recall@10: 1.0). The index is built in bulk by ``optimize_vectors``
once the table holds ``hnswMinVectors`` vectors; before, the same column is searched exactly."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.store import PostgresStore

from lore_core.storage.records import ItemVectors
from lore_core.testing.builders import batch_of, exchange, text

DIMS = 16
SESSIONS = 40
PER_SESSION = 50


def unit(rng: random.Random) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(DIMS)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


@pytest.mark.slow
def test_hnsw_with_filters_matches_the_exact_search(pg_dsn: str, tmp_path: Path) -> None:
    rng = random.Random(47)
    batches = [
        exchange([text("user", f"note {s}-{i}")], session=f"s-{s}", project=f"/p/{s % 4}", at=1000.0 + i)
        for s in range(SESSIONS)
        for i in range(PER_SESSION)
    ]
    queries = [unit(rng) for _ in range(8)]

    async def fill_and_ask(pgvector: bool) -> list[tuple[str, ...]]:
        settings = PostgresConfig(dsn=pg_dsn, pgvector=pgvector, hnsw_min_vectors=400)
        store = PostgresStore(settings, journal_dir=tmp_path / "j")
        await store.open()
        try:
            model = f"m-{pgvector}"
            if (await store.stats())["messages"] == 0:
                await store.write(batch_of(*batches))
            vectors = random.Random(7)  # the same vectors for both indexes
            written = 0
            while items := await store.pending_embeddings(model, limit=500):
                await store.write_vectors(model, DIMS, [ItemVectors(i, [unit(vectors)]) for i in items])
                written += len(items)
                await store.optimize_vectors(model)
                # Built by the first upkeep past the threshold, not before.
                built = pgvector and written >= 400
                assert (await store.vector_stats(model))[model]["index"] == ("hnsw" if built else "exact")
            # And one per project (4 of 500 vectors each), which the project scope below uses.
            assert (await store.vector_stats(model))[model]["project_indexes"] == (4 if pgvector else 0)
            answers = []
            for q in queries:
                for scope in ({}, {"session_id": "s-3"}, {"project": "/p/2"}):
                    hits = await store.vector_search(model, q, limit=10, **scope)  # type: ignore[arg-type]
                    # A filter keeping 50 rows of 2,000 still fills the limit.
                    assert len(hits) == 10, scope
                    answers.append(tuple(h.id for h in hits))
            return answers
        finally:
            await store.close()

    exact = asyncio.run(fill_and_ask(False))
    approximate = asyncio.run(fill_and_ask(True))
    # Recall@10 of the approximate index against the exact answers, over every query and scope.
    found = sum(len(set(a) & set(e)) for a, e in zip(approximate, exact, strict=True))
    print(f"HNSW recall@10 against the exact search: {found / (10 * len(exact)):.3f}")
    assert found / (10 * len(exact)) >= 0.9
