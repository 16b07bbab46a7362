"""Indexing rate: the vector indexer's embedding work on real stored messages, today's rules
against the rules of the facet-rules change that preceded them, in one process.

Embedding is ~96% of the background indexer's time on real coding sessions (py-spy on a
replay: ``Session.run`` of onnxruntime), so the rate of a store's indexing is the rate of
embedding what its rules choose. This script reads the messages of a store that
``real_sessions.py --keep DIR`` kept (``DIR/store``; no gateway may hold it), cuts each into
passages as the indexer does, and embeds with the on-device embedder:

* ``f1``: the rules before (every passage up to 16 an item, whole, and the user's sentences);
* ``f2``: today's (:func:`lore_core.recall.indexer.embedded_passages` /
  :func:`~lore_core.recall.indexer.embedded_texts`: what was said whole, a tool call's or
  output's first piece cut to 600 characters, and the user's sentences).

The two alternate ``--rounds`` times over the same messages, so a busy machine slows both
alike; printed: messages/s, MB/s of message text, texts embedded, and the ratio. Data: the
store's (say which folder it was replayed from).

    python benchmarks/index_rate.py --store /tmp/lore-real/store
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import duckdb
from lore_embed_local.embedder import LocalEmbedder

from lore_core.recall.indexer import DEFAULT_MAX_CHUNKS, embedded_passages, embedded_texts
from lore_core.storage.facets import MAX_FACETS_PER_ITEM, facets
from lore_core.storage.passages import Passage, message_passages
from lore_core.storage.records import VECTOR_MESSAGE, EmbeddingItem


def rules_f1(role: str, passages: list[Passage]) -> list[str]:
    """What the indexer embedded under facet rules ``f1``."""
    chosen = passages if len(passages) <= DEFAULT_MAX_CHUNKS else [*passages[:15], passages[-1]]
    out: list[str] = []
    room = MAX_FACETS_PER_ITEM
    for passage in chosen:
        out.append(passage.text)
        sentences = facets(role, passage)[:room] if room else []
        out.extend(sentences)
        room -= len(sentences)
    return out


def rules_f2(role: str, passages: list[Passage]) -> list[str]:
    item = EmbeddingItem(VECTOR_MESSAGE, "m", "", role=role)
    return [text for _, text in embedded_texts(item, embedded_passages(passages))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a kept store file (DIR/store)")
    parser.add_argument("--messages", type=int, default=1500, help="messages to embed (0: all)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    con = duckdb.connect(str(args.store), read_only=True)
    limit = f" limit {args.messages}" if args.messages else ""
    rows = con.execute(f"select role, blocks, text from messages order by seq{limit}").fetchall()
    con.close()
    cut = [(role, message_passages(role, json.loads(blocks), text), len(text)) for role, blocks, text in rows]
    megabytes = sum(n for _, _, n in cut) / 1e6
    rules = {"f1 (before)": rules_f1, "f2 (today)": rules_f2}
    texts = {name: [t for role, ps, _ in cut for t in pick(role, ps)] for name, pick in rules.items()}
    embedder = LocalEmbedder()
    embedder.embed_blocking(["warm up"])
    seconds: dict[str, list[float]] = {name: [] for name in rules}
    for _ in range(args.rounds):
        for name in rules:
            started = time.perf_counter()
            embedder.embed_blocking(texts[name])
            seconds[name].append(time.perf_counter() - started)
    print(f"store {args.store}: {len(rows)} messages, {megabytes:.2f} MB of text, {args.rounds} rounds")
    base = statistics.median(seconds["f1 (before)"])
    for name in rules:
        s = statistics.median(seconds[name])
        print(
            f"  {name:<12} {len(texts[name]):6} texts, {s:7.1f} s: {len(rows) / s:6.1f} messages/s, "
            f"{megabytes / s:.3f} MB/s ({base / s:.2f}x the rate before)"
        )


if __name__ == "__main__":
    main()
