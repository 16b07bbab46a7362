"""The background vector indexer: passages, batches, resuming after failures, model and
passage-rule changes, and the gateway embedding what it stores so that recall finds it by
meaning."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core import hookimpl
from lore_core.builtin.memory_store import MemoryStore
from lore_core.interfaces import EmbedderUnavailable
from lore_core.plugins import Factory
from lore_core.recall import indexer as indexer_module
from lore_core.recall.ids import Scope
from lore_core.recall.indexer import VectorIndexer, embedded_passages, embedded_texts
from lore_core.recall.sources import SearchFilter, StoreVectorSource, vector_index_name
from lore_core.recall.store_engine import store_recall_engine
from lore_core.recall.tool import format_response
from lore_core.storage.facets import MAX_FACETS_PER_ITEM, TOOL_EMBED_CHARS, embedded_body
from lore_core.storage.passages import PASSAGE_RULES, VECTOR_RULES, cut
from lore_core.storage.records import (
    VECTOR_MESSAGE,
    EmbeddingItem,
    ItemVectors,
    StoredDistillation,
    distillation_id,
)
from lore_core.testing.builders import answer, batch_of, exchange, text
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer
from tests.test_vectors import BrokenEmbedder, TopicEmbedder


def run(coro: Any) -> Any:
    return asyncio.run(coro)


MODEL = vector_index_name(TopicEmbedder())
MODEL2 = MODEL.replace(TopicEmbedder.model_id, "topics-v2")


class FlakyEmbedder(TopicEmbedder):
    """Fails its first ``failures`` calls with an ordinary error."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("inference thread crashed")
        return await super().embed(texts)


async def filled_store(sessions: int = 3) -> MemoryStore:
    store = MemoryStore()
    await store.open()
    for i in range(sessions):
        await store.write(
            batch_of(
                exchange([text("user", f"my kitten number {i}")], answer("cats are great"), session=f"s-{i}")
            )
        )
    return store


def _lines(word: str, count: int) -> str:
    return "\n".join(f"{word} {i} " + "and some more words on this line" * 2 for i in range(count))


def test_embedded_passages_keep_head_and_tail() -> None:
    passages = cut("user", [{"type": "text", "text": _lines("w", 200)}])
    assert len(passages) > 10
    capped = embedded_passages(passages, 4)
    assert [p.index for p in capped] == [0, 1, 2, len(passages) - 1]
    assert [p.index for p in embedded_passages(passages, 1)] == [0]
    assert embedded_passages(passages, 1000) == passages


def test_a_tool_output_is_embedded_by_its_first_piece() -> None:
    """What was said is embedded whole; a tool call or output by its first piece, cut to
    TOOL_EMBED_CHARS (the rest is found by its words)."""
    blocks = [
        {"type": "text", "text": "Running the suite now."},
        {
            "type": "tool_call",
            "tool_name": "Bash",
            "tool_call_id": "c1",
            "tool_input": {"command": "go test ./..."},
        },
    ]
    said = cut("assistant", blocks)
    output = cut("user", [{"type": "tool_result", "tool_call_id": "c1", "text": _lines("ok", 200)}])
    assert len(output) > 3
    chosen = embedded_passages([*said, *output])
    assert [p.index for p in chosen] == [*(p.index for p in said), output[0].index]
    texts = embedded_texts(EmbeddingItem(VECTOR_MESSAGE, "m1", "", role="user"), chosen)
    assert all(len(body) <= TOOL_EMBED_CHARS for _, body in texts if body.startswith("[tool "))
    assert embedded_body(output[1]) is None and embedded_body(said[0]) == said[0].text


def test_recall_shows_the_capped_tail_passage_that_matched() -> None:
    """Capped at four passages, the text's last one is kept; recall finds it by meaning and
    shows that passage, not the text's start."""

    async def main() -> None:
        store = MemoryStore()
        await store.open()
        long_text = "\n".join([_lines("kitten", 20), _lines("filler", 200), _lines("database", 20)])
        await store.write(batch_of(exchange([text("user", long_text)], answer("ok"), session="s-long")))
        embedder = TopicEmbedder()
        await VectorIndexer(store, embedder, max_chunks=4).run_until_idle()
        engine = store_recall_engine(store, embedder=embedder)
        response = await engine.search("postgres")  # no word of the text: found by meaning only
        top = response.results[0]
        assert "database 19" in top.text and "kitten 0" not in top.text
        assert (
            top.id.startswith("t:")
            and top.meta["passage"] == len(cut("user", [{"type": "text", "text": long_text}])) - 1
        )
        shown = format_response(response)
        assert "database 19" in shown and "kitten 0" not in shown

    run(main())


def test_run_until_idle_embeds_everything_with_progress() -> None:
    async def main() -> None:
        store = await filled_store(5)
        d = StoredDistillation(
            id=distillation_id("s-0", 0, ["a"]), session_id="s-0", generation=0, text="- kitten facts",
            source_ids=["a"], project="/work/alpha", created_at=5.0,
        )  # fmt: skip
        await store.write_distillation(d)
        embedder = TopicEmbedder()
        indexer = VectorIndexer(store, embedder, batch_size=4)
        seen: list[tuple[int, int]] = []
        assert await indexer.run_until_idle(lambda done, total: seen.append((done, total))) == 11
        assert seen[0] == (0, 11) and seen[-1] == (11, 11)
        assert [done for done, _ in seen] == [0, 4, 8, 11]
        assert all(len(call) <= 4 for call in embedder.calls)  # one batch at a time
        assert await store.pending_embeddings(MODEL) == []
        stats = (await store.vector_stats(MODEL))[MODEL]
        assert stats["vectors"] == 11 and stats["pending"] == 0
        assert indexer.health()["items_indexed"] == 11
        # Nothing pending: a second run does nothing.
        assert await indexer.run_until_idle() == 0

    run(main())


def test_long_texts_are_embedded_as_capped_passages() -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.open()
        long_text = "\n".join([_lines("kitten", 20), _lines("filler", 200), _lines("database", 20)])
        await store.write(batch_of(exchange([text("user", long_text)], answer("   "), session="s-long")))
        embedder = TopicEmbedder()
        indexer = VectorIndexer(store, embedder, max_chunks=4)
        await indexer.run_until_idle()
        stats = (await store.vector_stats(MODEL))[MODEL]
        # Four passages of the long message, and the facets of the user's lines up to the
        # item's cap; the blank answer has none but is done.
        assert stats["vectors"] == 4 + MAX_FACETS_PER_ITEM and stats["pending"] == 0
        # The tail passage (where "database" is) was kept: a database query finds it.
        hits = await store.vector_search(MODEL, embedder.vector("database"), limit=1)
        assert hits and "database 19" in hits[0].text and hits[0].text.startswith("[user]")
        assert hits[0].score > 0.9
        # Without a cap, every passage is embedded.
        everything = VectorIndexer(store, embedder, max_chunks=1000)
        await store.reset_vectors(MODEL)
        await everything.run_until_idle()
        count = len(cut("user", [{"type": "text", "text": long_text}]))
        assert (await store.vector_stats(MODEL))[MODEL]["vectors"] == count + MAX_FACETS_PER_ITEM

    run(main())


def test_new_passage_rules_drop_the_old_index_and_backfill() -> None:
    async def main() -> None:
        store = await filled_store(2)
        embedder = TopicEmbedder()
        # An index of the same model cut by other (older) rules.
        await VectorIndexer(store, embedder).run_until_idle()
        old = {n: v for n, v in (await store.vector_stats()).items()}
        assert list(old) == [MODEL]
        stale = TopicEmbedder.model_id  # how indexes were named before passages
        for item in await store.pending_embeddings(stale):
            await store.write_vectors(
                stale, embedder.dimensions, [ItemVectors(item, [embedder.vector(item.text)])]
            )
        assert set(await store.vector_stats()) == {MODEL, stale}
        await VectorIndexer(store, embedder).run_until_idle()
        assert set(await store.vector_stats()) == {MODEL}

    run(main())


class HeldEmbedder(TopicEmbedder):
    """Embeds only once ``go`` is set: the backfill stays under way while a test looks."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await self.go.wait()
        return await super().embed(texts)


def test_an_index_of_older_facet_rules_serves_recall_until_the_new_one_has_caught_up() -> None:
    """New facet rules re-embed everything (hours on a store of months); the index they
    replace numbers the same passages, so recall searches it meanwhile instead of a nearly
    empty one. An index of other passage rules is dropped at once."""

    async def main() -> None:
        store = await filled_store(2)
        embedder = HeldEmbedder()
        before_facets = MODEL.replace(VECTOR_RULES, PASSAGE_RULES)  # "<model>@p1"
        other_passages = MODEL.replace(VECTOR_RULES, "p0.f1")
        for name in (before_facets, other_passages):
            for item in await store.pending_embeddings(name):
                vectors = [ItemVectors(item, [embedder.vector(item.text)])]
                await store.write_vectors(name, embedder.dimensions, vectors)
        indexer = VectorIndexer(store, embedder, batch_size=1, interval=0.01)
        source = StoreVectorSource(store, MODEL, serving=indexer.serving_index)
        await indexer.start()
        try:
            for _ in range(500):
                if indexer.previous is not None and other_passages not in await store.vector_stats():
                    break
                await asyncio.sleep(0.01)
            assert indexer.serving_index() == before_facets
            assert set(await store.vector_stats()) - {MODEL} == {before_facets}
            assert (await store.vector_stats(MODEL))[MODEL]["vectors"] == 0
            hits = await source.search_vector(embedder.vector("kitten"), SearchFilter(Scope.PROJECT), 5)
            assert hits and "kitten" in hits[0].text  # found in the index being replaced
            assert indexer.health()["serving"] == before_facets
            embedder.go.set()
            for _ in range(500):
                if indexer.state == "idle" and indexer.previous is None:
                    break
                await asyncio.sleep(0.01)
            assert indexer.serving_index() == MODEL
            assert set(await store.vector_stats()) == {MODEL}
            hits = await source.search_vector(embedder.vector("kitten"), SearchFilter(Scope.PROJECT), 5)
            assert hits and "kitten" in hits[0].text
        finally:
            await indexer.stop()

    run(main())


def test_a_failed_batch_loses_nothing() -> None:
    async def main() -> None:
        store = await filled_store(3)
        indexer = VectorIndexer(store, FlakyEmbedder(failures=1), batch_size=10)
        with pytest.raises(RuntimeError):
            await indexer.index_batch()
        assert len(await store.pending_embeddings(MODEL)) == 6  # still pending
        assert await indexer.index_batch() == 6
        assert await store.pending_embeddings(MODEL) == []

    run(main())


def test_background_loop_retries_and_reports() -> None:
    async def main() -> None:
        store = await filled_store(2)
        indexer = VectorIndexer(store, FlakyEmbedder(failures=1), batch_size=10, interval=0.05)
        await indexer.start()
        try:
            for _ in range(400):
                if indexer.items_indexed == 4:
                    break
                await asyncio.sleep(0.01)
            assert indexer.items_indexed == 4
            assert indexer.health()["ok"] is True and indexer.health()["state"] in ("idle", "indexing")
            # A new write wakes it.
            await store.write(batch_of(exchange([text("user", "one more kitten")], session="s-new")))
            indexer.notify()
            for _ in range(400):
                if indexer.items_indexed == 5:
                    break
                await asyncio.sleep(0.01)
            assert indexer.items_indexed == 5
            assert indexer.health()["pending"] == 0
            # A distillation (written by the distiller, which wakes nobody) is found by polling.
            d = StoredDistillation(
                id=distillation_id("s-new", 0, ["m"]), session_id="s-new", generation=0,
                text="- a kitten was adopted", source_ids=["m"], project="/work/alpha",
            )  # fmt: skip
            await store.write_distillation(d)
            for _ in range(400):
                if indexer.items_indexed == 6:
                    break
                await asyncio.sleep(0.01)
            assert indexer.items_indexed == 6
            hits = await store.vector_search(MODEL, TopicEmbedder().vector("kitten"), kinds=["distillation"])
            assert [h.id for h in hits] == [d.ref]
        finally:
            await indexer.stop()
        assert indexer.health()["state"] == "stopped"

    run(main())


class SlowEmbedder(TopicEmbedder):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await asyncio.sleep(0.02)
        return await super().embed(texts)


def test_health_counts_items_that_arrive_while_the_indexer_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under steady writes the indexer never goes idle: the backlog on /health must still
    # include what arrived after the work began, not count down to 0 while items wait.
    monkeypatch.setattr(indexer_module, "PENDING_RECOUNT_SECONDS", 0.0)

    async def main() -> None:
        store = await filled_store(3)  # 6 items
        indexer = VectorIndexer(store, SlowEmbedder(), batch_size=1, interval=0.05)
        await indexer.start()
        try:
            for _ in range(400):
                if indexer.items_indexed >= 1:
                    break
                await asyncio.sleep(0.005)
            for i in range(5):  # 10 more items while it works
                await store.write(
                    batch_of(exchange([text("user", f"kitten {i}")], answer("ok"), session=f"n-{i}"))
                )
            seen = indexer.items_indexed
            for _ in range(400):
                if indexer.items_indexed >= seen + 2:
                    break
                await asyncio.sleep(0.005)
            waiting = len(await store.pending_embeddings(MODEL, limit=100))
            assert indexer.health()["pending"] >= waiting - 1 > 6 - indexer.items_indexed
        finally:
            await indexer.stop()

    run(main())


def test_unavailable_embedder_is_reported_and_nothing_is_marked() -> None:
    class Missing(TopicEmbedder):
        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            raise EmbedderUnavailable("model file missing")

    async def main() -> None:
        store = await filled_store(1)
        indexer = VectorIndexer(store, Missing(), interval=0.05)
        await indexer.start()
        try:
            for _ in range(400):
                if indexer.state == "unavailable":
                    break
                await asyncio.sleep(0.01)
            health = indexer.health()
            assert health["state"] == "unavailable" and health["ok"] is False
            assert "model file missing" in health["error"]
            assert len(await store.pending_embeddings(MODEL)) == 2
        finally:
            await indexer.stop()

    run(main())


def test_model_change_backfills_a_new_index() -> None:
    class OtherModel(TopicEmbedder):
        model_id = "topics-v2"

    async def main() -> None:
        store = await filled_store(2)
        await VectorIndexer(store, TopicEmbedder()).run_until_idle()
        assert await store.pending_embeddings(MODEL) == []
        assert len(await store.pending_embeddings(MODEL2)) == 4
        assert await VectorIndexer(store, OtherModel()).run_until_idle() == 4
        stats = await store.vector_stats()
        assert stats[MODEL]["vectors"] == 4 and stats[MODEL2]["vectors"] == 4

    run(main())


# -- through a real gateway -------------------------------------------------------------------


class TopicsPlugin:
    """Registers the topic embedder as the ``topics`` provider."""

    @hookimpl
    def lore_register_embedders(self, register: Callable[[Any], None]) -> None:
        register(Factory("topics", lambda config: TopicEmbedder()))


def _wait(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


@pytest.mark.parametrize("backend", ["memory", "duckdb"])
def test_gateway_embeds_what_it_stores_and_recall_finds_it_by_meaning(
    backend: str, start_gateway: Callable[..., ThreadedServer], fake_upstream: Any, tmp_path: Path
) -> None:
    if backend == "duckdb":
        pytest.importorskip("lore_store_duckdb")
    config = {
        "embedding": {"provider": "topics"},
        "store": {"backend": backend, "path": str(tmp_path / "db")},
    }
    server = start_gateway(config=config, extra_plugins=(TopicsPlugin(),))
    body = {
        "model": "claude-test",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "my tabby kitten sleeps all day"}],
    }
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = client.post(
            "/v1/messages", json=body, headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}
        )
        assert r.status_code == 200

        def indexed() -> bool:
            health = client.get("/health").json()
            return health["indexer"]["items_indexed"] >= 2

        _wait(indexed)
        health = client.get("/health").json()["indexer"]
        assert health["model"] == MODEL and health["ok"] is True
        # No stored word matches "feline": only the vector list can find the message.
        answer_ = client.get(
            "/lore/api/recall", params={"q": "feline", "scope": "all"}, headers=api_headers()
        ).json()
        assert answer_["error"] is None, answer_
        assert any(res["text"] == "[user]\nmy tabby kitten sleeps all day" for res in answer_["results"])
        assert not any("full-text" in n for n in answer_["notes"])


class BrokenPlugin:
    @hookimpl
    def lore_register_embedders(self, register: Callable[[Any], None]) -> None:
        register(Factory("broken", lambda config: BrokenEmbedder()))


def test_gateway_with_an_embedder_that_cannot_load_serves_full_text(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: Any
) -> None:
    server = start_gateway(config={"embedding": {"provider": "broken"}}, extra_plugins=(BrokenPlugin(),))
    body = {
        "model": "claude-test",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "kitten naps"}],
    }
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = client.post(
            "/v1/messages", json=body, headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}
        )
        assert r.status_code == 200  # the proxy never depends on the embedder
        _wait(lambda: client.get("/health").json()["indexer"]["state"] == "unavailable")
        health = client.get("/health").json()["indexer"]
        assert health["ok"] is False and "the model file is missing" in health["error"]
        _wait(
            lambda: bool(
                client.get(
                    "/lore/api/recall", params={"q": "kitten", "scope": "all"}, headers=api_headers()
                ).json()["results"]
            )
        )
        answer_ = client.get(
            "/lore/api/recall", params={"q": "kitten", "scope": "all"}, headers=api_headers()
        ).json()
        assert answer_["results"][0]["text"] == "[user]\nkitten naps"
        assert any("full-text search only" in n for n in answer_["notes"])


def test_a_side_remark_of_the_user_is_found_by_its_own_sentence() -> None:
    """People state facts in passing. The vector of the whole message is about its main topic;
    the sentence's own vector (a facet) finds it first for a question about the aside. The
    assistant's words get no facets."""

    async def main() -> None:
        store = MemoryStore()
        await store.open()
        remark = (
            "We ship the release today, the rollout to kubernetes starts at noon and the deploy "
            "window is two hours. By the way, the postgres migration finished last night."
        )
        await store.write(batch_of(exchange([text("user", remark)], answer("ok"), session="s-aside")))
        mixed = "The kitten walked over the keyboard during the postgres migration."
        await store.write(batch_of(exchange([text("user", "and cats?")], answer(mixed), session="s-other")))
        embedder = TopicEmbedder()
        await VectorIndexer(store, embedder).run_until_idle()
        hits = await store.vector_search(MODEL, embedder.vector("database"), limit=2)
        assert [h.session_id for h in hits] == ["s-aside", "s-other"]
        assert hits[0].text == f"[user]\n{remark}" and hits[0].passage == 0  # the passage, once
        assert hits[0].score > 0.99  # its sentence's vector, not the whole message's
        whole = sum(a * b for a, b in zip(embedder.vector(remark), embedder.vector("database"), strict=True))
        assert whole < hits[1].score  # by the whole message alone it would come second
        # One vector per passage for the assistant's answers, passage plus sentences for the user's.
        assert (await store.vector_stats(MODEL))[MODEL]["vectors"] == 4 + 2

    run(main())
