"""One LanceDB connection factory for the full-text and the vector index.

LanceDB keeps a cache of index pieces and table metadata per session, one entry per table
version and piece, and its default limits are in gigabytes: under steady appends (every
store write adds a table version) it grew by ~54 MiB in 140 s of a load soak and was bounded
only far above what a gateway should hold. Both indexes share one session with bounded
caches; what falls out is read from disk again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from lore_store_duckdb.config import DuckDBConfig

#: Bytes LanceDB may cache for index pieces and for table metadata (the first store created
#: sets both from its ``index_cache_mb`` and ``metadata_cache_mb`` settings: :func:`configure`).
INDEX_CACHE_BYTES = DuckDBConfig().index_cache_mb * 1024 * 1024
METADATA_CACHE_BYTES = DuckDBConfig().metadata_cache_mb * 1024 * 1024

_session: Any = None
_configured = False


def configure(index_cache_bytes: int, metadata_cache_bytes: int) -> None:
    """The caches' bounds for the process's one session: the first call sets them, later
    ones change nothing (as the session, once made, would not)."""
    global INDEX_CACHE_BYTES, METADATA_CACHE_BYTES, _configured
    if not _configured and _session is None:
        INDEX_CACHE_BYTES, METADATA_CACHE_BYTES = index_cache_bytes, metadata_cache_bytes
        _configured = True


def connect(path: Path | str) -> Any:
    """``lancedb.connect(path)`` on the shared, bounded session."""
    global _session
    import lancedb  # ~2 s to import: only when an index is first needed

    if _session is None:
        _session = lancedb.Session(
            index_cache_size_bytes=INDEX_CACHE_BYTES, metadata_cache_size_bytes=METADATA_CACHE_BYTES
        )
    return lancedb.connect(str(path), session=_session)


def cache_usage() -> dict[str, float] | None:
    """What the shared session's caches hold now (MiB, entries); None before the first
    connection. Both are bounded (the constants above): a soak reads this to tell a cache
    filling up from memory that grows without bound."""
    if _session is None:
        return None
    return {"mib": round(_session.size_bytes / 2**20, 1), "entries": int(_session.approx_num_items)}


def run_query(table: Any, build: Callable[[Any], Any]) -> Any:
    """Run the query ``build`` makes of ``table``'s async query builder, from the calling
    (worker) thread, on LanceDB's own event loop; the rows as an Arrow table.

    The synchronous builder (``table.search(...)``) asks LanceDB for the table's schema
    three times per query (lancedb 0.40 checks every query for blob columns), each a round
    trip to LanceDB's event-loop thread: ~2 ms of wall time and ~2.5 ms of CPU of a
    1M-message ANN search (benchmarks/README.md, seventh session). The async builder of the
    same table runs the same query without them. It reaches ``LanceTable._table`` and
    ``lancedb.background_loop.LOOP``, private in lancedb 0.40 (pinned in pyproject.toml):
    every search test fails if either moves.
    """
    from lancedb.background_loop import LOOP

    return LOOP.run(build(table._table.query()).to_arrow())


# ---------------------------------------------------------------------------------------------
# Rows gone for good (lore forget)
# ---------------------------------------------------------------------------------------------
#
# A LanceDB delete only marks rows deleted (a deletion file beside the fragment): the rows
# stay in the fragment's data file until a compaction rewrites it, which LanceDB's optimize()
# does only for fragments that are small or have more than 10% of their rows deleted (its
# options are not reachable without pylance). Old versions keep every earlier file until a
# cleanup removes them. So after a forget, the fragments that still carry deletions are
# rewritten here: their live rows are read, the fragment is deleted whole and the rows are
# appended again; an optimize then drops the empty fragments and, with a cleanup of every
# old version, the files that held the forgotten rows.


def _fragments_with_deletions(table_dir: Path) -> list[int]:
    """Fragment ids with a deletion file in the table's current files (after a cleanup of old
    versions, only the current version's remain). Lance names them
    ``_deletions/<fragment>-<read version>-<random>.{arrow,bin}``."""
    found: set[int] = set()
    try:
        names = [p.name for p in (table_dir / "_deletions").iterdir()]
    except FileNotFoundError:
        return []
    for name in names:
        head = name.split("-", 1)[0]
        if not head.isdigit():
            raise RuntimeError(f"unexpected LanceDB deletion file {name!r} in {table_dir}")
        found.add(int(head))
    return sorted(found)


def remove_for_good(table: Any, table_dir: Path, where: str) -> int:
    """Delete the rows ``where`` selects from ``table`` (stored at ``table_dir``) and leave no
    file holding them; returns the rows deleted. Nothing else may write the table meanwhile
    (the caller holds its locks): every old version is cleaned up at once.

    Indexes are not rebuilt here: a caller whose index holds the rows' content (a full-text
    index's terms) rebuilds it, then calls :func:`drop_old_versions`."""
    count = int(table.count_rows(where))
    if not count:
        return 0
    table.delete(where)
    drop_old_versions(table)
    for fragment in _fragments_with_deletions(table_dir):
        # A row id is the fragment id in the high 32 bits and the row's offset in the low
        # ones (LanceDB's default: no stable row ids).
        rows = f"_rowid >= {fragment << 32} AND _rowid < {(fragment + 1) << 32}"
        live = table.search().where(rows).with_row_id(True).limit(None).to_arrow().drop_columns(["_rowid"])
        table.delete(rows)
        if live.num_rows:
            table.add(live)
    drop_old_versions(table)
    left = _fragments_with_deletions(table_dir)
    if left:
        raise RuntimeError(f"fragments {left} of {table_dir} still hold deleted rows")
    return count


def drop_old_versions(table: Any) -> None:
    """Compact and remove every version but the latest, with every file only they use."""
    import warnings

    with warnings.catch_warnings():
        # LanceDB warns that a reader of an older version would fail: the caller holds the
        # table's writers off, and a search is over in milliseconds.
        warnings.simplefilter("ignore", UserWarning)
        table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
