"""What the DuckDB store's page-cache trim (``store-duckdb.pageCacheMb``) costs and saves.

GENERATED DATA: messages of random text (70 % ~400 characters, 20 % ~2K, 10 % ~8K) in 2,000
sessions. A store is bulk-loaded, then opened once without the trim (``pageCacheMb: 0``,
DuckDB keeps every page until 80 % of RAM) and once with it, alternately, and the same
work runs on each: a write of 50 messages (as the writer sends them), then ``get_messages``
of 20 random stored ids (what opening recall results reads from DuckDB; recall's search
itself reads the LanceDB indexes, not these pages), a second apart so every write is
followed by a trim. Printed: the lookup's p50 / max and DuckDB's pool (``duckdb_memory()``)
at the end, for each.

    python benchmarks/page_cache.py                     # 300K messages, ~4 minutes
    python benchmarks/page_cache.py --messages 100000 --queries 20
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import statistics
import tempfile
import time
from pathlib import Path

from lore_store_duckdb.config import DuckDBConfig
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.records import StoredMessage, WriteBatch


def messages(batch: int, count: int, rng: random.Random) -> list[StoredMessage]:
    return [
        StoredMessage(
            id=f"{batch:06d}{i:06d}{secrets.token_hex(10)}",
            session_id=f"s-{rng.randrange(2000)}",
            parent_id=None,
            position=i,
            role="user",
            text=secrets.token_urlsafe(rng.choice([300] * 7 + [1500] * 2 + [6000])),
        )
        for i in range(count)
    ]


async def open_store(path: Path, page_cache_mb: int) -> DuckDBStore:
    store = DuckDBStore(path, DuckDBConfig(page_cache_mb=page_cache_mb))
    await store.open()
    return store


async def lookups(path: Path, page_cache_mb: int, queries: int, first_batch: int, ids: list[str]) -> str:
    rng = random.Random(first_batch)
    store = await open_store(path, page_cache_mb)
    try:
        took = []
        for q in range(queries):
            await store.write(WriteBatch(messages=messages(first_batch + q, 50, rng)))
            started = time.perf_counter()
            found = await store.get_messages(rng.sample(ids, 20))
            took.append((time.perf_counter() - started) * 1000)
            assert len(found) == 20
            await asyncio.sleep(1.05)  # the trim follows a write at most once a second
        pool = {k: v for k, v in store._memory_mib().items() if v >= 1}
        return (
            f"pageCacheMb={page_cache_mb:<3} get_messages(20 random ids) "
            f"p50 {statistics.median(took):5.1f} ms, max {max(took):5.1f} ms; "
            f"DuckDB's pool at the end (MiB): {pool}"
        )
    finally:
        await store.close()


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lore.duckdb"
        store = await open_store(path, 0)
        ids: list[str] = []
        for batch in range(args.messages // 3000):
            rows = messages(batch, 3000, rng)
            ids.extend(m.id for m in rows)
            await store.write(WriteBatch(messages=rows))
        await store.close()
        print(
            f"GENERATED DATA: {len(ids):,} messages, a {path.stat().st_size / 2**20:,.0f} MiB file; "
            f"{args.queries} lookups per run, a write before each"
        )
        for run in range(args.rounds):
            for cache in (0, args.page_cache_mb):
                print(await lookups(path, cache, args.queries, 100_000 * (run * 2 + (cache > 0) + 1), ids))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--queries", type=int, default=40, help="lookups per run (one a second)")
    parser.add_argument("--rounds", type=int, default=2, help="runs without and with the trim, alternately")
    parser.add_argument("--page-cache-mb", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
