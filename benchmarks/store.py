"""Store benchmark: ingestion through the real writer queue, search latency, index upkeep.

For each level (10k, 100k, 1M stored messages of ~400 chars, generated) it measures:

* ingestion: messages/s from ``StoreWriter.submit`` of generated exchanges (20 messages each:
  19 sent + 1 answer) until the writer is idle, i.e. every message committed in DuckDB, with
  the message ids, masking and batching of the real path. Baseline in the same run: the same
  rows inserted straight into a bare DuckDB table as Arrow batches (the floor of the engine).
* index upkeep: the time to bring the LanceDB index fully current (catch up + optimize)
  after the load, how many background optimisations ran during it, and the rate with that
  time included (messages / (load + catch-up)). The index is derived and may lag the load;
  searches meanwhile stay complete (they catch up first) but scan the unmerged rows.
* search: p50/p99 of ``store.search`` (what ``lore search`` runs, minus process start) for
  one- and two-word queries. Baseline: the same queries as a DuckDB ``ILIKE`` scan.

Targets (issue 3): >= 5,000 messages/s ingestion; search p50 <= 50 ms at 1M messages.

    .venv/bin/python benchmarks/store.py                 # 10k and 100k (~1 minute)
    .venv/bin/python benchmarks/store.py --levels 1m     # several minutes, ~3 GB of memory
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
from lore_store_duckdb.store import DuckDBStore

from lore_core.config import StoreConfig
from lore_core.model import TEXT, AssistantMessage, Block, Exchange, Message, RequestView, Usage
from lore_core.storage.writer import StoreWriter

LEVELS = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}
PER_EXCHANGE = 20


def make_vocab(rng: random.Random, size: int = 30_000) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(size)})
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf-like, as in prose
    return words, weights


def make_texts(rng: random.Random, words: list[str], weights: list[float], count: int) -> list[str]:
    # Cumulative weights once: passing `weights` makes every call re-add 30K floats, which
    # made generating the texts take longer than storing them.
    cum = list(itertools.accumulate(weights))
    return [" ".join(rng.choices(words, cum_weights=cum, k=62))[:400] for _ in range(count)]


def exchanges(total: int, pool: list[str], rng: random.Random) -> list[Exchange]:
    out = []
    n = 0
    for e in range(total // PER_EXCHANGE):
        msgs = []
        for i in range(PER_EXCHANGE - 1):
            role = "user" if i % 2 == 0 else "assistant"
            msgs.append(Message(role, [Block(TEXT, text=f"{rng.choice(pool)} m{n}")]))
            n += 1
        view = RequestView(api="anthropic-messages", raw={}, body=b"", model="bench-model", messages=msgs)
        answer = AssistantMessage(
            blocks=[Block(TEXT, text=f"{rng.choice(pool)} m{n}")],
            usage=Usage(10, 5),
            model="bench-model",
            complete=True,
        )
        n += 1
        ex = Exchange(
            api="anthropic-messages",
            path="/v1/messages",
            request=view,
            harness="bench",
            session_id=f"bench-{e}",
            project=f"/bench/p{e % 20}",
            upstream="http://upstream.invalid",
            status=200,
            response=answer,
        )
        ex.finished_at = ex.started_at
        out.append(ex)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def run_level(name: str, total: int, workdir: Path, queries: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    words, weights = make_vocab(rng)
    pool = make_texts(rng, words, weights, 20_000)
    work = exchanges(total, pool, rng)
    db = workdir / name / "lore.duckdb"

    # -- ingestion through the real queue -----------------------------------------------------
    store = DuckDBStore(db)
    writer = StoreWriter(store, StoreConfig(flush_interval_ms=250, max_pending_messages=10 * total))
    await writer.start()
    started = time.perf_counter()
    # Process CPU time (all threads: conversion, DuckDB, the index thread) is far less
    # sensitive than wall time to other work on a shared machine.
    cpu_started = time.process_time()
    for i, ex in enumerate(work):
        writer.submit(ex)
        if i % 50 == 0:
            await asyncio.sleep(0)  # the gateway's loop would interleave requests likewise
    await writer.wait_idle(timeout=3600)
    ingest_s = time.perf_counter() - started
    ingest_cpu_s = time.process_time() - cpu_started
    assert writer.stats["messages_written"] == total, writer.stats
    index_health = store.health()["index"]

    started = time.perf_counter()
    await store.sync_index(optimize=True)
    index_s = time.perf_counter() - started

    # -- search ---------------------------------------------------------------------------------
    common = words[:2000]
    qs = [" ".join(rng.sample(common, rng.choice((1, 2)))) for _ in range(queries)]
    for q in qs[:5]:
        await store.search(q)  # warm caches
    lat = []
    for q in qs:
        t0 = time.perf_counter()
        await store.search(q, limit=10)
        lat.append((time.perf_counter() - t0) * 1000)
    filtered = []
    for q in qs[: queries // 2]:
        t0 = time.perf_counter()
        await store.search(q, project="/bench/p3", limit=10)
        filtered.append((time.perf_counter() - t0) * 1000)
    size = (await store.stats())["size_bytes"]
    await writer.stop()

    # -- baselines ------------------------------------------------------------------------------
    texts = [b.text for ex in work for m in ex.request.messages for b in m.blocks] + [
        ex.response.blocks[0].text for ex in work if ex.response
    ]
    base_path = workdir / name / "baseline.duckdb"
    con = duckdb.connect(str(base_path))
    con.execute("CREATE TABLE m (id VARCHAR, text VARCHAR)")
    started = time.perf_counter()
    for i in range(0, len(texts), 5000):
        chunk = pa.table(  # noqa: F841 (DuckDB reads it by name)
            {"id": [str(j) for j in range(i, i + len(texts[i : i + 5000]))], "text": texts[i : i + 5000]}
        )
        con.execute("INSERT INTO m SELECT * FROM chunk")
    base_ingest_s = time.perf_counter() - started
    scan = []
    for q in qs[: min(queries, 30)]:
        t0 = time.perf_counter()
        con.execute(
            "SELECT id FROM m WHERE " + " OR ".join("text ILIKE ?" for _ in q.split()) + " LIMIT 10",
            [f"%{w}%" for w in q.split()],
        ).fetchall()
        scan.append((time.perf_counter() - t0) * 1000)
    con.close()

    return {
        "messages": total,
        "ingest_msgs_per_s": total / ingest_s,
        "ingest_cpu_us_per_msg": ingest_cpu_s / total * 1e6,
        "baseline_msgs_per_s": total / base_ingest_s,
        "background_optimizations": index_health.get("optimizations", 0) if index_health else 0,
        "index_catchup_s": index_s,
        "search_p50_ms": statistics.median(lat),
        "search_p99_ms": pct(lat, 0.99),
        "filtered_p50_ms": statistics.median(filtered),
        "scan_p50_ms": statistics.median(scan),
        "size_mb": size / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="10k,100k", help="comma-separated: 10k,100k,1m")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    levels = [lv.strip().lower() for lv in args.levels.split(",") if lv.strip()]
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lore-store-bench-"))
    try:
        for level in levels:
            r = asyncio.run(run_level(level, LEVELS[level], workdir, args.queries, args.seed))
            print(f"== {level}: {r['messages']:,} messages, store {r['size_mb']:.0f} MB")
            print(
                f"  ingestion      {r['ingest_msgs_per_s']:>10,.0f} msg/s through the writer queue "
                f"(bare DuckDB Arrow insert: {r['baseline_msgs_per_s']:,.0f} msg/s, "
                f"ratio {r['ingest_msgs_per_s'] / r['baseline_msgs_per_s']:.2f}; target >= 5,000); "
                f"{r['ingest_cpu_us_per_msg']:.0f} us CPU per message"
            )
            searchable = r["messages"] / (r["messages"] / r["ingest_msgs_per_s"] + r["index_catchup_s"])
            print(
                f"  index upkeep   {r['background_optimizations']} background optimisations during the load; "
                f"{r['index_catchup_s']:.2f} s to make the index fully current afterwards "
                f"(load + catch-up: {searchable:,.0f} msg/s)"
            )
            print(
                f"  search         p50 {r['search_p50_ms']:.1f} ms, p99 {r['search_p99_ms']:.1f} ms "
                f"(project filter p50 {r['filtered_p50_ms']:.1f} ms; DuckDB ILIKE scan p50 "
                f"{r['scan_p50_ms']:.1f} ms, {r['scan_p50_ms'] / r['search_p50_ms']:.1f}x slower; "
                "target p50 <= 50 ms)",
                flush=True,
            )
    finally:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
