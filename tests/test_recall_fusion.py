"""Reciprocal rank fusion: the formula, weights, de-duplication and deterministic ties."""

from __future__ import annotations

import pytest

from lore_core.recall.fusion import (
    MULTI_TERM_WEIGHTS,
    RRF_K,
    SINGLE_TERM_WEIGHTS,
    Ranked,
    RankedList,
    fuse,
    list_weights,
)


def ranked(name, ids, weight=1.0):
    return RankedList(name, [Ranked(i, 100.0 - n, {"from": name}) for n, i in enumerate(ids)], weight)


def test_k_is_60_and_scores_follow_the_formula():
    assert RRF_K == 60
    [a, b] = fuse([ranked("x", ["a", "b"])])
    assert a.score == pytest.approx(1 / 61) and b.score == pytest.approx(1 / 62)


def test_agreement_between_lists_wins():
    # "c" is second in both lists; "a" and "x" are first in one list only.
    out = fuse([ranked("bm25", ["a", "c", "d"]), ranked("vec", ["x", "c", "y"])])
    assert out[0].id == "c"
    assert out[0].score == pytest.approx(2 / 62)
    assert out[0].ranks == {"bm25": 2, "vec": 2}


def test_ids_are_unique_across_and_within_lists():
    out = fuse([ranked("one", ["a", "b", "a"]), ranked("two", ["b", "a"])])
    assert sorted(f.id for f in out) == ["a", "b"]
    # The repeat inside "one" does not count twice, nor shift "b"'s rank there.
    a = next(f for f in out if f.id == "a")
    assert a.score == pytest.approx(1 / 61 + 1 / 62)
    assert a.ranks == {"one": 1, "two": 2}


def test_a_repeat_does_not_push_later_items_down():
    [_, b] = fuse([ranked("one", ["a", "a", "b"])])
    assert b.ranks == {"one": 2} and b.score == pytest.approx(1 / 62)


def test_payload_comes_from_the_first_list_that_has_the_id():
    out = fuse([ranked("first", ["a"]), ranked("second", ["b", "a"])])
    assert {f.id: f.payload["from"] for f in out} == {"a": "first", "b": "second"}


def test_weights_scale_contributions_and_zero_weight_lists_are_ignored():
    heavy = fuse([ranked("bm25", ["a"], weight=1.0), ranked("vec", ["b"], weight=0.3)])
    assert [f.id for f in heavy] == ["a", "b"]
    assert heavy[1].score == pytest.approx(0.3 / 61)
    flipped = fuse([ranked("bm25", ["a"], weight=0.3), ranked("vec", ["b"], weight=1.0)])
    assert [f.id for f in flipped] == ["b", "a"]
    assert [f.id for f in fuse([ranked("off", ["z"], weight=0), ranked("on", ["a"])])] == ["a"]


def test_ties_are_broken_by_best_rank_then_first_seen_then_id():
    # Two lists mirroring each other give an exact tie in score (1/61 + 1/62 each).
    out = fuse([ranked("l1", ["a", "b"]), ranked("l2", ["b", "a"])])
    assert out[0].score == pytest.approx(out[1].score)
    assert [f.id for f in out] == ["a", "b"]  # same best rank (1): "a" was seen first
    # Same inputs, other list order: the first-seen rule flips, deterministically.
    assert [f.id for f in fuse([ranked("l2", ["b", "a"]), ranked("l1", ["a", "b"])])] == ["b", "a"]
    # Equal score and best rank from separate lists, equally placed: list order decides.
    out = fuse([ranked("m1", ["z"]), ranked("m2", ["y"])])
    assert [f.id for f in out] == ["z", "y"]


def test_order_is_stable_across_runs():
    lists = [ranked("a", [f"id{i}" for i in range(30)]), ranked("b", [f"id{i}" for i in range(29, -1, -1)])]
    first = [f.id for f in fuse(lists)]
    for _ in range(5):
        assert [f.id for f in fuse(lists)] == first


def test_limit_and_empty_input():
    assert [f.id for f in fuse([ranked("x", ["a", "b", "c"])], limit=2)] == ["a", "b"]
    assert fuse([]) == []
    assert fuse([ranked("x", [])]) == []
    assert fuse([ranked("x", ["a"])], limit=0) == []
    with pytest.raises(ValueError):
        fuse([], k=-1)


def test_single_term_queries_lean_on_bm25():
    assert list_weights(1) == SINGLE_TERM_WEIGHTS
    assert list_weights(0) == SINGLE_TERM_WEIGHTS
    assert list_weights(2) == list_weights(9) == MULTI_TERM_WEIGHTS
    bm25_w, vec_w = SINGLE_TERM_WEIGHTS
    assert bm25_w > vec_w
    # With the single-term weights, BM25's top hit beats the vector list's top hit ...
    out = fuse([ranked("bm25", ["exact"], bm25_w), ranked("vec", ["similar"], vec_w)])
    assert out[0].id == "exact"
    # ... while for a longer query a hit found by the vector list and second in BM25 wins.
    bm25_w, vec_w = MULTI_TERM_WEIGHTS
    out = fuse([ranked("bm25", ["exact", "both"], bm25_w), ranked("vec", ["both"], vec_w)])
    assert out[0].id == "both"


def test_rerank_by_normalised_scores_with_full_text_leading() -> None:
    from lore_core.recall.fusion import RERANK_FULL_TEXT_SHARE, VECTOR, rerank

    text = RankedList("bm25", [Ranked("exact", 30.0), Ranked("both", 6.0), Ranked("tail", 2.0)])
    vectors = RankedList(
        "vec", [Ranked("both", 0.52), Ranked("meaning", 0.50), Ranked("far", 0.2)], method=VECTOR
    )
    lists = [text, vectors]
    # Rank fusion alone: "both" (in both lists) beats the clear first hit of full text.
    assert [f.id for f in fuse(lists)][:2] == ["both", "exact"]
    reranked = rerank(fuse(lists), lists)
    assert [f.id for f in reranked] == ["exact", "both", "meaning", "tail", "far"]
    scores = {f.id: f.score for f in reranked}
    # exact: share x 1; both: share x (4/28) + (1 - share) x 1; meaning: (1 - share) x (0.30/0.32).
    share = RERANK_FULL_TEXT_SHARE
    assert share > 0.5  # full text leads
    assert scores["exact"] == pytest.approx(share)
    assert scores["both"] == pytest.approx(share * 4 / 28 + (1 - share))
    assert scores["meaning"] == pytest.approx((1 - share) * 0.30 / 0.32)
    assert scores["tail"] == scores["far"] == 0.0
    # Equal scores keep the rank-fusion order; a full-text-only search keeps its order.
    alone = rerank(fuse([text]), [text])
    assert [f.id for f in alone] == ["exact", "both", "tail"]


def test_the_full_text_share_is_read_when_reranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark that sets the share measures it (the default was bound once, at import,
    so setting it changed nothing)."""
    import lore_core.recall.fusion as fusion

    text = RankedList("bm25", [Ranked("a", 2.0), Ranked("b", 1.0)])
    vectors = RankedList("vec", [Ranked("b", 0.9), Ranked("a", 0.1)], method=fusion.VECTOR)
    lists = [text, vectors]
    monkeypatch.setattr(fusion, "RERANK_FULL_TEXT_SHARE", 0.8)
    assert [f.id for f in fusion.rerank(fuse(lists), lists)] == ["a", "b"]
    monkeypatch.setattr(fusion, "RERANK_FULL_TEXT_SHARE", 0.2)
    assert [f.id for f in fusion.rerank(fuse(lists), lists)] == ["b", "a"]
    assert [f.id for f in fusion.rerank(fuse(lists), lists, full_text_share=0.8)] == ["a", "b"]
