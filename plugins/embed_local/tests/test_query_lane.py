"""``embed_query``: a search's query runs ahead of a background backlog, with ``embed``'s vectors."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from lore_embed_local import EmbedderUnavailable, EmbedLocalConfig, LocalEmbedder

QUERY = "where is the upstream url of the proxy configured?"


def spy_runs(emb: LocalEmbedder, runs: list[str]) -> None:
    """Record each model run as ``query`` or ``background``, before it runs: the query is
    one short text, the backlog's texts are ~500 characters (70+ tokens)."""
    original = emb._run

    def spy(runtime: object, rows: list[list[int]]) -> object:
        runs.append("query" if max(len(row) for row in rows) < 40 else "background")
        return original(runtime, rows)  # type: ignore[arg-type]

    emb._run = spy  # type: ignore[method-assign]


def test_a_query_waits_for_at_most_one_run_of_a_background_backlog(
    embedder: LocalEmbedder, prose: Callable[[int, int], str]
) -> None:
    emb = LocalEmbedder()
    runs: list[str] = []
    spy_runs(emb, runs)
    # Two batches of batchSize (32) texts, each some ten model runs. Queued behind the
    # batch in progress (as embed queues), the query would wait for several runs (~14).
    backlog = [prose(500, seed) for seed in range(64)]

    async def scenario() -> tuple[int, list[float], bool, int]:
        await emb.load()
        try:
            background = asyncio.create_task(emb.embed(backlog))
            while runs.count("background") < 2:  # the backlog is under way
                await asyncio.sleep(0.001)
            before = len(runs)
            [vector] = await emb.embed_query([QUERY])
            unfinished = not background.done()
            count = len(await background)
            return before, vector, unfinished, count
        finally:
            await emb.close()

    before, vector, unfinished, count = asyncio.run(scenario())
    assert unfinished, "the query waited for the whole backlog"
    assert count == len(backlog)
    assert runs.count("query") == 1
    # Runs are recorded as they start: at most the background run that began after the
    # query was queued (before the thread looked at the lane) came before the query's own.
    position = runs.index("query")
    assert position >= before
    assert runs[before:position].count("background") <= 1, runs[before : position + 1]
    assert runs[position + 1 :].count("background") > 0
    expected = asyncio.run(embedder.embed([QUERY]))[0]
    np.testing.assert_allclose(vector, expected, atol=1e-6)


def test_embed_query_gives_the_vectors_embed_gives(
    embedder: LocalEmbedder, prose: Callable[[int, int], str]
) -> None:
    # Mixed lengths and more than one batch, so texts are reordered and batched.
    texts = [prose(length, seed) for seed, length in enumerate([900, 5, 300, 40, 1500, 0, 120, 60] * 5)]
    assert len(texts) > embedder.settings.batch_size

    async def both() -> tuple[list[list[float]], list[list[float]]]:
        return await embedder.embed(texts), await embedder.embed_query(texts)

    embedded, queried = asyncio.run(both())
    # The same batches, so the same model runs: the same numbers.
    np.testing.assert_array_equal(np.array(queried), np.array(embedded))
    assert asyncio.run(embedder.embed_query([])) == []


def test_a_cancelled_query_is_skipped_and_the_lane_keeps_working() -> None:
    emb = LocalEmbedder()
    runs: list[str] = []
    spy_runs(emb, runs)
    gate = threading.Event()

    async def scenario() -> list[list[float]]:
        await emb.load()
        try:
            # Hold the inference thread, so the query waits in the lane until cancelled.
            held = emb._worker().submit(gate.wait)
            waiting = asyncio.create_task(emb.embed_query(["a query nobody waits for"]))
            await asyncio.sleep(0)
            assert len(emb._queries) == 1
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            gate.set()
            await asyncio.wrap_future(held)
            return await emb.embed_query([QUERY, "and a second text"])
        finally:
            gate.set()
            await emb.close()

    vectors = asyncio.run(scenario())
    assert len(vectors) == 2 and all(len(v) == 384 for v in vectors)
    assert runs == ["query"], "the cancelled query ran"
    assert not emb._queries


def test_a_query_on_a_model_that_cannot_load_raises_embedder_unavailable(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.onnx"
    emb = LocalEmbedder(EmbedLocalConfig(model_path=str(missing)))
    # The first call finds out in the inference thread, the next before queueing.
    for _ in range(2):
        with pytest.raises(EmbedderUnavailable) as info:
            asyncio.run(emb.embed_query(["hello"]))
        assert str(missing) in info.value.reason
    asyncio.run(emb.close())
    assert emb.health()["ok"] is False
