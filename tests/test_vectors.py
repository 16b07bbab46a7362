"""Hybrid recall over the store: BM25 and vector lists fused by RRF, scoped, degrading to
full-text only (said in the notes) when there is no embedder or it cannot work."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.interfaces import EmbedderUnavailable, Tier
from lore_core.recall.fusion import RERANK_FULL_TEXT_SHARE
from lore_core.recall.ids import Scope
from lore_core.recall.sources import SearchFilter, StoreVectorSource, vector_index_name
from lore_core.recall.store_engine import recall, store_recall_engine
from lore_core.storage.records import ItemVectors, StoredDistillation, distillation_id
from lore_core.testing.builders import TopicEmbedder as KitTopicEmbedder
from lore_core.testing.builders import answer, batch_of, exchange, text

# Topics of a tiny "embedding model": synonyms land on the same axis, so vector search finds
# what full-text search cannot (no shared word).
_TOPICS = [
    {"cat", "cats", "feline", "kitten", "tabby"},
    {"database", "postgres", "sql", "deadlock", "migration"},
    {"deploy", "release", "rollout", "kubernetes", "ship"},
    {"wombat", "marsupial", "burrow"},
]


class TopicEmbedder(KitTopicEmbedder):
    """The test kit's topic embedder over this file's topics (a vector space of its own, so a
    model id of its own), recording the batches it was given."""

    model_id = "topics-animals-v1"
    TOPICS = tuple(frozenset(topic) for topic in _TOPICS)
    dimensions = len(TOPICS) + 1

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vector(t) for t in texts]


class BrokenEmbedder(TopicEmbedder):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise EmbedderUnavailable("the model file is missing")


async def embed_all(store: Any, embedder: TopicEmbedder) -> None:
    model = vector_index_name(embedder)
    while items := await store.pending_embeddings(model, limit=100):
        vectors = await embedder.embed([i.text for i in items])
        await store.write_vectors(
            model, embedder.dimensions, [ItemVectors(i, [v]) for i, v in zip(items, vectors, strict=True)]
        )


async def corpus(store: Any) -> StoredDistillation:
    await store.write(
        batch_of(
            exchange([text("user", "my tabby kitten sleeps all day")], answer("kittens do"), session="s-cat"),
            exchange(
                [text("user", "the postgres migration hit a deadlock")],
                answer("retry it with a lock timeout"),
                session="s-db",
            ),
            exchange(
                [text("user", "how do we ship the new rollout")],
                answer("kubernetes canary first"),
                session="s-ops",
                project="/work/beta",
            ),
        )
    )
    d = StoredDistillation(
        id=distillation_id("s-cat", 0, ["x"]),
        session_id="s-cat",
        generation=0,
        text="- user keeps a marsupial in a burrow",
        source_ids=["x"],
        project="/work/alpha",
        created_at=10.0,
    )
    await store.write_distillation(d)
    await store.archive_distillations([d.id])
    return d


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_vector_list_finds_what_full_text_cannot() -> None:
    async def main() -> None:
        store, embedder = MemoryStore(), TopicEmbedder()
        await store.open()
        await corpus(store)
        await embed_all(store, embedder)
        engine = store_recall_engine(store, embedder=embedder)
        # No stored text contains "feline": only the vector list can answer.
        response = await engine.search("feline", scope="project", project="/work/alpha")
        assert response.error is None and response.notes == []
        assert response.results and response.results[0].text == "[user]\nmy tabby kitten sleeps all day"
        assert response.results[0].id.startswith("t:")
        assert "full_text_only" not in response.metadata
        # The hit opens in full by its id.
        opened = await recall(engine, response.results[0].id)
        assert opened.results[0].text == "[user]\nmy tabby kitten sleeps all day"

    run(main())


def test_vector_hits_below_the_embedders_min_similarity_are_dropped() -> None:
    """Without a floor a query that matches little is answered with whatever the store holds
    (every vector has some similarity); an embedder's ``min_similarity`` drops those."""

    class WithFloor(TopicEmbedder):
        min_similarity = 0.5

    async def main() -> None:
        store = MemoryStore()
        await store.open()
        await corpus(store)
        await embed_all(store, TopicEmbedder())
        where = SearchFilter(Scope.PROJECT, project="/work/alpha")
        for embedder, unrelated_found in ((TopicEmbedder(), True), (WithFloor(), False)):
            source = StoreVectorSource(
                store, vector_index_name(embedder), min_similarity=embedder.min_similarity
            )
            hits = await source.search_vector(embedder.vector("feline"), where, 10)
            texts = {h.text for h in hits}
            assert "[user]\nmy tabby kitten sleeps all day" in texts
            assert ("[user]\nthe postgres migration hit a deadlock" in texts) is unrelated_found
            # The engine shows the match either way.
            engine = store_recall_engine(store, embedder=embedder)
            response = await engine.search("feline", scope="project", project="/work/alpha")
            assert response.results[0].text == "[user]\nmy tabby kitten sleeps all day"

    run(main())


def test_archived_distillations_are_vector_searchable() -> None:
    async def main() -> None:
        store, embedder = MemoryStore(), TopicEmbedder()
        await store.open()
        d = await corpus(store)
        await embed_all(store, embedder)
        engine = store_recall_engine(store, embedder=embedder)
        response = await engine.search("wombat", scope="session", session="s-cat")
        assert [r.id for r in response.results][:1] == [f"d:{d.id}:0"]
        assert response.results[0].source == "distillation"
        assert response.results[0].meta["session"] == "s-cat"

    run(main())


def test_hybrid_fuses_both_lists() -> None:
    async def main() -> None:
        store, embedder = MemoryStore(), TopicEmbedder()
        await store.open()
        await corpus(store)
        await embed_all(store, embedder)
        hybrid = store_recall_engine(store, embedder=embedder)
        text_only = store_recall_engine(store)
        # "deadlock database": BM25 matches one message; vectors rank both database messages.
        both = await hybrid.search("deadlock database", scope="project", project="/work/alpha")
        plain = await text_only.search("deadlock database", scope="project", project="/work/alpha")
        assert {r.text for r in plain.results} == {"[user]\nthe postgres migration hit a deadlock"}
        texts = [r.text for r in both.results]
        assert texts[0] == "[user]\nthe postgres migration hit a deadlock"  # first in both lists
        # Found by both lists, it scores by both (full text's share and the vectors' rest).
        assert both.results[0].score == pytest.approx(1.0)
        assert plain.results[0].score == pytest.approx(RERANK_FULL_TEXT_SHARE)

    run(main())


def test_vector_search_keeps_to_the_scope() -> None:
    async def main() -> None:
        store, embedder = MemoryStore(), TopicEmbedder()
        await store.open()
        await corpus(store)
        await embed_all(store, embedder)
        engine = store_recall_engine(store, embedder=embedder)
        # The release talk is in /work/beta: a project-scoped search elsewhere never sees it.
        alpha = await engine.search("deploy", scope="project", project="/work/alpha")
        assert all(r.meta["project"] == "/work/alpha" for r in alpha.results)
        assert not any("rollout" in r.text or "kubernetes" in r.text for r in alpha.results)
        beta = await engine.search("deploy", scope="project", project="/work/beta")
        assert beta.results and beta.results[0].meta["project"] == "/work/beta"
        session = await engine.search("kitten database", scope="session", session="s-db")
        assert session.results and {r.meta["session"] for r in session.results} == {"s-db"}

    run(main())


def test_no_embedder_means_full_text_only_said_in_the_notes() -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.open()
        await corpus(store)
        response = await store_recall_engine(store).search("kitten", project="/work/alpha")
        assert response.results
        assert any("full-text search only" in n for n in response.notes)
        assert response.metadata["full_text_only"] == "no embedding provider is installed"

    run(main())


def test_unavailable_embedder_degrades_to_full_text() -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.open()
        await corpus(store)
        engine = store_recall_engine(store, embedder=BrokenEmbedder())
        response = await engine.search("kitten", project="/work/alpha")
        assert response.error is None and response.results
        assert response.metadata["full_text_only"] == "the model file is missing"
        assert any("full-text search only" in n for n in response.notes)

    run(main())


def test_store_without_vectors_still_answers_full_text() -> None:
    class NoVectors(MemoryStore):
        tiers = MemoryStore.tiers - {Tier.VECTORS}

        async def nearest_passages(self, *args: Any, **kwargs: Any) -> list[Any]:
            raise AssertionError("the kernel used a tier the store does not declare")

    async def main() -> None:
        store = NoVectors()
        await store.open()
        await corpus(store)
        engine = store_recall_engine(store, embedder=TopicEmbedder())
        response = await engine.search("kitten", project="/work/alpha")
        assert response.error is None and response.results[0].text == "[user]\nmy tabby kitten sleeps all day"

    run(main())


@pytest.mark.parametrize("backend", ["memory", "duckdb"])
def test_hybrid_over_each_backend(backend: str, tmp_path: Path) -> None:
    if backend == "duckdb":
        duckdb_store = pytest.importorskip("lore_store_duckdb.store")
        store: Any = duckdb_store.DuckDBStore(tmp_path / "lore.duckdb")
    else:
        store = MemoryStore()

    async def main() -> None:
        embedder = TopicEmbedder()
        await store.open()
        try:
            await corpus(store)
            await embed_all(store, embedder)
            engine = store_recall_engine(store, embedder=embedder)
            response = await engine.search("feline", scope="project", project="/work/alpha")
            assert response.results[0].text == "[user]\nmy tabby kitten sleeps all day"
            marsupial = await engine.search("marsupial", scope="session", session="s-cat")
            assert marsupial.results[0].source == "distillation"
        finally:
            await store.close()

    run(main())


def test_full_text_lists_do_not_wait_for_the_query_embedding() -> None:
    """The query is embedded while the BM25 lists run: an embedder that only answers once a
    full-text search has started still gets its vector list in."""

    async def main() -> None:
        store, embedder = MemoryStore(), TopicEmbedder()
        await store.open()
        await corpus(store)
        await embed_all(store, embedder)
        started = asyncio.Event()
        original_search = store.search

        async def search(*args: Any, **kwargs: Any) -> Any:
            started.set()
            return await original_search(*args, **kwargs)

        store.search = search  # type: ignore[method-assign]

        class Waiting(TopicEmbedder):
            async def embed(self, texts: Sequence[str]) -> list[list[float]]:
                await asyncio.wait_for(started.wait(), 5)  # raises if BM25 waits for us
                return await super().embed(texts)

        engine = store_recall_engine(store, embedder=Waiting())
        response = await engine.search("kitten feline", scope="project", project="/work/alpha")
        assert "full_text_only" not in response.metadata, response.notes
        assert response.results[0].text == "[user]\nmy tabby kitten sleeps all day"

    run(main())
