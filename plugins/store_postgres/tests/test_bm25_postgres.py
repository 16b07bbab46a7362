"""The PostgreSQL store's BM25: the scores it computes, and how it finds candidates (words
most passages hold only score; they find passages when the others find too few)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.store import BM25_B, BM25_K1, COMMON_WORD_SHARE, PostgresStore

from lore_core.model import Exchange
from lore_core.storage.records import SearchHit
from lore_core.testing.builders import batch_of, exchange, text


def _search_after_writing(
    pg_dsn: str, tmp_path: Path, exchanges: list[Exchange], *queries: tuple[str, int]
) -> list[list[SearchHit]]:
    async def body() -> list[list[SearchHit]]:
        store = PostgresStore(PostgresConfig(dsn=pg_dsn, pool_size=2), journal_dir=tmp_path / "journal")
        await store.open()
        try:
            await store.write(batch_of(*exchanges))
            return [await store.search(q, limit=limit) for q, limit in queries]
        finally:
            await store.close()

    return asyncio.run(body())


def test_scores_are_okapi_bm25(pg_dsn: str, tmp_path: Path) -> None:
    # Words PostgreSQL's English configuration keeps as they are (no stemming, no stop word);
    # each message is one passage whose header "[user]" adds the word "user".
    said = ["zebra quokka", "zebra zebra lemur", "lemur okapi okapi okapi"]
    exchanges = [exchange([text("user", s)], session=f"s-{i}", at=float(i)) for i, s in enumerate(said)]
    [hits] = _search_after_writing(pg_dsn, tmp_path, exchanges, ("zebra", 10))
    docs = [["user", *s.split()] for s in said]
    avgdl = sum(map(len, docs)) / len(docs)
    df = sum("zebra" in d for d in docs)
    idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))

    def bm25(doc: list[str]) -> float:
        tf = doc.count("zebra")
        return idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * len(doc) / avgdl))

    assert [h.session_id for h in hits] == ["s-1", "s-0"]
    assert [round(h.score, 6) for h in hits] == [round(bm25(docs[1]), 6), round(bm25(docs[0]), 6)]


def test_common_words_score_but_find_only_when_the_rest_find_too_few(pg_dsn: str, tmp_path: Path) -> None:
    # "build" is in every passage (far over COMMON_WORD_SHARE), "flaky" in two.
    assert COMMON_WORD_SHARE < 0.5
    common = [
        exchange([text("user", f"the build step {i} passed")], session=f"c-{i}", at=float(i))
        for i in range(30)
    ]
    rare = [
        exchange([text("user", "the build failed: a flaky test")], session="r-1", at=100.0),
        exchange([text("user", "flaky again, build red")], session="r-2", at=101.0),
    ]
    two, ten = _search_after_writing(pg_dsn, tmp_path, common + rare, ("flaky build", 2), ("flaky build", 10))
    # Two asked for: the passages with the uncommon word, scored with both words.
    assert {h.session_id for h in two} == {"r-1", "r-2"}
    assert all(h.score > 0 for h in two)
    # Ten asked for: those two found too few, so the common word finds the rest after them.
    assert [h.session_id for h in ten[:2]] == [h.session_id for h in two]
    assert len(ten) == 10 and all(h.session_id.startswith("c-") for h in ten[2:])
