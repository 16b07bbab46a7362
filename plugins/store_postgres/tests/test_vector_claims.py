"""The vector indexers of several gateways on one database share the work: each store's
``pending_embeddings`` claims the items it returns, so two gateways' indexers embed
different items (each item once), the watermark moves only over items whose vectors are
written whatever order the gateways finish in, and the items a gateway claimed and never
wrote (it died) go to another once the claim runs out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from lore_store_postgres import store as store_module
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.store import PostgresStore

from lore_core.recall.indexer import VectorIndexer
from lore_core.recall.sources import vector_index_name
from lore_core.storage.records import EmbeddingItem, ItemVectors
from lore_core.testing.builders import TopicEmbedder, batch_of, exchange, text

ITEMS = 60  # one message each


class CountingEmbedder(TopicEmbedder):
    """The topic model, counting the texts it embeds; it yields to the event loop on every
    call, as a real model in its thread does, so two indexers take turns."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        await asyncio.sleep(0.01)
        return await super().embed(texts)


def gateway_store(dsn: str) -> PostgresStore:
    """The store one gateway opens: its own pool, its own claims."""
    return PostgresStore(PostgresConfig(dsn=dsn, pool_size=2), journal_dir=None)


async def fill(store: PostgresStore) -> None:
    await store.write(
        batch_of(
            *[
                exchange([text("user", f"deploy step {i} of the postgres migration")], session=f"s-{i % 6}")
                for i in range(ITEMS)
            ]
        )
    )


def test_two_gateways_indexers_embed_each_item_once(pg_dsn: str) -> None:
    async def main() -> None:
        one, two = gateway_store(pg_dsn), gateway_store(pg_dsn)
        await one.open()
        await two.open()
        try:
            await fill(one)
            embedders = (CountingEmbedder(), CountingEmbedder())
            indexers = [VectorIndexer(s, e, batch_size=8) for s, e in zip((one, two), embedders, strict=True)]
            done = await asyncio.gather(*(i.run_until_idle() for i in indexers))
            # Every item indexed by one of them, none by both, and both did some.
            assert sum(done) == ITEMS and all(done), done
            texts = embedders[0].texts + embedders[1].texts
            assert len(texts) == len(set(texts)) == ITEMS
            model = vector_index_name(embedders[0])
            stats = (await two.vector_stats(model))[model]
            assert (stats["vectors"], stats["pending"]) == (ITEMS, 0)
            assert await one.pending_embeddings(model) == []
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


def test_the_watermark_waits_for_a_gateway_still_embedding(pg_dsn: str) -> None:
    model = "topics-v1@test"
    embedder = TopicEmbedder()

    def vectors(items: Sequence[EmbeddingItem]) -> list[ItemVectors]:
        return [ItemVectors(i, [embedder.vector(i.text)]) for i in items]

    async def main() -> None:
        one, two = gateway_store(pg_dsn), gateway_store(pg_dsn)
        await one.open()
        await two.open()
        try:
            await fill(one)
            first = await one.pending_embeddings(model, limit=20)
            second = await two.pending_embeddings(model, limit=20)
            assert {i.id for i in first}.isdisjoint({i.id for i in second}) and len(second) == 20
            assert max(i.cursor for i in first) < min(i.cursor for i in second)
            # The later batch is written first: the watermark stays below the earlier one,
            # still pending (not skipped).
            await two.write_vectors(model, embedder.dimensions, vectors(second))
            assert (await one.vector_stats(model))[model]["pending"] == ITEMS
            # Asking again gives a store back what it claimed (up to the next claimed range).
            again = await one.pending_embeddings(model, limit=200)
            assert [i.id for i in again] == [i.id for i in first]
            await one.write_vectors(model, embedder.dimensions, vectors(again))
            # The watermark is past both batches now; the rest is nobody's yet.
            assert (await two.vector_stats(model))[model]["pending"] == ITEMS - 40
            rest = await two.pending_embeddings(model, limit=200)
            assert len(rest) == ITEMS - 40 and min(i.cursor for i in rest) > max(i.cursor for i in second)
            await two.write_vectors(model, embedder.dimensions, vectors(rest))
            stats = (await two.vector_stats(model))[model]
            assert (stats["vectors"], stats["pending"]) == (ITEMS, 0)
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


def test_a_dead_gateways_claim_runs_out(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "_CLAIM_SECONDS", 1.0)
    model = "topics-v1@test"
    embedder = TopicEmbedder()

    async def main() -> None:
        dead, alive = gateway_store(pg_dsn), gateway_store(pg_dsn)
        await dead.open()
        await alive.open()
        try:
            await fill(alive)
            claimed = await dead.pending_embeddings(model, limit=ITEMS)
            assert len(claimed) == ITEMS
            # The gateway dies with the batch in hand (its pool gone, nothing given back).
            pool, dead._pool = dead._pool, None
            assert pool is not None
            pool.close()
            assert await alive.pending_embeddings(model) == []
            await asyncio.sleep(1.2)
            taken = await alive.pending_embeddings(model, limit=ITEMS)
            assert [i.id for i in taken] == [i.id for i in claimed]
            await alive.write_vectors(
                model, embedder.dimensions, [ItemVectors(i, [embedder.vector(i.text)]) for i in taken]
            )
            assert (await alive.vector_stats(model))[model]["pending"] == 0
        finally:
            await alive.close()

    asyncio.run(main())
