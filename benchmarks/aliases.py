"""Alias expansion on LongMemEval: does a question that names something by another name still
find the evidence, once the entity is known?

Without a worker model no entity exists on this data (nothing extracts them from text on its
own), so recall is exactly what it was: alias expansion is a no-op. To measure what it does
once entities exist, this gives some questions an alias the haystack never uses:

1. For each selected question (``retrieval_quality.select_questions``: stratified, fixed), the
   *name* is the longest capitalised word of the question (4+ letters, not its first word)
   that occurs, as a whole word, in one of the question's evidence turns. Questions without
   one are left out (the count is printed).
2. The *alias* is a made-up token (``<first 3 letters>`` + 2 digits from a hash of the
   name) that occurs nowhere in the haystack, as a nickname would not.
3. The haystack is stored in a fresh DuckDB store (``retrieval_quality.ingest``: what the
   gateway stores), and the product's recall engine (``store_recall_engine``, full text only:
   no embedder, so each question takes well under a second) answers four ways, in one run:

   * ``original``: the question as asked, no entity (today's recall, the baseline);
   * ``original+entity``: the same with the entity ``{name, aliases: [alias]}`` known (the
     expansion searches the alias too, which matches nothing: it must cost nothing);
   * ``alias``: the question with the name replaced by the alias, no entity;
   * ``alias+entity``: the same with the entity known: what alias expansion recovers.

Metrics as in ``retrieval_quality.py`` (turn and session any/all/frac at 5 and 10).

Run by hand from the repository root::

    nice .venv/bin/python benchmarks/aliases.py --data /path/to/longmemeval --questions 60
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retrieval_quality import (
    DATA_DIR,
    KS,
    ingest,
    iter_haystacks,
    load_questions,
    mean,
    project_of,
    ranked_turns,
    score_question,
    select_questions,
)

from lore_core.knowledge.entities import EntityBook
from lore_core.recall.engine import DEFAULT_LIMIT, MAX_LIMIT
from lore_core.recall.store_engine import store_recall_engine

CONDITIONS = ("original", "original+entity", "alias", "alias+entity")
_CAPITAL = re.compile(r"\b[A-Z][A-Za-z]{3,}\b")
_FIRST_WORD = re.compile(r"^\W*(\w+)")


def plain_questions(data: Path) -> list[dict[str, Any]]:
    """``questions.jsonl`` (or the shipped ``questions.jsonl.gz`` layout)."""
    if (data / "questions.jsonl").exists():
        with open(data / "questions.jsonl", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    return load_questions(data)


def plain_haystacks(data: Path, wanted: set[str]) -> Iterator[dict[str, Any]]:
    if not (data / "haystack.jsonl").exists():
        yield from iter_haystacks(wanted, data)
        return
    opener = gzip.open if (data / "haystack.jsonl").suffix == ".gz" else open
    with opener(data / "haystack.jsonl", "rt", encoding="utf-8") as f:
        for line in f:
            head = line[:200]
            if any(f'"{qid}"' in head for qid in wanted):
                h = json.loads(line)
                if h["question_id"] in wanted:
                    yield h


def evidence_text(question: dict[str, Any], haystack: dict[str, Any]) -> str:
    turns = {(e["session_id"], e["turn_index"]) for e in question["evidence_turns"]}
    return "\n".join(
        t["content"]
        for s in haystack["sessions"]
        for i, t in enumerate(s["turns"])
        if (s["session_id"], i) in turns
    )


def pick_name(question: dict[str, Any], haystack: dict[str, Any]) -> str | None:
    text = question["question"]
    first = _FIRST_WORD.match(text)
    evidence = evidence_text(question, haystack)
    candidates = [m.group(0) for m in _CAPITAL.finditer(text) if not (first and m.start() == first.start(1))]
    found = [c for c in candidates if re.search(rf"(?<!\w){re.escape(c)}(?!\w)", evidence, re.I)]
    return max(found, key=len) if found else None


def make_alias(name: str, haystack: dict[str, Any]) -> str | None:
    everything = "\n".join(t["content"] for s in haystack["sessions"] for t in s["turns"]).lower()
    for salt in range(20):
        digest = int(hashlib.sha256(f"{name}:{salt}".encode()).hexdigest(), 16)
        alias = f"{name[:3].lower()}{digest % 100:02d}"
        if not re.search(rf"(?<!\w){re.escape(alias)}(?!\w)", everything):
            return alias
    return None


async def run_question(
    question: dict[str, Any], haystack: dict[str, Any], workdir: Path
) -> dict[str, Any] | None:
    from lore_store_duckdb.store import DuckDBStore

    name = pick_name(question, haystack)
    alias = make_alias(name, haystack) if name else None
    if name is None or alias is None:
        return None
    aliased = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", alias, question["question"])
    path = workdir / question["question_id"] / "lore.duckdb"
    store = DuckDBStore(path)
    await store.open()
    try:
        turns_of = await ingest(store, haystack)
        project = project_of(question["question_id"])
        book = EntityBook(store)
        engine = store_recall_engine(store, entities=book)
        scores: dict[str, dict[str, float]] = {}
        timings: dict[str, float] = {}
        applied: dict[str, int] = {}
        # The conditions without the entity first: it is then created, once, through the book.
        for condition in ("original", "alias", "original+entity", "alias+entity"):
            if condition == "original+entity":
                made = await book.create(project=project, name=name, kind="other", aliases=[alias])
                assert made.entity is not None, made.reason
            text = aliased if condition.startswith("alias") else question["question"]
            started = time.perf_counter()
            shallow = await engine.search(text, "project", None, project, DEFAULT_LIMIT)
            deep = await engine.search(text, "project", None, project, MAX_LIMIT)
            timings[condition] = (time.perf_counter() - started) / 2
            applied[condition] = len(shallow.metadata.get("aliases", []))
            scores[condition] = score_question(
                question,
                ranked_turns([r.id for r in shallow.results], turns_of),
                ranked_turns([r.id for r in deep.results], turns_of),
            )
        return {"name": name, "alias": alias, "scores": scores, "timings": timings, "applied": applied}
    finally:
        await store.close()
        shutil.rmtree(path.parent, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> None:
    questions = select_questions(plain_questions(args.data), args.questions)
    wanted = {q["question_id"] for q in questions}
    by_id = {q["question_id"]: q for q in questions}
    workdir = Path(tempfile.mkdtemp(prefix="lore-aliases-"))
    rows: list[dict[str, Any]] = []
    skipped = 0
    try:
        for haystack in plain_haystacks(args.data, wanted):
            question = by_id[haystack["question_id"]]
            row = await run_question(question, haystack, workdir)
            if row is None:
                skipped += 1
                continue
            rows.append(row)
            if not args.quiet:
                s = row["scores"]
                print(
                    f"{question['question_id']}: {row['name']!r} -> {row['alias']!r}  turn any@10 "
                    + " ".join(f"{c}={s[c]['turn any@10']:.0f}" for c in CONDITIONS),
                    flush=True,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"\ndata: {args.data} ({len(questions)} questions selected; {len(rows)} name a word of their "
        f"evidence and were aliased, {skipped} left out); recall: full text only (no embedder)"
    )
    metrics = [f"{level} {m}@{k}" for level in ("turn", "session") for k in KS for m in ("any", "frac")]
    print(f"{'condition':<17}" + "".join(f"{m:>17}" for m in metrics) + f"{'ms/search':>11}{'expanded':>10}")
    for condition in CONDITIONS:
        values = [mean([r["scores"][condition][m] for r in rows]) for m in metrics]
        ms = mean([r["timings"][condition] for r in rows]) * 1000
        expanded = sum(1 for r in rows if r["applied"][condition])
        print(f"{condition:<17}" + "".join(f"{v:>17.3f}" for v in values) + f"{ms:>11.1f}{expanded:>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA_DIR, help="the LongMemEval folder")
    parser.add_argument("--questions", type=int, default=60, help="questions selected (stratified)")
    parser.add_argument("--quiet", action="store_true", help="no per-question lines")
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"no data at {args.data}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
