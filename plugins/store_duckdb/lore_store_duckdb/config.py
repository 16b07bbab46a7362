"""The ``store-duckdb`` section of ``.lore.json``."""

from __future__ import annotations

import attrs

from lore_core.config import setting

SECTION = "store-duckdb"


@attrs.define
class DuckDBConfig:
    """Settings of the DuckDB store; every field has a working default."""

    # DuckDB's buffer pool, in MiB; 0 = DuckDB's default (80 % of the machine's RAM). Off by
    # default: DuckDB keeps its primary-key indexes in this pool and refuses writes once they
    # need more ("Out of Memory Error: failed to allocate ...": 100 MiB failed before 3M
    # messages' ids were in), so a cap must leave room for the store's growth. Pages past
    # the cap are evicted to the file or spilled to a temporary file beside it.
    memory_limit_mb: int = setting(0, low=0, high=1 << 22)
    # Table pages DuckDB keeps in memory beyond what it cannot evict (its primary-key
    # indexes, rows not yet checkpointed), in MiB: after a write (at most once a second) the
    # store evicts the pages past it, so the pool stops growing with the data. 0 = never
    # trim (pages stay until memory_limit forces them out).
    page_cache_mb: int = setting(64, low=0, high=1 << 22)
    # DuckDB's worker threads; 0 = DuckDB's default (one per core).
    threads: int = setting(0, low=0, high=256)
    # LanceDB's cache of index pieces (full-text postings, ANN partitions, filter indexes),
    # in MiB, shared by both indexes of every store in the process (the first store created
    # sets it). What falls out is read from disk and decoded again: at 1M messages the
    # indexes hold ~420 MB and a 64 MiB cache cost recall ~10-15 ms p50 (full text alone
    # 48 -> 37 ms at 256 MiB). Every write adds a table version whose pieces also fill it,
    # so a long-running gateway holds up to this much.
    index_cache_mb: int = setting(256, low=16, high=1 << 20)
    # LanceDB's cache of table metadata (manifests, and each data file's page layout, which
    # every random read of a passage or a vector hit consults), in MiB, shared and set like
    # index_cache_mb. At 1M messages recall used ~70 MiB of it: at 32 MiB (the value before
    # the setting) hybrid recall took 73-77 ms p50, at 256 MiB 58-62 (benchmarks/README.md).
    metadata_cache_mb: int = setting(256, low=8, high=1 << 20)
