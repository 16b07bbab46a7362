"""The vector list's passages are read only when they can reach the answer.

The store's vector source finds passages first and reads their texts after
(:class:`~lore_core.recall.sources.PassageVectorSource`); the engine reads those the full-text
hits do not already outrank. The answer must be the one reading every passage gives: same
ids, texts, scores and order, for every query; and the reads must actually be fewer.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Sequence
from typing import Any

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.interfaces import Embedder
from lore_core.recall.engine import RecallEngine
from lore_core.recall.ids import Kind
from lore_core.recall.indexer import embedded_passages, embedded_texts, item_passages
from lore_core.recall.sources import SearchFilter, SourceHit, vector_index_name
from lore_core.recall.store_engine import store_recall_engine
from lore_core.storage.records import ItemVectors, PassageRef, SearchHit, StoredDistillation, distillation_id
from lore_core.testing.builders import answer, batch_of, exchange, text, tool_call, tool_result

WORDS = (
    "parser lexer token cache eviction shard replica quorum retry backoff timeout socket "
    "buffer flush commit rollback schema index vacuum planner cursor worker queue lease "
    "deadline budget render layout widget router handler session cookie header proxy"
).split()


class HashEmbedder(Embedder):
    """A deterministic stand-in for a model with varied neighbours: each word a fixed random
    direction, a text the normalised sum of its words'."""

    name = "hash"
    model_id = "hash-16"
    dimensions = 16

    def vector(self, text: str) -> list[float]:
        total = [0.0] * self.dimensions
        for word in text.lower().split():
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
            rng = random.Random(seed)
            for i in range(self.dimensions):
                total[i] += rng.gauss(0.0, 1.0)
        norm = sum(x * x for x in total) ** 0.5 or 1.0
        return [x / norm for x in total]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def health(self) -> dict[str, Any]:
        return {"ok": True, "detail": "hash"}


class CountingStore(MemoryStore):
    """A memory store that counts the passages its vector searches find and read."""

    def __init__(self) -> None:
        super().__init__()
        self.found = 0
        self.read: list[int] = []
        self.fail_reads = False

    async def nearest_passages(self, *args: Any, **kwargs: Any) -> list[PassageRef]:
        refs = await super().nearest_passages(*args, **kwargs)
        self.found += len(refs)
        return refs

    async def read_passages(self, refs: Sequence[PassageRef]) -> list[SearchHit]:
        if self.fail_reads:
            raise RuntimeError("the vector table is gone")
        self.read.append(len(refs))
        return await super().read_passages(refs)


class ReadsEverything:
    """The store's vector source without its two steps: every passage found is read."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> list[SourceHit]:
        return list(await self.inner.search_vector(vector, where, limit))


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def fill(store: MemoryStore, embedder: HashEmbedder) -> None:
    """Sessions shaped like coding work: requests, answers, calls and outputs (some long,
    cut into several passages; some repeated word for word), and a distillation."""
    rng = random.Random(5)
    log_lines = [sentence(rng, 12) for _ in range(40)]
    repeated = "\n".join(log_lines[:6])
    exchanges = []
    for s in range(24):
        project = f"/work/p{s % 3}"
        messages = [text("user", sentence(rng, 10))]
        for c in range(3):
            call = f"call-{s}-{c}"
            messages.append(
                tool_call("Bash", call, {"command": f"run {rng.choice(WORDS)}"}, say=sentence(rng, 8))
            )
            kind = rng.random()
            output = (
                repeated
                if kind < 0.25
                else "\n".join(rng.choice(log_lines) for _ in range(rng.randint(40, 120)))
                if kind < 0.5
                else sentence(rng, 20)
            )
            messages.append(tool_result(call, output))
        exchanges.append(exchange(messages, answer(sentence(rng, 15)), session=f"s-{s}", project=project))
    await store.write(batch_of(*exchanges))
    await store.write_distillation(
        StoredDistillation(
            id=distillation_id("s-1", 0, ["x"]),
            session_id="s-1",
            generation=0,
            text="\n".join(f"- {sentence(rng, 9)}" for _ in range(30)),
            source_ids=["x"],
            project="/work/p1",
            created_at=10.0,
        )
    )
    model = vector_index_name(embedder)
    while items := await store.pending_embeddings(model, limit=100):
        done = []
        for item in items:
            chosen = embedded_texts(item, embedded_passages(item_passages(item)))
            vectors = await embedder.embed([t for _, t in chosen])
            done.append(ItemVectors(item, vectors, [index for index, _ in chosen]))
        await store.write_vectors(model, embedder.dimensions, done)


def engines(store: MemoryStore, embedder: HashEmbedder) -> tuple[RecallEngine, RecallEngine, RecallEngine]:
    """The engine as the product builds it; one whose vector source reads every hit as it
    finds it (the search before the two steps); one told to read every passage."""
    two_steps = store_recall_engine(store, embedder=embedder)
    eager = store_recall_engine(store, embedder=embedder)
    eager._vector[Kind.MESSAGE] = [ReadsEverything(s) for s in eager._vector[Kind.MESSAGE]]
    return two_steps, eager, store_recall_engine(store, embedder=embedder, read_every_passage=True)


def shown(results: Sequence[Any]) -> list[tuple[str, str, float, Any]]:
    return [(r.id, r.text, round(r.score, 9), r.meta.get("passages")) for r in results]


@pytest.mark.slow
def test_the_answer_is_the_one_reading_every_passage_gives_and_fewer_are_read() -> None:
    async def main() -> None:
        store, embedder = CountingStore(), HashEmbedder()
        await store.open()
        await fill(store, embedder)
        two_steps, eager, reads_all = engines(store, embedder)
        rng = random.Random(11)
        queries = [sentence(rng, rng.choice((1, 2, 3, 5))) for _ in range(120)]
        queries += ["which test failed first", "what did I ask about the parser", "the last commit"]
        found = read = 0
        for n, query in enumerate(queries):
            for scope, where in (
                ("project", {"project": f"/work/p{n % 3}"}),
                ("session", {"session": "s-4"}),
            ):
                for limit in (3, 10):
                    store.found, store.read = 0, []
                    mine = await two_steps.search(query, scope=scope, limit=limit, **where)
                    found, read = found + store.found, read + sum(store.read)
                    full = await eager.search(query, scope=scope, limit=limit, **where)
                    assert mine.error is None and mine.notes == full.notes == []
                    assert shown(mine.results) == shown(full.results), (query, scope, limit)
                    store.found, store.read = 0, []
                    everything = await reads_all.search(query, scope=scope, limit=limit, **where)
                    assert shown(everything.results) == shown(full.results)
                    assert sum(store.read) <= store.found  # each found passage read once at most
                    assert mine.results, query
        # The point of the two steps: most of what the vector lists find is never read.
        assert read < found / 2, (read, found)

    asyncio.run(main())


def test_a_vector_source_that_cannot_read_leaves_the_full_text_answer_and_says_so() -> None:
    async def main() -> None:
        store, embedder = CountingStore(), HashEmbedder()
        await store.open()
        await fill(store, embedder)
        store.fail_reads = True
        engine = store_recall_engine(store, embedder=embedder)
        response = await engine.search("parser lexer token", scope="project", project="/work/p0")
        assert response.error is None and response.results
        assert any("vector search" in n and "the vector table is gone" in n for n in response.notes)
        assert all(r.id.startswith(("t:", "d:")) for r in response.results)

    asyncio.run(main())
