"""The database every part of the store works on (:class:`Database`, the base of each tier's
class): the connection, opened and closed, the cursor each statement runs on, write
transactions, the page-cache trim after statements, the ``lore_meta`` key-value table, and
the two indexes derived from the database (full text, vectors).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb

from lore_core.storage.private import tighten
from lore_core.storage.records import SchemaMigration, StoreUnavailable
from lore_store_duckdb import lance
from lore_store_duckdb.config import DuckDBConfig
from lore_store_duckdb.connection import TrimGate, connect, gated_cursor, memory_by_tag, own_files
from lore_store_duckdb.fulltext import FullTextIndex
from lore_store_duckdb.schema import SCHEMA_VERSION, migrate
from lore_store_duckdb.vectors import VectorIndex

log = logging.getLogger("lore.store.duckdb")


class Database:
    """The open DuckDB file, its full-text index and its vector index; every read and write
    of the store goes through :meth:`_statement` (reads, :meth:`_query`) or
    :meth:`_transaction` (writes)."""

    # As the store contract declares them (lore_core.interfaces.Store).
    location: str | None
    migration: SchemaMigration | None = None

    def __init__(self, path: Path | str, settings: DuckDBConfig | None = None) -> None:
        self.path = Path(path)
        self.settings = settings or DuckDBConfig()
        lance.configure(
            self.settings.index_cache_mb * 1024 * 1024, self.settings.metadata_cache_mb * 1024 * 1024
        )
        self.location = str(self.path)
        self.index_path = Path(str(self.path) + ".fts")
        # Chunk vectors per embedding model (see vectors.py); derived, like the index.
        self.vector_path = Path(str(self.path) + ".vec")
        # The kernel's write-ahead journal (lore_core.storage.journal) lives beside the database.
        self.journal_dir: Path | None = Path(str(self.path) + ".journal")
        self._con: duckdb.DuckDBPyConnection | None = None
        self._write_lock = threading.Lock()
        self._gate = TrimGate()
        self._index: FullTextIndex | None = None
        self._vectors = VectorIndex(self.vector_path, self._meta_get, self._meta_put, self._meta_keys)
        self._opened_at: float | None = None
        # When DuckDB's page cache was last trimmed (see _trim_page_cache).
        self._page_cache_trimmed_at = 0.0
        self._default_memory_limit = ""
        # Set by close(): a vector write still finishing must not reopen the database (a
        # fatal error's internal close, by contrast, reopens on next use).
        self._closed = False

    def _open(self) -> None:
        self._closed = False
        if self._con is not None:
            return
        con = connect(self.path, self.settings)
        # The file, its WAL, indexes and journal are their owner's only, even when made before
        # or by a process with a looser umask (lore_core/storage/private.py).
        tighten(own_files(self.path), self.path.parent)
        # Statements run on a cursor that is closed after them, never on `con` itself: a
        # result left unread on a connection keeps its transaction open, and while any
        # transaction stays open DuckDB never checkpoints (the WAL and the memory holding
        # every write since grew for the life of the process).
        try:
            setup = con.cursor()
            try:
                self.migration = SchemaMigration(migrate(setup), SCHEMA_VERSION)
                # The limit a trim gives back: DuckDB's own (80 % of RAM) or memoryLimitMb.
                fetched = setup.execute("SELECT current_setting('memory_limit')").fetchone()
                self._default_memory_limit = str(fetched[0]) if fetched else "80%"
            finally:
                setup.close()
        except duckdb.Error as exc:
            con.close()
            raise StoreUnavailable(
                f"{self.path}: schema migration failed: {' '.join(str(exc).split())}"
            ) from None
        self._con = con
        # The index thread (and the ~2 s LanceDB import) starts on the first write or search,
        # or now when the index lags behind DuckDB (a crash): `lore sessions` never pays it.
        self._index = FullTextIndex(self.index_path, self._connection, self._gate)
        if self._index.lagging():
            self._index.wake()
        self._opened_at = time.time()

    def _close(self) -> None:
        if self._index is not None:
            self._index.stop()
            self._index = None
        self._vectors.close()
        if self._con is not None:
            try:
                self._con.execute("CHECKPOINT")
            except duckdb.Error:
                pass
            self._con.close()
            self._con = None

    def _memory_mib(self) -> dict[str, float]:
        """DuckDB's own memory by use (``duckdb_memory()``): what grows with the data (the
        primary-key indexes, ``ART_INDEX``) apart from what the buffer pool holds."""
        try:
            with self._statement() as cur:
                return memory_by_tag(cur)
        except duckdb.Error:
            return {}

    def _trim_page_cache(self) -> bool:
        """Evict DuckDB's table pages down to ``pageCacheMb`` beyond what it cannot evict.

        DuckDB keeps every table page it read or wrote until its memory_limit (80 % of RAM
        by default) forces it out, so the gateway's memory grew with the store. A lower
        fixed limit is no answer: the primary-key indexes and the rows not yet checkpointed
        live in the same pool, cannot be evicted and grow with the data, and past the limit
        writes and reads fail. So the limit is lowered to that pinned part plus the page
        cache, which evicts at once, and given back straight after: a trim, like
        ``malloc_trim``, at most once a second after any statement (``_statement``: every
        read and write, ~0.3 ms), and only while no statement runs (``TrimGate``).
        Returns whether it trimmed.
        """
        if not self.settings.page_cache_mb or self._closed:
            return False  # closed: a trim would open the database again
        moment = time.monotonic()
        if moment - self._page_cache_trimmed_at < 1.0:
            return False
        with self._gate.alone() as alone:
            if not alone:
                return False  # a statement is running: the limit must not drop under it
            self._page_cache_trimmed_at = moment
            try:
                cur = self._cursor()
                try:
                    memory = memory_by_tag(cur)
                    if not memory:
                        return False  # DuckDB did not say what it holds: nothing to trim against
                    pinned_mib = sum(mib for tag, mib in memory.items() if tag != "base_table")
                    trimmed_mib = int(pinned_mib) + self.settings.page_cache_mb
                    try:
                        cur.execute(f"SET memory_limit = '{trimmed_mib}MiB'")
                    finally:
                        cur.execute(f"SET memory_limit = '{self._default_memory_limit}'")
                finally:
                    cur.close()
            except duckdb.Error as exc:
                # An economy, never a reason to fail the write that just committed.
                log.debug("could not trim DuckDB's page cache: %s", exc)
                return False
            return True

    @contextlib.contextmanager
    def _statement(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor for one or more statements, closed after them, with the trim gate held
        (the database reopened first if an error invalidated it); then the page cache is
        trimmed if due. Every read and write of the store goes through here: a process that
        only reads (an MCP server, an export) would otherwise keep every page it touched."""
        if self._con is None:
            self._open()
        with gated_cursor(self._connection, self._gate) as cur:
            yield cur
        self._trim_page_cache()

    def _connection(self) -> duckdb.DuckDBPyConnection:
        """The open connection (under the trim gate: see :func:`gated_cursor`)."""
        if self._con is None:
            raise StoreUnavailable(f"{self.path} is closed")
        return self._con

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A bare cursor: only under the trim gate (``_statement``, or a trim itself)."""
        if self._con is None:
            # A fatal error (disk full) invalidated the database: open it again.
            self._open()
        assert self._con is not None
        return self._con.cursor()

    def _invalidate_on(self, exc: BaseException) -> None:
        """DuckDB invalidates a database after a fatal write error: reopen on next use."""
        if "invalidated" in str(exc) or "FATAL" in str(exc):
            log.warning("DuckDB invalidated the database after an error; reopening on next use")
            try:
                self._close()
            except Exception:
                self._con = None
                self._index = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction under the write lock: committed when the block ends,
        rolled back on any error (and the database reopened if DuckDB invalidated it)."""
        with self._write_lock, self._statement() as cur:
            try:
                cur.execute("BEGIN TRANSACTION")
                yield cur
                cur.execute("COMMIT")
            except BaseException as exc:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                self._invalidate_on(exc)
                raise

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._statement() as cur:
            return cur.execute(sql, params).fetchall()

    def _meta_get(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM lore_meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def _meta_put(self, key: str, value: str | None) -> None:
        if self._closed:
            # The watermark is repaired from the vector table at the next open.
            raise StoreUnavailable(f"{self.path} is closed")
        with self._transaction() as cur:
            if value is None:
                cur.execute("DELETE FROM lore_meta WHERE key = ?", (key,))
            else:
                cur.execute(
                    """INSERT INTO lore_meta (key, value) VALUES (?, ?)
                    ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
                    (key, value),
                )

    def _meta_keys(self, prefix: str) -> list[str]:
        return [r[0] for r in self._query("SELECT key FROM lore_meta WHERE starts_with(key, ?)", (prefix,))]
