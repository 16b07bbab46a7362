"""Replay recall's ranking over lists captured by ``retrieval_quality.py --dump-lists``.

Embedding the LongMemEval haystacks is most of a ``retrieval_quality.py`` run (about an hour
and a half for all 106 questions on 2 cores without the vector cache); the ranking after the
lists are fetched (fusion, re-ranking, the relevance floor, the kind prior, grouping,
ordering: ``lore_core.recall.ranking.rank``) takes milliseconds. This script feeds the
captured lists of every question through ``rank``, or through a variant of it, and scores
the answers exactly as ``retrieval_quality.py`` does, so an idea about ranking is measured on
all 106 questions in seconds::

    nice .venv/bin/python benchmarks/retrieval_quality.py --questions all --methods hybrid \\
        --cache-dir CACHE --dump-lists LISTS                 # once (~70 s with a warm cache)
    .venv/bin/python benchmarks/rank_replay.py LISTS        # every variant, a few seconds

The ``engine`` row must equal the hybrid column of the run that made the dump (compare the
two; ``tests/test_retrieval_quality_smoke.py`` checks it on a tiny haystack). Variants are
functions below; a new idea is a new function in ``VARIANTS``. What the lists cannot show (a deeper
fetch, another query, another embedding) needs ``retrieval_quality.py`` itself.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

import lore_core.recall.ranking as ranking
from lore_core.recall.ids import parse_id
from lore_core.recall.intent import QueryPlan
from lore_core.recall.intent import parse as parse_intent
from lore_core.recall.ranking import RecallResult
from lore_core.storage.passages import split_key

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_quality import DEFAULT_LIMIT, MAX_LIMIT, mean, ranked_turns, score_question

Variant = Callable[[dict[str, Any], dict[str, Any]], list[RecallResult]]
METRICS = ("turn all@5", "turn all@10", "turn any@10", "turn frac@10", "session all@5", "session all@10")


def engine(dump: dict[str, Any], search: dict[str, Any]) -> list[RecallResult]:
    """What recall answers today."""
    return ranking.rank(search["lists"], intent_of(dump), search["anchor"], search["limit"])


def intent_of(dump: dict[str, Any]) -> QueryPlan:
    """The question's intent as the engine reads it today (parsed again: a dump made by
    older code holds an older ``QueryPlan``). The engine parses the query it was given, which
    here is the question itself."""
    return parse_intent(dump["question"]["question"])


def without_speaker(dump: dict[str, Any], search: dict[str, Any]) -> list[RecallResult]:
    """The engine before 2026-12-05's speaker rule (``_user_said``): every question read as
    if it were not about the user."""
    intent = attrs.evolve(intent_of(dump), about_user=False)
    return ranking.rank(search["lists"], intent, search["anchor"], search["limit"])


def reply_lifts_request(dump: dict[str, Any], search: dict[str, Any]) -> list[RecallResult]:
    """An answer's score also counts for the request it answered (added to it, or the
    request joins the results with it), and answers weigh 0.8: a reply that talks about
    what was asked is evidence the request said it. Measured 2026-12-03: turn all@10
    0.736 -> 0.764, all@5 0.547 -> 0.604, session all@10 unchanged; chosen on these same
    questions, so an upper bound, and not tried on coding sessions (their answers state the
    decisions)."""
    request_of: dict[str, str] = {}
    message_at = {turn: mid for mid, turns in dump["turns_of"].items() for turn in turns}
    for mid, turns in dump["turns_of"].items():
        session, index = turns[0]
        if (session, index - 1) in message_at:
            request_of[mid] = message_at[(session, index - 1)]
    intent = attrs.evolve(intent_of(dump), about_user=False)
    results = ranking.rank(search["lists"], intent, search["anchor"], MAX_LIMIT * 10)
    lifted: dict[str, float] = {}
    for r in results:
        if r.meta.get("role") != "assistant":
            continue
        request = request_of.get(split_key(parse_id(r.id).key)[0])
        if request is not None:
            lifted[request] = max(lifted.get(request, 0.0), r.score)
    out = []
    for r in results:
        score = r.score * (0.8 if r.meta.get("role") == "assistant" else 1.0)
        out.append(attrs.evolve(r, score=score + lifted.pop(split_key(parse_id(r.id).key)[0], 0.0)))
    # Requests not among the results join them (an id the scoring reads as that turn).
    out += [RecallResult(id=f"t:{mid}:0", source="store", score=s, text="") for mid, s in lifted.items()]
    out.sort(key=lambda r: -round(r.score, 12))
    return out[: search["limit"]]


VARIANTS: dict[str, Variant] = {
    "engine": engine,
    "without-speaker": without_speaker,
    "reply-lifts-request": reply_lifts_request,
}


def replay(dumps: Sequence[dict[str, Any]], variant: Variant) -> list[dict[str, float]]:
    scores = []
    for dump in dumps:
        answers = []
        for limit in (DEFAULT_LIMIT, MAX_LIMIT):
            search = dump["searches"][limit]
            answers.append(ranked_turns([r.id for r in variant(dump, search)], dump["turns_of"]))
        scores.append(score_question(dump["question"], answers[0], answers[1]))
    return scores


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lists", help="the directory retrieval_quality.py --dump-lists wrote")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS)
    )
    args = parser.parse_args(argv)
    paths = sorted(Path(args.lists).glob("*.pickle"))
    if not paths:
        print(f"no dumped lists in {args.lists}", file=sys.stderr)
        return 2
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    # Pickles this benchmark wrote itself, on this machine (never load one from elsewhere).
    dumps = [pickle.loads(p.read_bytes()) for p in paths]
    print(f"LongMemEval-S, {len(dumps)} question(s) replayed from {args.lists}")
    print("| variant | " + " | ".join(METRICS) + " |")
    print("| --- | " + " | ".join("---:" for _ in METRICS) + " |")
    per_type: dict[str, dict[str, list[float]]] = {}
    for name in names:
        scores = replay(dumps, VARIANTS[name])
        print(f"| {name} | " + " | ".join(f"{mean([s[m] for s in scores]):.3f}" for m in METRICS) + " |")
        groups: dict[str, list[float]] = defaultdict(list)
        for dump, s in zip(dumps, scores, strict=True):
            groups[dump["question"]["question_type"]].append(s["turn all@10"])
        per_type[name] = {t: v for t, v in groups.items()}
    print()
    print("| question type (n) | turn all@10: " + " | ".join(names) + " |")
    print("| --- | " + " | ".join("---:" for _ in names) + " |")
    for qtype in sorted(per_type[names[0]]):
        n = len(per_type[names[0]][qtype])
        print(f"| {qtype} ({n}) | " + " | ".join(f"{mean(per_type[v][qtype]):.3f}" for v in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
