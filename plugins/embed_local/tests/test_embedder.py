"""The local embedder with the real model: meaning, shape, batching, long texts, the loop."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable

import numpy as np
import pytest
from lore_embed_local import DIMENSIONS, EmbedLocalConfig, LocalEmbedder


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


def test_paraphrases_score_far_higher_than_unrelated_texts(embedder: LocalEmbedder) -> None:
    guitar, guitar_again, market, recall, recall_again = asyncio.run(
        embedder.embed(
            [
                "A man is playing a guitar.",
                "Someone is playing an acoustic guitar.",
                "The stock market fell sharply this morning.",
                "How do I configure the proxy's upstream URL?",
                "Where is the upstream address of the gateway set?",
            ]
        )
    )
    assert cosine(guitar, guitar_again) > 0.6
    assert cosine(guitar, market) < 0.2
    assert cosine(guitar, guitar_again) - cosine(guitar, market) > 0.5
    # Closer to its paraphrase than to anything else in the set.
    assert cosine(recall, recall_again) > max(cosine(recall, guitar), cosine(recall, market)) + 0.3


def test_min_similarity_separates_related_texts_from_unrelated_ones(embedder: LocalEmbedder) -> None:
    """Recall drops vector hits under ``min_similarity``: weakly related coding texts stay
    above it, unrelated ones (or a one-word reply) fall below."""
    pairs = {
        ("what database do we use", "We migrated the service to Postgres 15 last week"): True,
        ("how to retry connections", "Use exponential backoff with jitter, max 30s"): True,
        ("deploy failed yesterday", "the rollout crashed because the migration timed out"): True,
        ("how to retry connections", "pong"): False,
        ("what database do we use", "Run the tests with pytest -q before committing"): False,
        ("what database do we use", "I prefer tabs over spaces in Python files"): False,
        ("favorite color of my cat", "The CI pipeline uses GitHub Actions with a matrix build"): False,
    }
    vectors = asyncio.run(embedder.embed([text for pair in pairs for text in pair]))
    for i, (pair, related) in enumerate(pairs.items()):
        similarity = cosine(vectors[2 * i], vectors[2 * i + 1])
        assert (similarity >= embedder.min_similarity) is related, (pair, similarity)


def test_vectors_are_unit_length_with_384_dimensions(
    embedder: LocalEmbedder, prose: Callable[[int, int], str]
) -> None:
    texts = ["hello", "", prose(100, 1), prose(1500, 2), "日本語のテキスト", "def f(x):\n    return x * 2\n"]
    vectors = asyncio.run(embedder.embed(texts))
    assert len(vectors) == len(texts)
    assert embedder.dimensions == DIMENSIONS == 384
    for vector in vectors:
        assert len(vector) == 384
        assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_a_batch_gives_the_same_vectors_as_one_text_at_a_time(
    embedder: LocalEmbedder, prose: Callable[[int, int], str]
) -> None:
    # Mixed lengths, so texts are reordered by length and padded inside each batch.
    texts = [prose(length, seed) for seed, length in enumerate([900, 5, 300, 40, 1500, 0, 120, 60] * 5)]
    batched = asyncio.run(embedder.embed(texts))

    async def one_by_one() -> list[list[float]]:
        return [(await embedder.embed([text]))[0] for text in texts]

    single = asyncio.run(one_by_one())
    np.testing.assert_allclose(np.array(batched), np.array(single), atol=1e-5)
    # And order is kept: every text's vector is its own, not a neighbour's.
    distinct = {round(v[0], 6) for v in single}
    assert len(distinct) > len(set(texts)) // 2


def test_padding_is_to_the_longest_text_of_the_batch(embedder: LocalEmbedder) -> None:
    runtime = embedder._ensure_runtime()
    ids, mask = embedder._encode(runtime, ["hi", "hello there, how are you"])
    # [CLS] hello there , how are you [SEP] = 8 tokens, not the tokenizer file's fixed 128.
    assert ids.shape == (2, 8)
    assert mask.tolist() == [[1, 1, 1, 0, 0, 0, 0, 0], [1] * 8]


@pytest.mark.slow
@pytest.mark.parametrize("budget", [64, 256, 1 << 20])
def test_model_calls_stay_within_the_token_budget(prose: Callable[[int, int], str], budget: int) -> None:
    emb = LocalEmbedder(EmbedLocalConfig(max_batch_tokens=budget))
    texts = [prose(length, seed) for seed, length in enumerate([100, 30, 1500, 400, 100, 60] * 4)]
    shapes: list[tuple[int, int]] = []
    original = emb._run

    def spy(runtime: object, rows: list[list[int]]) -> object:
        shapes.append((len(rows), max(len(r) for r in rows)))
        return original(runtime, rows)  # type: ignore[arg-type]

    emb._run = spy  # type: ignore[method-assign]
    vectors = emb.embed_blocking(texts)
    assert vectors.shape == (len(texts), 384)
    assert sum(count for count, _ in shapes) == len(texts)
    # Within the budget, except a text longer than the budget, which runs alone.
    assert all(count * width <= budget or count == 1 for count, width in shapes)
    if budget >= 1 << 20:
        assert len(shapes) == 1
    else:
        assert len(shapes) > 1


def test_an_empty_string_and_a_100_kb_text_embed(
    embedder: LocalEmbedder, prose: Callable[[int, int], str]
) -> None:
    huge = prose(100_000, 7)
    empty, big, head = asyncio.run(embedder.embed(["", huge, huge[:3000]]))
    for vector in (empty, big):
        assert len(vector) == 384
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    # Only the first maxTokens tokens count: the 100 KB text is its first ~1,500 characters.
    assert cosine(big, head) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    "text",
    [
        "word " * 30_000,  # cut at a space, far past the truncation point
        "x" * 50_000,  # one giant "word": no space to cut at
        "a" + " " * 20_000 + "real words after a long gap " * 200,  # whitespace run
        "漢字" * 20_000,  # every CJK character is a token of its own
        ("token " * 800) + "\n" * 10_000,
    ],
    ids=["spaces", "no-space", "whitespace-run", "cjk", "trailing-newlines"],
)
def test_long_texts_tokenise_exactly_as_whole_texts_truncated(embedder: LocalEmbedder, text: str) -> None:
    # Long texts are cut before tokenising, for speed; the tokens must not change.
    runtime = embedder._ensure_runtime()
    ids, _ = embedder._encode(runtime, [text])
    expected = runtime.encoder.encode(text).ids
    assert ids[0].tolist() == expected
    assert len(expected) <= embedder.settings.max_tokens


def test_texts_are_truncated_to_max_tokens(prose: Callable[[int, int], str]) -> None:
    text = prose(400, 11)
    longer = text + " and then a whole different ending about the stock market falling"

    async def pair(emb: LocalEmbedder) -> tuple[list[float], list[float]]:
        try:
            a, b = await emb.embed([text, longer])
            return a, b
        finally:
            await emb.close()

    short_a, short_b = asyncio.run(pair(LocalEmbedder(EmbedLocalConfig(max_tokens=16))))
    assert cosine(short_a, short_b) == pytest.approx(1.0, abs=1e-5)
    full_a, full_b = asyncio.run(pair(LocalEmbedder(EmbedLocalConfig(max_tokens=512))))
    assert cosine(full_a, full_b) < 0.999


@pytest.mark.slow
def test_embedding_runs_in_a_thread_and_the_loop_keeps_ticking(prose: Callable[[int, int], str]) -> None:
    # One batch of 64 long texts: were inference on the loop, the ticker could not run at
    # all until it finished.
    emb = LocalEmbedder(EmbedLocalConfig(batch_size=64))
    texts = [prose(1500, seed) for seed in range(64)]
    seen_threads: set[str] = set()
    original = emb.embed_blocking

    def spy(batch: list[str]) -> object:
        seen_threads.add(threading.current_thread().name)
        return original(batch)

    emb.embed_blocking = spy  # type: ignore[method-assign]

    async def scenario() -> tuple[int, int]:
        await emb.load()
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        vectors = await emb.embed(texts)
        during = ticks - before
        done.set()
        await task
        await emb.close()
        return during, len(vectors)

    during, count = asyncio.run(scenario())
    assert count == 64
    assert during >= 5
    assert seen_threads and all(name.startswith("lore-embed") for name in seen_threads)


def test_concurrent_callers_share_the_bounded_queue(embedder: LocalEmbedder) -> None:
    emb = LocalEmbedder(EmbedLocalConfig(queue_size=1, batch_size=2))
    texts = [f"message number {i} about topic {i % 3}" for i in range(7)]

    async def scenario() -> tuple[list[list[list[float]]], list[list[float]]]:
        try:
            results = await asyncio.gather(*(emb.embed(texts[i:]) for i in range(5)))
            reference = await embedder.embed(texts)
            return list(results), reference
        finally:
            await emb.close()

    results, reference = asyncio.run(scenario())
    for offset, vectors in enumerate(results):
        np.testing.assert_allclose(np.array(vectors), np.array(reference[offset:]), atol=1e-5)


def test_embedding_nothing_returns_nothing_without_loading() -> None:
    emb = LocalEmbedder()
    assert asyncio.run(emb.embed([])) == []
    assert emb.health()["loaded"] is False


def test_health_reports_a_loaded_model(embedder: LocalEmbedder) -> None:
    health = embedder.health()
    assert health["ok"] is True
    assert health["loaded"] is True
    assert health["model"] == "all-MiniLM-L6-v2-onnx-int8"
    assert health["dimensions"] == 384


def test_health_before_loading_checks_the_files_without_loading() -> None:
    emb = LocalEmbedder()
    health = emb.health()
    assert health["ok"] is True
    assert health["loaded"] is False
    assert "loads on first use" in health["detail"]
