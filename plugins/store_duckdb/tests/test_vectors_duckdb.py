"""The DuckDB store's vector index (LanceDB in ``<file>.vec/``): many small appends stay
compact, a crash between an append and its watermark neither loses nor repeats work, a
deleted index is rebuilt, and the approximate index takes over past its threshold."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from lore_store_duckdb import vectors
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.records import ItemVectors
from lore_core.testing.builders import batch_of, exchange, text

MODEL = "fixed-vectors-v1"
# The ANN index's RaBitQ codes hold one bit a dimension: at 8 dimensions too few to rank by
# (an item's own vector missed its top hit), at 64 and at a model's 384 plenty.
DIMS = 64


def unit(rng: random.Random, dims: int = DIMS) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dims)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


async def add_messages(store: DuckDBStore, count: int, start: int = 0) -> None:
    await store.write(
        batch_of(
            *(
                exchange([text("user", f"note number {i}")], session=f"s-{i % 3}", at=float(i))
                for i in range(start, start + count)
            )
        )
    )


async def embed_pending(store: DuckDBStore, rng: random.Random, batch: int = 256) -> dict[str, list[float]]:
    """Embed what is pending with random unit vectors; returns id -> vector."""
    given: dict[str, list[float]] = {}
    while items := await store.pending_embeddings(MODEL, limit=batch):
        done = [ItemVectors(i, [unit(rng)]) for i in items]
        for iv in done:
            given[iv.item.id] = list(iv.vectors[0])
        await store.write_vectors(MODEL, DIMS, done)
    return given


def run(path: Path, body: Any) -> None:
    async def main() -> None:
        store = DuckDBStore(path)
        await store.open()
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(main())


def test_many_small_appends_stay_compact_and_searchable(tmp_path: Path) -> None:
    rng = random.Random(1)

    async def body(store: DuckDBStore) -> None:
        given: dict[str, list[float]] = {}
        # One message at a time, embedded at once: the gateway's pattern under light traffic.
        for i in range(60):
            await add_messages(store, 1, start=i)
            given.update(await embed_pending(store, rng))
        stats = (await store.vector_stats(MODEL))[MODEL]
        assert stats["vectors"] == 60 and stats["pending"] == 0
        # 60 appends, but compaction keeps the fragment count bounded.
        assert stats["fragments"] <= vectors.OPTIMIZE_APPENDS + 1
        assert stats["optimizations"] >= 3
        for ident, vector in list(given.items())[::7]:
            hits = await store.vector_search(MODEL, vector, limit=3)
            assert hits[0].id == ident and hits[0].score == pytest.approx(1.0, abs=1e-4)

    run(tmp_path / "lore.duckdb", body)


def test_a_crash_between_append_and_watermark_repeats_nothing(tmp_path: Path) -> None:
    rng = random.Random(2)
    path = tmp_path / "lore.duckdb"

    async def crash(store: DuckDBStore) -> None:
        await add_messages(store, 6)
        items = await store.pending_embeddings(MODEL)
        await store.write_vectors(MODEL, DIMS, [ItemVectors(i, [unit(rng)]) for i in items[:2]])
        # The next append lands in LanceDB but the process dies before the watermark is saved.
        index = store._vectors
        saved = index._save
        index._save = lambda m: None  # type: ignore[method-assign]
        try:
            await store.write_vectors(MODEL, DIMS, [ItemVectors(i, [unit(rng)]) for i in items[2:4]])
        finally:
            index._save = saved  # type: ignore[method-assign]

    async def resume(store: DuckDBStore) -> None:
        pending = await store.pending_embeddings(MODEL)
        assert len(pending) == 2  # the four written are not pending again
        await store.write_vectors(MODEL, DIMS, [ItemVectors(i, [unit(rng)]) for i in pending])
        stats = (await store.vector_stats(MODEL))[MODEL]
        assert (stats["vectors"], stats["pending"]) == (6, 0)  # and none twice

    run(path, crash)
    run(path, resume)


def test_a_deleted_vector_directory_is_embedded_again(tmp_path: Path) -> None:
    rng = random.Random(3)
    path = tmp_path / "lore.duckdb"

    async def first(store: DuckDBStore) -> None:
        await add_messages(store, 4)
        await embed_pending(store, rng)
        assert await store.pending_embeddings(MODEL) == []

    async def after(store: DuckDBStore) -> None:
        # Derived data: the messages are pending again rather than silently missing.
        assert len(await store.pending_embeddings(MODEL)) == 4
        assert await store.vector_search(MODEL, unit(rng)) == []
        await embed_pending(store, rng)
        assert (await store.vector_stats(MODEL))[MODEL]["vectors"] == 4

    run(path, first)
    shutil.rmtree(tmp_path / "lore.duckdb.vec")
    run(path, after)


def test_the_approximate_index_takes_over_past_its_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "ANN_MIN_ROWS", 600)
    monkeypatch.setattr(vectors, "SCALAR_MIN_ROWS", 600)
    rng = random.Random(4)

    async def body(store: DuckDBStore) -> None:
        await add_messages(store, 700)
        given = await embed_pending(store, rng, batch=700)
        stats = (await store.vector_stats(MODEL))[MODEL]
        assert stats["ann_index"] is True and stats["vectors"] == 700
        # Exact re-ranking of the candidates keeps an item's own vector its top hit.
        for ident, vector in list(given.items())[::50]:
            hits = await store.vector_search(MODEL, vector, limit=5)
            assert hits[0].id == ident
        # Filters still apply with the index (and the filter indexes beside it).
        table = store._vectors.model(MODEL).table  # type: ignore[union-attr]
        indexed = {c for ix in table.list_indices() for c in ix.columns}
        assert {"vector", "project", "session_id", "kind"} <= indexed
        hits = await store.vector_search(MODEL, unit(rng), session_id="s-1", limit=10)
        assert hits and {h.session_id for h in hits} == {"s-1"}
        # Rows appended after the index was built are found too (scanned until merged).
        await add_messages(store, 1, start=5000)
        new = await embed_pending(store, rng)
        ((ident, vector),) = new.items()
        assert (await store.vector_search(MODEL, vector, limit=1))[0].id == ident

    run(tmp_path / "lore.duckdb", body)


def test_an_ann_index_of_the_earlier_kind_is_rebuilt_at_the_next_upkeep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose ANN index was built as IVF-PQ (its model's record has no kind) gets the
    current kind at its next upkeep; until then it searches with the one it has."""
    monkeypatch.setattr(vectors, "ANN_MIN_ROWS", 600)
    rng = random.Random(9)
    path = tmp_path / "lore.duckdb"

    def kind(store: DuckDBStore) -> str:
        table = store._vectors.model(MODEL).table  # type: ignore[union-attr]
        return next(ix.index_type for ix in table.list_indices() if "vector" in ix.columns)

    async def build_as_before(store: DuckDBStore) -> None:
        await add_messages(store, 700)
        await embed_pending(store, rng, batch=700)
        assert kind(store) == "IvfRq"
        from lancedb.index import IvfPq

        table = store._vectors.model(MODEL).table  # type: ignore[union-attr]
        before = IvfPq(distance_type="cosine", num_partitions=2, num_sub_vectors=2)
        table.create_index("vector", config=before, replace=True)
        info = json.loads(store._meta_get(f"vectors:{MODEL}") or "{}")
        info.pop("ann_kind")
        store._meta_put(f"vectors:{MODEL}", json.dumps(info))

    async def reopened(store: DuckDBStore) -> None:
        assert kind(store) == "IvfPq"
        vector = unit(rng)
        assert len(await store.vector_search(MODEL, vector, limit=5)) == 5
        await store.optimize_vectors(MODEL)
        assert kind(store) == "IvfRq"
        assert json.loads(store._meta_get(f"vectors:{MODEL}") or "{}")["ann_kind"] == "ivf_rq"
        assert len(await store.vector_search(MODEL, vector, limit=5)) == 5

    run(path, build_as_before)
    run(path, reopened)


def test_stats_report_vectors_beside_the_store(tmp_path: Path) -> None:
    async def body(store: DuckDBStore) -> None:
        await add_messages(store, 2)
        assert await store.vector_stats() == {}
        await embed_pending(store, random.Random(5))
        stats = await store.vector_stats()
        assert list(stats) == [MODEL]
        assert stats[MODEL]["path"].endswith("lore.duckdb.vec")
        await store.reset_vectors(MODEL)
        assert await store.vector_stats() == {}

    run(tmp_path / "lore.duckdb", body)


def test_searches_never_wait_for_a_write_in_progress(tmp_path: Path) -> None:
    """A write holds the index's lock through its upkeep (an ANN build can take minutes at
    1M vectors); searches of an open model must not queue behind it."""
    rng = random.Random(6)

    async def body(store: DuckDBStore) -> None:
        await add_messages(store, 3)
        given = await embed_pending(store, rng)
        ident, vector = next(iter(given.items()))
        with store._vectors._lock:  # as a write's upkeep would hold it
            hits = await asyncio.wait_for(store.vector_search(MODEL, vector, limit=1), 60)
            stats = await asyncio.wait_for(store.vector_stats(MODEL), 60)
        assert hits[0].id == ident and stats[MODEL]["vectors"] == 3

    run(tmp_path / "lore.duckdb", body)


def test_selective_filters_find_every_match_despite_the_approximate_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an ANN index only the partitions nearest the query are looked at; a session's or
    a small project's rows mostly live elsewhere. Scoped searches must still find them."""
    monkeypatch.setattr(vectors, "ANN_MIN_ROWS", 600)
    monkeypatch.setattr(vectors, "ANN_PARTITION_ROWS", 16)  # ~45 partitions ...
    monkeypatch.setattr(vectors, "ANN_NPROBES", 1)  # ... of which one is probed
    rng = random.Random(8)

    async def body(store: DuckDBStore) -> None:
        await add_messages(store, 700)
        await store.write(
            batch_of(
                *(
                    exchange([text("user", f"tiny {i}")], session="tiny", project="/p/small", at=9e3 + i)
                    for i in range(6)
                )
            )
        )
        await embed_pending(store, rng, batch=1000)
        assert (await store.vector_stats(MODEL))[MODEL]["ann_index"] is True
        query = unit(rng)
        in_session = await store.vector_search(MODEL, query, session_id="tiny", limit=10)
        assert len(in_session) == 6 and {h.session_id for h in in_session} == {"tiny"}
        in_project = await store.vector_search(MODEL, query, project="/p/small", limit=10)
        assert len(in_project) == 6 and {h.project for h in in_project} == {"/p/small"}
        # Exact scores, best first.
        assert [h.score for h in in_project] == sorted((h.score for h in in_project), reverse=True)

    run(tmp_path / "lore.duckdb", body)


def test_small_appends_after_the_ann_index_keep_its_segments_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each optimize adds the new rows as another index segment that every query searches;
    past ANN_MAX_SEGMENTS the index is rebuilt as one."""
    monkeypatch.setattr(vectors, "ANN_MIN_ROWS", 300)
    monkeypatch.setattr(vectors, "OPTIMIZE_APPENDS", 2)
    monkeypatch.setattr(vectors, "ANN_MAX_SEGMENTS", 3)
    monkeypatch.setattr(vectors, "ANN_REBUILD_PAUSE_FACTOR", 0.0)
    rng = random.Random(9)

    async def body(store: DuckDBStore) -> None:
        await add_messages(store, 320)
        given = await embed_pending(store, rng, batch=1000)
        table = store._vectors.model(MODEL).table  # type: ignore[union-attr]
        assert vectors._index_segments(table) == 1
        most = 0
        for i in range(30):
            await add_messages(store, 1, start=10_000 + i)
            given.update(await embed_pending(store, rng))
            most = max(most, vectors._index_segments(table))
        assert 1 < most <= 4  # deltas appeared, and never piled up
        for ident, vector in list(given.items())[-30::5]:
            assert (await store.vector_search(MODEL, vector, limit=1))[0].id == ident

    run(tmp_path / "lore.duckdb", body)


def test_a_rebuild_for_segments_waits_for_its_pause_after_the_last_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build costs minutes at 1M vectors: too many segments start a rebuild only once the
    pause after the last build (a multiple of its duration) is over. Until then deltas pile
    up, and every vector stays findable."""
    monkeypatch.setattr(vectors, "ANN_MIN_ROWS", 300)
    monkeypatch.setattr(vectors, "OPTIMIZE_APPENDS", 2)
    monkeypatch.setattr(vectors, "ANN_MAX_SEGMENTS", 3)
    monkeypatch.setattr(vectors, "ANN_REBUILD_PAUSE_FACTOR", 1e9)  # never over in this test
    rng = random.Random(11)

    async def body(store: DuckDBStore) -> None:
        await add_messages(store, 320)
        given = await embed_pending(store, rng, batch=1000)
        m = store._vectors.model(MODEL)
        assert m is not None and vectors._index_segments(m.table) == 1
        for i in range(16):
            await add_messages(store, 1, start=10_000 + i)
            given.update(await embed_pending(store, rng))
        assert vectors._index_segments(m.table) > 4  # past the limit: the rebuild waits
        for ident, vector in list(given.items())[-16::3]:
            assert (await store.vector_search(MODEL, vector, limit=1))[0].id == ident
        m.segment_rebuild_after = 0.0  # the pause is over
        await add_messages(store, 1, start=20_000)
        await embed_pending(store, rng)
        assert vectors._index_segments(m.table) == 1

    run(tmp_path / "lore.duckdb", body)


def test_an_unreadable_vector_table_is_embedded_again_durably(tmp_path: Path) -> None:
    rng = random.Random(10)
    path = tmp_path / "lore.duckdb"

    async def first(store: DuckDBStore) -> None:
        await add_messages(store, 4)
        await embed_pending(store, rng)

    async def pending_again(store: DuckDBStore) -> None:
        # The damage is found when the table is first opened (a search, or the indexer's
        # write): an idle gateway's start does not open it (the record in DuckDB answers).
        assert await store.vector_search(MODEL, unit(rng)) == []
        assert len(await store.pending_embeddings(MODEL)) == 4

    async def still_pending(store: DuckDBStore) -> None:
        assert len(await store.pending_embeddings(MODEL)) == 4

    run(path, first)
    (table_dir,) = (tmp_path / "lore.duckdb.vec").glob("*.lance")
    shutil.rmtree(table_dir / "_versions")  # the table's manifests are gone
    run(path, pending_again)
    run(path, still_pending)  # and stays so after a restart, until embedded


def test_an_idle_store_answers_its_vector_counts_without_loading_lancedb(tmp_path: Path) -> None:
    """What a gateway's indexer asks at start (the counts, what is pending) comes from the
    record in DuckDB: with nothing to embed, LanceDB (~85 MB, ~2 s to import) stays unloaded."""
    import subprocess
    import sys

    rng = random.Random(11)
    path = tmp_path / "lore.duckdb"

    async def first(store: DuckDBStore) -> None:
        await add_messages(store, 5)
        await embed_pending(store, rng)

    run(path, first)
    code = (
        "import asyncio, sys\n"
        "from lore_store_duckdb.store import DuckDBStore\n"
        "async def main():\n"
        f"    store = DuckDBStore({str(path)!r})\n"
        "    await store.open()\n"
        f"    stats = (await store.vector_stats({MODEL!r}))[{MODEL!r}]\n"
        f"    pending = await store.pending_embeddings({MODEL!r})\n"
        "    print(stats['vectors'], stats['pending'], len(pending), 'lancedb' in sys.modules)\n"
        "    await store.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5", "0", "0", "False"]
