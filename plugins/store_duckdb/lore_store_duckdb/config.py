"""The ``store-duckdb`` section of ``.lore.json``."""

from __future__ import annotations

import attrs

from lore_core.config import setting

SECTION = "store-duckdb"


@attrs.define
class DuckDBConfig:
    """Settings of the DuckDB store; every field has a working default."""

    # DuckDB's buffer pool, in MiB. DuckDB's own default is 80 % of the machine's RAM, which a
    # gateway that runs all day in the background should not claim: its pages are evicted
    # past this (to the file, or to a temporary file beside it for query intermediates).
    # 0 = DuckDB's default.
    memory_limit_mb: int = setting(1024, low=0, high=1 << 22)
    # DuckDB's worker threads; 0 = DuckDB's default (one per core).
    threads: int = setting(0, low=0, high=256)
