"""Reciprocal rank fusion of result lists.

Each list (BM25 of one source, vectors of one source, a list per query rephrasing) ranks
its own items; scores of different lists are not comparable (BM25 is unbounded, cosine is
in [-1, 1]), so fusion uses ranks only::

    score(id) = sum over lists containing id of  weight(list) / (k + rank(id in list))

with ``k = 60`` (Cormack et al. 2009) and ranks starting at 1. An id found by several lists
is one result whose score adds up: that agreement is the point of fusing.

The fused candidates are then re-ranked (:func:`rerank`) by a convex combination of each
list's own scores, normalised within the list, with the full-text lists weighing
:data:`RERANK_FULL_TEXT_SHARE` and the vector lists the rest. Rank fusion alone lets any item
both lists hold somewhere in their top 30 outrank the first hit of one list alone (2/90 >
1/61), which buries exact matches (a number, a date, a name) the embedding cannot see, and
the paraphrases only the embedding finds; the scores keep how far ahead a first hit is.

Ties are broken deterministically so the same inputs always give the same order (the
result text goes into the conversation, and a reshuffle would break the prompt cache):
higher fused score, then the better single rank anywhere, then the order first seen (lists
in the order given, items in list order), then the id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

RRF_K = 60
#: Share of the re-ranking score that comes from the full-text lists (the vector lists get
#: the rest). Lexical evidence leads: the on-device embedding model is small, and coding
#: sessions are full of identifiers, paths and numbers. Measured on LongMemEval
#: (benchmarks/retrieval_quality.py): with passage vectors only, 0.7-0.8 beat both legs
#: alone and 0.65 and below trailed full text at 5 results; once the user's sentences got
#: vectors of their own (facets) the vector leg alone rose from 0.585 to 0.755 turn all@10,
#: and 0.6 beat 0.7 (0.792 vs 0.764) without a question type worse than before.
RERANK_FULL_TEXT_SHARE = 0.6

#: Weights of the full-text and vector lists by query length. A single-term query is
#: usually a name (an identifier, a file, an error code) whose exact matches matter, and an
#: embedding of one word has little context to place it, so full text dominates; from two
#: terms on both signals count equally.
SINGLE_TERM_WEIGHTS = (1.0, 0.3)  # (bm25, vector)
MULTI_TERM_WEIGHTS = (1.0, 1.0)
#: Lists answering an LLM rephrasing count half as much as the user's own words: a
#: rephrasing may drift from what was asked.
EXPANSION_WEIGHT = 0.5

BM25 = "bm25"
VECTOR = "vector"


@attrs.frozen
class Ranked:
    """One item of one result list. ``score`` is the list's own score (shown, not fused)."""

    id: str
    score: float
    payload: Any = None


@attrs.define
class RankedList:
    name: str
    items: Sequence[Ranked]
    weight: float = 1.0
    # BM25 or VECTOR; informational (weights are already applied via ``weight``).
    method: str = BM25


@attrs.define
class Fused:
    id: str
    score: float
    payload: Any
    # List name -> 1-based rank of this id in it.
    ranks: dict[str, int] = attrs.field(factory=dict)

    @property
    def best_rank(self) -> int:
        return min(self.ranks.values()) if self.ranks else 0


def list_weights(term_count: int) -> tuple[float, float]:
    """``(bm25_weight, vector_weight)`` for a query of ``term_count`` informative terms:
    single-term queries lean on BM25 (see :data:`SINGLE_TERM_WEIGHTS`)."""
    return SINGLE_TERM_WEIGHTS if term_count <= 1 else MULTI_TERM_WEIGHTS


def fuse(lists: Iterable[RankedList], k: int = RRF_K, limit: int | None = None) -> list[Fused]:
    """Fuse ranked lists by weighted RRF; each id appears once in the answer.

    Within one list a repeated id keeps only its first (best) rank. The payload of a result
    is taken from the first list, in the order given, that contains it; callers pass the
    most trusted lists first. Lists with a weight of zero or less are ignored.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    fused: dict[str, Fused] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    for list_index, ranked in enumerate(lists):
        if ranked.weight <= 0:
            continue
        seen_here: set[str] = set()
        rank = 0
        for position, item in enumerate(ranked.items):
            if item.id in seen_here:
                continue
            seen_here.add(item.id)
            rank += 1
            entry = fused.get(item.id)
            if entry is None:
                entry = fused[item.id] = Fused(item.id, 0.0, item.payload)
                first_seen[item.id] = (list_index, position)
            entry.score += ranked.weight / (k + rank)
            # Two lists may share a name (a caller's mistake); keep the better rank.
            entry.ranks[ranked.name] = min(rank, entry.ranks.get(ranked.name, rank))
    # Rounded so that equal sums reached in a different order (float addition is not
    # associative) still tie and fall through to the deterministic tie-breaks.
    ordered = sorted(fused.values(), key=lambda f: (-round(f.score, 12), f.best_rank, first_seen[f.id], f.id))
    return ordered if limit is None else ordered[: max(0, limit)]


def rerank(
    fused: Sequence[Fused], lists: Iterable[RankedList], full_text_share: float | None = None
) -> list[Fused]:
    """Order fused results by ``sum over lists of weight x method share x normalised score``.

    Each list's own scores are min-max normalised within that list (its best item 1, its
    last 0; an item the list does not hold counts 0), so unbounded BM25 scores and cosines
    become comparable. The method share is ``full_text_share`` for BM25 lists and the rest
    for vector lists; list weights (single-term queries, rephrasings) apply on top. Equal
    scores keep the rank-fusion order. Each result's ``score`` becomes its re-ranking score.
    """
    if full_text_share is None:
        full_text_share = RERANK_FULL_TEXT_SHARE  # read at the call: a benchmark may set it
    contributions: dict[str, float] = {}
    for ranked in lists:
        if ranked.weight <= 0 or not ranked.items:
            continue
        share = full_text_share if ranked.method == BM25 else 1.0 - full_text_share
        scores: dict[str, float] = {}
        for item in ranked.items:
            scores.setdefault(item.id, item.score)  # a repeated id keeps its first (best) score
        low, high = min(scores.values()), max(scores.values())
        spread = high - low
        for item_id, score in scores.items():
            normalised = (score - low) / spread if spread > 0 else 1.0
            contributions[item_id] = contributions.get(item_id, 0.0) + ranked.weight * share * normalised
    # Built directly: attrs.evolve costs ~6 us a result, twice per search over ~80 of them.
    reranked = [Fused(f.id, contributions.get(f.id, 0.0), f.payload, f.ranks) for f in fused]
    # sorted() is stable: equal scores stay in rank-fusion order.
    return sorted(reranked, key=lambda f: -round(f.score, 12))
