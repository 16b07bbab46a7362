"""How much the approximate vector index loses against exact search, on real embeddings.

Data: the vectors a real-sessions run embedded (``real_sessions.py --keep DIR`` leaves the
gateway's data directory there; ``--vectors DIR/store.vec``, REAL passages of real coding
sessions, all-MiniLM-L6-v2) and the questions of that folder (``--data``, its
``questions.jsonl``), embedded by the same on-device model: the queries recall would send.
Nothing here is generated.

For each layout (partition count and partitions probed) the vectors are copied into a
scratch LanceDB table and indexed ``--builds`` times (k-means differs per build) as the
store indexes them today (IVF-RQ: RaBitQ codes, one bit per dimension) and as it did before
(IVF-PQ, 48 sub-vectors: the same 48 bytes per 384-dim vector), both with the store's exact
re-ranking of 4x the candidates; each question's top 50 is compared with the exact top 50 of
a flat scan (recall@50). The first layout probes every partition (what the codes lose
alone); the others probe a few percent of them, as the store's 24 of ~600 partitions do at
2.4M vectors (what the partitioning loses too). The real sessions hold ~22K passages, so
partitions here are smaller than the store's 4,096 vectors: the figures compare the two
kinds, they do not predict recall at 1M.

    python benchmarks/ann_recall.py --vectors /tmp/lore-real/store.vec --data SESSIONS_DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import lancedb
from lancedb.index import IvfPq
from lore_embed_local import LocalEmbedder
from lore_store_duckdb.vectors import ANN_REFINE_FACTOR, ann_config

TOP = 50


def kinds(partitions: int) -> dict[str, Any]:
    return {
        "IVF-RQ (today)": ann_config(partitions),
        # What the store built before (lore_store_duckdb.vectors at f58bb3f).
        "IVF-PQ (before)": IvfPq(
            distance_type="cosine",
            num_partitions=partitions,
            num_sub_vectors=48,
            max_iterations=10,
            sample_rate=64,
        ),
    }


def top(table: Any, vector: list[float], probes: int | None) -> set[tuple[str, int]]:
    query = table.search(vector, vector_column_name="vector").distance_type("cosine").limit(TOP)
    if probes is None:
        query = query.bypass_vector_index()
    else:
        query = query.nprobes(probes).refine_factor(ANN_REFINE_FACTOR)
    rows = query.select(["item_id", "chunk"]).to_arrow()
    return set(zip(rows["item_id"].to_pylist(), rows["chunk"].to_pylist(), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--vectors", type=Path, required=True, help="a store's .vec directory (real embeddings)"
    )
    parser.add_argument("--data", type=Path, required=True, help="the real-sessions folder (questions.jsonl)")
    parser.add_argument("--builds", type=int, default=3, help="index builds per kind and layout")
    args = parser.parse_args()

    source_db = lancedb.connect(args.vectors)
    names = source_db.list_tables().tables
    if not names:
        raise SystemExit(f"no vector table in {args.vectors}")
    source = max((source_db.open_table(n) for n in names), key=lambda t: t.count_rows())
    data = source.to_arrow().select(["item_id", "chunk", "vector"])
    questions = [json.loads(line)["question"] for line in (args.data / "questions.jsonl").open()]
    queries = asyncio.run(LocalEmbedder().embed(questions))
    rows = data.num_rows
    print(
        f"ANN recall on REAL data: {rows:,} passage vectors of {args.vectors.name}, "
        f"{len(queries)} real questions as queries, recall@{TOP} against a flat scan, "
        f"{args.builds} builds per cell"
    )
    with tempfile.TemporaryDirectory(prefix="lore-ann-") as scratch:
        db = lancedb.connect(scratch)
        exact = db.create_table("exact", data)
        truth = [top(exact, q, None) for q in queries]
        layouts = [(max(1, rows // 4096), 24), (max(2, rows // 512), 2), (max(2, rows // 512), 4)]
        print(f"   {'partitions, probed':22s} {'kind':16s} {'recall@50':>10s}  {'p50 ms':>7s}  builds")
        for partitions, probes in layouts:
            for kind, config in kinds(partitions).items():
                recalls, times = [], []
                for build in range(args.builds):
                    table = db.create_table(f"b{build}", data, mode="overwrite")
                    table.create_index("vector", config=config)
                    for q, expected in zip(queries, truth, strict=True):
                        started = time.perf_counter()
                        found = top(table, q, min(probes, partitions))
                        times.append((time.perf_counter() - started) * 1000)
                        recalls.append(len(found & expected) / max(1, len(expected)))
                    db.drop_table(f"b{build}")
                per_build = [
                    statistics.mean(recalls[i * len(queries) : (i + 1) * len(queries)])
                    for i in range(args.builds)
                ]
                layout = f"{partitions}, {min(probes, partitions)}"
                print(
                    f"   {layout:22s} {kind:16s} {statistics.mean(recalls):10.3f}  "
                    f"{statistics.median(times):7.2f}  {', '.join(f'{r:.3f}' for r in per_build)}"
                )


if __name__ == "__main__":
    main()
