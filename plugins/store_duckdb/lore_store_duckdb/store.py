"""The DuckDB store: DuckDB file as the store of record, a LanceDB full-text index beside it.

Why two engines (measured, see the README): DuckDB's own ``fts`` extension cannot add rows to
an index (a rebuild took 56 s at 500K rows) and answered in ~0.5 s at 500K; LanceDB's native
BM25 index answers in a few milliseconds and sees appended rows before they are merged into
the index. DuckDB is the ground truth; the index (``<file>.fts/``) is derived from it and can
be deleted at any time: it is rebuilt from DuckDB on the next open.

Every message row gets a ``seq`` from a DuckDB sequence at insert. The indexer copies rows
with ``seq`` above its watermark into LanceDB in batches, then records the watermark; after a
crash it resumes from there, and a search first catches the index up, so a message is
searchable as soon as its write committed. Appends create LanceDB fragments and rows not yet
merged into the index are scanned at query time, so the indexer runs ``optimize()`` in the
background once enough rows are pending (or the index has been idle a while).

One connection per process (DuckDB locks the file against other processes, even readers);
each operation uses its own cursor and runs in a worker thread so the event loop never
blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from lore_core.interfaces import (
    DistillationStore,
    EntityStore,
    EventLogStore,
    KnowledgeStore,
    Store,
    Tier,
    VectorStore,
)
from lore_core.storage.entities import (
    Entity,
    aliases_from_json,
    entity_order,
    relations_from_json,
    relations_json,
)
from lore_core.storage.events import NewEvent, RunEvent, RunState, WorkingFact, WorkingSnapshot
from lore_core.storage.forget import ForgetReport
from lore_core.storage.knowledge import (
    AUTHOR_USER,
    DEFAULT_CONFIDENCE,
    INITIAL_CONFIDENCE,
    KnowledgeConflict,
    KnowledgeContradiction,
    KnowledgeDecision,
    KnowledgeMetric,
    KnowledgeVersion,
    TeamBinding,
    canonical_order,
    normalize_title,
)
from lore_core.storage.passages import CallMemo, cut_text, fulltext_rules, message_passages
from lore_core.storage.private import tighten
from lore_core.storage.records import (
    DISTILLATION_PREFIX,
    DISTILLATION_ROLE,
    VECTOR_DISTILLATION,
    VECTOR_MESSAGE,
    EmbeddingItem,
    ItemVectors,
    PassageRef,
    Project,
    ProjectSummary,
    SchemaMigration,
    SearchHit,
    Session,
    StoredDistillation,
    StoredMessage,
    StoreInventory,
    StoreUnavailable,
    WriteBatch,
)
from lore_store_duckdb import lance
from lore_store_duckdb.absent import fail_fast_when_absent
from lore_store_duckdb.compact import check_copy, quoted, sql_literal, sync_directory
from lore_store_duckdb.config import DuckDBConfig
from lore_store_duckdb.schema import SCHEMA_VERSION, migrate
from lore_store_duckdb.vectors import VectorIndex

log = logging.getLogger("lore.store.duckdb")

T = TypeVar("T")

# Every parameterised query would otherwise look for pandas on disk (see absent.py).
fail_fast_when_absent()

#: Items (messages and distillations) cut into passages and copied into the index per
#: append at most; a search waits for at most one such batch.
INDEX_BATCH_ROWS = 20_000
#: Merge appended rows into the index once this many are pending (each pending row is
#: scanned by every query: ~20 ms per 1,000 rows measured) ...
OPTIMIZE_PENDING_ROWS = 2_000
#: ... or once rows have been pending this long ...
OPTIMIZE_IDLE_SECONDS = 30.0
#: ... but after an optimize that took d seconds, wait this many times d before the next.
#: optimize() rewrites the whole index, not just the new rows (measured: 7 s at 200K rows
#: for 2K new ones), so under a steady write load it would otherwise run back to back and
#: take the CPU the writer needs; this caps it at 1/(1 + factor) of the time. Searches stay
#: complete meanwhile (unmerged rows are scanned), only slower.
OPTIMIZE_PAUSE_FACTOR = 4.0
#: How often the index thread re-checks the optimize schedule without a write waking it.
_TICK_SECONDS = 1.0
#: Scalar indexes beside the full-text one, for the filters of `lore search --project` and
#: `--session`: measured at 300K rows, project p50 20 -> 4 ms, session 12 -> 3 ms; they build
#: in well under a second and new rows stay visible (the unindexed part is scanned).
_SCALAR_INDEXES = (("project", "bitmap"), ("session_id", "btree"))
#: A search of one project is filtered as "none of the other projects": LanceDB's full-text
#: search under an allow-list filter costs time in proportion to the rows allowed, below a
#: share of the table (measured, lancedb 0.40, 2.5M passages: a project of 10% of them 17-67
#: ms, the same search as "not the others" 4-6 ms, the same hits; benchmarks/README.md).
#: Past this many other projects the list itself costs more (~5 us a name) and ``=`` is used.
MAX_EXCLUDED_PROJECTS = 1000
#: DuckDB block size of a new store file (DuckDB's default is 256 KiB). Recall reads a few
#: dozen messages at random, and a row of a long text column costs DuckDB a whole block
#: read and checksum: at 1M messages the read of a recall's ~18 passages took 7.7-8.5 ms of
#: SQL with 256 KiB blocks and 4.0-4.4 ms with 16 KiB (hybrid recall 52.0 -> 49.2 ms p50,
#: the same queries alternating; benchmarks/README.md). The smallest size DuckDB accepts.
NEW_FILE_BLOCK_BYTES = 16_384
#: How long closing the store waits for the index thread. A catch-up ends sooner; a merge
#: in progress (over a minute on a few million rows) is left behind rather than waited for.
FTS_STOP_WAIT_SECONDS = 5.0
#: Old LanceDB versions kept this long after an optimize (a running query may still use one).
CLEANUP_OLDER_THAN = timedelta(minutes=2)
#: The copy a forget writes beside the database before it takes its place.
REWRITE_SUFFIX = ".forgetting"

_MESSAGE_COLUMNS = (
    "id",
    "session_id",
    "parent_id",
    "position",
    "role",
    "blocks",
    "text",
    "model",
    "usage",
    "harness",
    "project",
    "api",
    "created_at",
    "complete",
    "origin",
    "stop_reason",
    "error",
    "context_layer",
)
_ARROW_MESSAGES = pa.schema(
    [
        ("id", pa.string()),
        ("session_id", pa.string()),
        ("parent_id", pa.string()),
        ("position", pa.int32()),
        ("role", pa.string()),
        ("blocks", pa.string()),
        ("text", pa.string()),
        ("model", pa.string()),
        ("usage", pa.string()),
        ("harness", pa.string()),
        ("project", pa.string()),
        ("api", pa.string()),
        ("created_at", pa.float64()),
        ("complete", pa.bool_()),
        ("origin", pa.string()),
        ("stop_reason", pa.string()),
        ("error", pa.string()),
        ("context_layer", pa.int8()),
    ]
)
#: The full-text index holds passages (lore_core.storage.passages): one row per passage of a
#: message or distillation, with the columns its filters need (``seq`` for the watermark)
#: and what a hit shows besides its text in one JSON array, ``hit``: item id, passage index,
#: start, end, session, project, role, tool, source, position, created_at.
#: One column, because LanceDB reads each selected column of every hit apart: at 1M
#: messages the search selecting the 12 columns this array replaces took ~6 ms more than
#: selecting 3 (benchmarks/README.md, recall.py).
_INDEX_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("session_id", pa.string()),
        ("project", pa.string()),
        ("hit", pa.string()),
        ("text", pa.string()),
    ]
)
#: The table's name says its layout: another layout's table is dropped and rebuilt.
_INDEX_TABLE = "passage_hits"
#: A message's text is read only when it has no blocks to cut passages from.
_TEXT_IF_NO_BLOCKS = "CASE WHEN blocks IS NULL OR blocks = '[]' THEN text END"
#: Tables of earlier index layouts, dropped when found (the index is rebuilt from DuckDB):
#: whole messages, then passages with a column per field.
_OLD_INDEX_TABLES = ("messages", "passages")
_WORD = re.compile(r"\w", re.UNICODE)
#: The knowledge table's columns as write_knowledge writes and reads read them, in
#: _knowledge_row's order (``approval`` stays NULL: a later tier sets it).
_KNOWLEDGE_COLUMNS = (
    "version_id",
    "logical_id",
    "version",
    "is_current",
    "is_deleted",
    "category",
    "title",
    "content",
    "scope",
    "project",
    "sensitivity",
    "created_by",
    "updated_by",
    "source_session",
    "source_ref",
    "worker_provider",
    "worker_model",
    "created_at",
)
_KNOWLEDGE_SELECT = f"SELECT {', '.join(_KNOWLEDGE_COLUMNS)} FROM knowledge_versions"
#: The entities table's columns, in _entity_row's order.
_ENTITY_COLUMNS = (
    "id",
    "kind",
    "canonical_name",
    "aliases",
    "relations",
    "project",
    "sensitivity",
    "created_at",
    "updated_at",
    "created_by",
    "updated_by",
    "merged_into",
)
_ENTITY_SELECT = f"SELECT {', '.join(_ENTITY_COLUMNS)} FROM entities"


def _connect(path: Path, settings: DuckDBConfig) -> duckdb.DuckDBPyConnection:
    """Open the file, turning DuckDB's errors into one line that says what to do."""
    try:
        # A directory made for the store is its owner's only (an existing one is the user's).
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(f"cannot create the directory {path.parent}: {exc.strerror or exc}") from None
    try:
        # Extensions never load or install implicitly: nothing may download at run time.
        options: dict[str, str | bool | int | float | list[str]] = {
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
        if settings.memory_limit_mb:
            options["memory_limit"] = f"{settings.memory_limit_mb}MiB"
        if settings.threads:
            options["threads"] = settings.threads
        # For a new file only: an existing one keeps the block size it was made with.
        options["default_block_size"] = NEW_FILE_BLOCK_BYTES
        return duckdb.connect(str(path), config=options)
    except duckdb.Error as exc:
        text = " ".join(str(exc).split())
        if "lock" in text.lower():
            pid = re.search(r"PID (\d+)", text)
            holder = f" (PID {pid.group(1)})" if pid else ""
            raise StoreUnavailable(
                f"{path} is locked by another process{holder}: is another gateway running on it?"
            ) from None
        if "not a valid" in text or "corrupt" in text.lower() or "checksum" in text.lower():
            raise StoreUnavailable(
                f"{path} is not a readable DuckDB database ({text}); move it aside to start a new one"
            ) from None
        raise StoreUnavailable(f"cannot open {path}: {text}") from None


def own_files(path: Path) -> list[Path]:
    """The store's files: the database ``path`` and everything named after it beside it (the
    WAL, DuckDB's spill directory, the ``.fts``/``.vec`` indexes, the journal, what ``lore
    compact`` leaves), never the rest of the directory, which may be anybody's."""
    try:
        with os.scandir(path.parent) as scan:
            names = [e.name for e in scan if e.name == path.name or e.name.startswith(path.name + ".")]
    except OSError:
        return []
    return [path.parent / name for name in sorted(names)]


def block_size(con: duckdb.DuckDBPyConnection) -> int:
    """The block size of the file ``con`` opened (what the file was made with)."""
    rows = con.execute(
        "SELECT block_size FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchall()
    return int(rows[0][0])


def _memory_by_tag(cur: duckdb.DuckDBPyConnection) -> dict[str, float]:
    rows = cur.execute(
        "SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0"
    ).fetchall()
    return {str(tag).lower(): round(int(used) / 2**20, 1) for tag, used in rows}


@contextlib.contextmanager
def _gated_cursor(
    connection: Callable[[], duckdb.DuckDBPyConnection], gate: _TrimGate
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor on the store's connection for one or more statements, closed after them, with
    ``gate`` held (a page-cache trim waits for it: :class:`_TrimGate`). The connection is
    taken once the gate is held: a forget's rewrite of the file replaces it under the gate."""
    with gate.statement():
        cur = connection().cursor()
        try:
            yield cur
        finally:
            cur.close()


class _TrimGate:
    """Statements run side by side; a page-cache trim runs only when none is running.

    A trim lowers DuckDB's memory_limit, which is global to the database: a statement
    running meanwhile on another cursor (the indexer's catch-up, a search, a write) could
    fail with "Out of Memory" against the lowered limit. So every statement holds the gate
    shared, a trim takes it alone or is skipped (it is an economy: the next write tries
    again), and a statement arriving during a trim waits its ~0.3 ms.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._trimming = False

    @contextlib.contextmanager
    def statement(self) -> Iterator[None]:
        with self._changed:
            while self._trimming:
                self._changed.wait()
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Wait until no statement runs and keep new ones waiting until the block ends (a
        forget swaps the database file: a statement must not run on the connection closed)."""
        with self._changed:
            while self._running or self._trimming:
                self._changed.wait()
            self._trimming = True
        try:
            yield
        finally:
            with self._changed:
                self._trimming = False
                self._changed.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[bool]:
        """Yields True with every statement kept out, or False (nothing held) when one runs."""
        with self._changed:
            if self._running or self._trimming:
                acquired = False
            else:
                self._trimming = acquired = True
        try:
            yield acquired
        finally:
            if acquired:
                with self._changed:
                    self._trimming = False
                    self._changed.notify_all()


class DuckDBStore(Store, DistillationStore, VectorStore, KnowledgeStore, EntityStore, EventLogStore):
    name = "duckdb"
    #: Every optional tier (lore_core.interfaces.Tier).
    tiers = frozenset(Tier)

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
        self._gate = _TrimGate()
        self._index: _Index | None = None
        self._vectors = VectorIndex(self.vector_path, self._meta_get, self._meta_put, self._meta_keys)
        self._opened_at: float | None = None
        # When DuckDB's page cache was last trimmed (see _trim_page_cache).
        self._page_cache_trimmed_at = 0.0
        self._default_memory_limit = ""
        # Set by close(): a vector write still finishing must not reopen the database (a
        # fatal error's internal close, by contrast, reopens on next use).
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        await asyncio.to_thread(self._open)

    def _open(self) -> None:
        self._closed = False
        if self._con is not None:
            return
        con = _connect(self.path, self.settings)
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
        self._index = _Index(self.index_path, self._connection, self._gate)
        if self._index.lagging():
            self._index.wake()
        self._opened_at = time.time()

    async def close(self) -> None:
        self._closed = True
        await asyncio.to_thread(self._close)

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

    def health(self) -> dict[str, Any]:
        if self._con is None:
            return {"ok": False, "detail": f"{self.path} is not open", "path": str(self.path)}
        index = self._index.health() if self._index else {"ok": False}
        return {
            "ok": True,
            "detail": f"DuckDB {duckdb.__version__} at {self.path}",
            "path": str(self.path),
            "memory_mib": self._memory_mib(),
            "index_cache": lance.cache_usage(),
            "index": index,
        }

    def _memory_mib(self) -> dict[str, float]:
        """DuckDB's own memory by use (``duckdb_memory()``): what grows with the data (the
        primary-key indexes, ``ART_INDEX``) apart from what the buffer pool holds."""
        try:
            with self._statement() as cur:
                return _memory_by_tag(cur)
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
        read and write, ~0.3 ms), and only while no statement runs (``_TrimGate``).
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
                    memory = _memory_by_tag(cur)
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
        with _gated_cursor(self._connection, self._gate) as cur:
            yield cur
        self._trim_page_cache()

    def _connection(self) -> duckdb.DuckDBPyConnection:
        """The open connection (under the trim gate: see :func:`_gated_cursor`)."""
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

    # -- writes ----------------------------------------------------------------------------

    async def write(self, batch: WriteBatch) -> int:
        return await asyncio.to_thread(self._write, batch.merged())

    def _write(self, batch: WriteBatch) -> int:
        added = self._write_rows(batch)
        if added and self._index is not None:
            self._index.wake()
        return added

    def _write_rows(self, batch: WriteBatch) -> int:
        with self._transaction() as cur:
            # Arrow tables, not executemany: DuckDB runs executemany row by row (seconds
            # for a few hundred rows); an INSERT ... SELECT over Arrow is one statement.
            if batch.projects:
                projects_rows = pa.table(  # noqa: F841 (read by DuckDB by name)
                    {
                        "id": [p.id for p in batch.projects],
                        "name": [p.name for p in batch.projects],
                        "created_at": [p.created_at for p in batch.projects],
                        "last_seen_at": [p.last_seen_at for p in batch.projects],
                    }
                )
                cur.execute(
                    """INSERT INTO projects (id, name, created_at, last_seen_at)
                    SELECT id, name, created_at, last_seen_at FROM projects_rows
                    ON CONFLICT (id) DO UPDATE SET
                      name = CASE WHEN projects.name = '' THEN excluded.name ELSE projects.name END,
                      created_at = least(projects.created_at, excluded.created_at),
                      last_seen_at = greatest(projects.last_seen_at, excluded.last_seen_at)"""
                )
            if batch.sessions:
                session_rows = pa.table(  # noqa: F841 (read by DuckDB by name)
                    {
                        "id": [x.id for x in batch.sessions],
                        "project": [x.project for x in batch.sessions],
                        "harness": [x.harness for x in batch.sessions],
                        "model": pa.array([x.model for x in batch.sessions], pa.string()),
                        "created_at": [x.created_at for x in batch.sessions],
                        "updated_at": [x.updated_at for x in batch.sessions],
                        "title": [x.title for x in batch.sessions],
                    }
                )
                # The same rule as lore_core.storage.records.merge_session.
                cur.execute(
                    """INSERT INTO sessions (id, project, harness, model, created_at, updated_at, title)
                    SELECT id, project, harness, model, created_at, updated_at, title FROM session_rows
                    ON CONFLICT (id) DO UPDATE SET
                      project = CASE WHEN sessions.project = '' THEN excluded.project
                                ELSE sessions.project END,
                      harness = CASE WHEN excluded.updated_at >= sessions.updated_at
                                     AND excluded.harness <> '' THEN excluded.harness
                                WHEN sessions.harness = '' THEN excluded.harness
                                ELSE sessions.harness END,
                      model = CASE WHEN excluded.updated_at >= sessions.updated_at
                                   AND excluded.model IS NOT NULL THEN excluded.model
                              ELSE coalesce(sessions.model, excluded.model) END,
                      created_at = least(sessions.created_at, excluded.created_at),
                      updated_at = greatest(sessions.updated_at, excluded.updated_at),
                      title = CASE WHEN sessions.title = '' THEN excluded.title
                              ELSE sessions.title END"""
                )
            added = 0
            if batch.messages:
                rows = _arrow_messages(batch.messages)  # noqa: F841 (read by DuckDB by name)
                cols = ", ".join(_MESSAGE_COLUMNS)
                inserted = cur.execute(
                    f"INSERT OR IGNORE INTO messages ({cols}) SELECT {cols} FROM rows "
                    "RETURNING id, session_id, parent_id"
                ).fetchall()
                added = len(inserted)
                if inserted:
                    _summarise(cur, inserted, batch.messages)
        return added

    # -- forgetting (lore forget) ------------------------------------------------------------

    async def forget_session(self, session_id: str, keep_state: Sequence[str] = ()) -> ForgetReport:
        return await asyncio.to_thread(self._forget_session, session_id, frozenset(keep_state))

    def _forget_session(self, session_id: str, keep_state: frozenset[str]) -> ForgetReport:
        """The rows in one transaction, then the full-text passages and the vectors out of
        their LanceDB tables and files, then the database file rewritten: DuckDB marks deleted
        rows and leaves their bytes in the file (measured: a checkpoint, ``FORCE CHECKPOINT``
        and ``VACUUM`` all kept every deleted row's text in it), so the live rows are copied
        into a new file that takes the old one's place."""
        started = time.monotonic()
        steps: dict[str, float] = {}
        bytes_before = self._files_bytes()
        if self._con is None:
            self._open()
        index = self._index
        assert index is not None

        def delete_rows() -> tuple[bool, int, int, list[str], int]:
            began = time.monotonic()
            with self._transaction() as cur:
                one = (session_id,)
                row = cur.execute("SELECT count(*) FROM sessions WHERE id = ?", one).fetchone()
                sessions = row[0] if row else 0
                messages, newest_message = cur.execute(
                    "SELECT count(*), coalesce(max(seq), 0) FROM messages WHERE session_id = ?", one
                ).fetchone() or (0, 0)
                distillations, newest_distillation = cur.execute(
                    "SELECT count(*), coalesce(max(seq), 0) FROM distillations WHERE session_id = ?", one
                ).fetchone() or (0, 0)
                keys = [
                    str(key)
                    for (key,) in cur.execute(
                        "SELECT key FROM session_state WHERE session_id = ? ORDER BY key", one
                    ).fetchall()
                    if key not in keep_state
                ]
                cur.execute("DELETE FROM messages WHERE session_id = ?", one)
                cur.execute("DELETE FROM distillations WHERE session_id = ?", one)
                cur.execute("DELETE FROM sessions WHERE id = ?", one)
                cur.execute("DELETE FROM session_summary WHERE session_id = ?", one)
                if keys:
                    cur.execute(
                        "DELETE FROM session_state WHERE session_id = ? AND key IN (SELECT unnest(?))",
                        (session_id, keys),
                    )
            steps["rows"] = time.monotonic() - began
            found = bool(sessions or messages or distillations)
            newest = max(int(newest_message), int(newest_distillation))
            return found, int(messages), int(distillations), keys, newest

        began = time.monotonic()
        (found, messages, distillations, keys, newest), passages = index.forget(session_id, delete_rows)
        steps["fulltext"] = time.monotonic() - began - steps["rows"]
        began = time.monotonic()
        vectors = self._vectors.forget(session_id, newest)
        steps["vectors"] = time.monotonic() - began
        if found or keys:
            began = time.monotonic()
            try:
                self._rewrite_file()
            except Exception as exc:
                raise StoreUnavailable(
                    f"session {session_id} is gone from every table and index, but {self.path} could "
                    f"not be rewritten, so its file may still hold the deleted rows' bytes "
                    f"({' '.join(str(exc).split())}); with the gateway stopped, `lore duckdb-compact "
                    "--remove-old` rewrites it"
                ) from exc
            steps["rewrite"] = time.monotonic() - began
        return ForgetReport(
            session_id,
            found,
            messages=messages,
            distillations=distillations,
            passages=passages,
            vectors=vectors,
            state_keys=tuple(keys),
            seconds=time.monotonic() - started,
            steps=steps,
            bytes_before=bytes_before,
            bytes_after=self._files_bytes(),
        )

    def _files_bytes(self) -> int:
        """The database, its WAL and the two indexes beside it (not the journal)."""
        wal = Path(str(self.path) + ".wal")
        return sum(_size(p) for p in (self.path, wal, self.index_path, self.vector_path))

    def _rewrite_file(self) -> None:
        """Copy the live rows into a new file and put it in the database's place, as ``lore
        duckdb-compact`` does but inside the running store (same block size). Reads go on
        during the copy and writes wait; then, with no statement running, the copy is checked,
        the connection closed and the new file opened in its place (milliseconds)."""
        copy = self.path.with_name(self.path.name + REWRITE_SUFFIX)
        for leftover in (copy, Path(str(copy) + ".wal")):
            leftover.unlink(missing_ok=True)  # a copy an interrupted forget left
        attached = False
        try:
            with self._write_lock:
                with self._statement() as cur:
                    cur.execute("CHECKPOINT")
                    source = str(cur.execute("SELECT current_database()").fetchall()[0][0])
                    blocks = block_size(cur)
                    cur.execute(f"ATTACH {sql_literal(str(copy))} AS lore_rewrite (BLOCK_SIZE {blocks})")
                    attached = True
                    cur.execute(f"COPY FROM DATABASE {quoted(source)} TO lore_rewrite")
                with self._gate.exclusive():
                    con = self._connection()
                    cur = con.cursor()
                    try:
                        # The full-text indexer writes its watermark outside the write lock:
                        # copied again now that nothing runs.
                        cur.execute("DELETE FROM lore_rewrite.main.lore_meta")
                        cur.execute(
                            "INSERT INTO lore_rewrite.main.lore_meta "
                            f"SELECT * FROM {quoted(source)}.main.lore_meta"
                        )
                        check_copy(cur, source, "lore_rewrite")
                        cur.execute("CHECKPOINT lore_rewrite")
                        cur.execute("DETACH lore_rewrite")
                        attached = False
                    finally:
                        cur.close()
                    con.close()
                    self._con = None
                    try:
                        if Path(str(self.path) + ".wal").exists():
                            raise StoreUnavailable(f"{self.path} kept a write-ahead log after closing")
                        os.replace(copy, self.path)
                        sync_directory(self.path.parent)
                    finally:
                        # The new file, or the old one again when the swap failed.
                        self._con = _connect(self.path, self.settings)
                        tighten([self.path], self.path.parent)  # the copy is its owner's only too
        except BaseException:
            if attached and self._con is not None:
                with contextlib.suppress(duckdb.Error):
                    self._con.execute("DETACH lore_rewrite")
            copy.unlink(missing_ok=True)
            raise

    # -- distillations ---------------------------------------------------------------------

    async def write_distillation(self, distillation: StoredDistillation, archive: Sequence[str] = ()) -> bool:
        return await asyncio.to_thread(self._write_distillation, distillation, list(archive))

    def _write_distillation(self, d: StoredDistillation, archive: list[str]) -> bool:
        with self._transaction() as cur:
            cur.execute(
                f"""INSERT OR IGNORE INTO distillations ({", ".join(_DISTILLATION_COLUMNS)})
                VALUES ({", ".join("?" * len(_DISTILLATION_COLUMNS))})""",
                _distillation_row(d),
            )
            fetched = cur.fetchone()
            added = bool(fetched and int(fetched[0]))
            ids = [i.removeprefix(DISTILLATION_PREFIX) for i in archive]
            if ids:
                cur.execute(
                    _ARCHIVE_SQL,
                    (ids,),
                )
        if added and self._index is not None:
            self._index.wake()
        return added

    async def list_distillations(
        self, session_id: str | None = None, include_archived: bool = True
    ) -> list[StoredDistillation]:
        where, params = [], []
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if not include_archived:
            where.append("NOT archived")
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        rows = await asyncio.to_thread(
            self._query,
            f"SELECT {', '.join(_DISTILLATION_COLUMNS)} FROM distillations {clause} "
            "ORDER BY created_at, generation, id",
            params,
        )
        return [_distillation(r) for r in rows]

    async def get_distillation(self, distillation_id: str) -> StoredDistillation | None:
        rows = await asyncio.to_thread(
            self._query,
            f"SELECT {', '.join(_DISTILLATION_COLUMNS)} FROM distillations WHERE id = ?",
            (distillation_id.removeprefix(DISTILLATION_PREFIX),),
        )
        return _distillation(rows[0]) if rows else None

    async def archive_distillations(self, ids: Sequence[str]) -> int:
        def run() -> int:
            with self._write_lock, self._statement() as cur:
                result = cur.execute(
                    _ARCHIVE_SQL,
                    ([i.removeprefix(DISTILLATION_PREFIX) for i in ids],),
                ).fetchone()
                return int(result[0]) if result else 0

        return await asyncio.to_thread(run) if ids else 0

    async def distilled_message_ids(self, session_id: str) -> set[str]:
        rows = await asyncio.to_thread(
            self._query,
            "SELECT source_ids FROM distillations WHERE session_id = ? AND generation = 0",
            (session_id,),
        )
        return {i for (source,) in rows for i in json.loads(source or "[]")}

    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        await self.set_states([(session_id, key, value)])

    async def set_states(self, values: Sequence[tuple[str, str, Any]]) -> None:
        if values:
            await asyncio.to_thread(self._set_states, [(s, k, json.dumps(v)) for s, k, v in values])

    def _set_states(self, values: list[tuple[str, str, str]]) -> None:
        # The last value of a (session, key) wins, as it would one call at a time.
        latest = {(session_id, key): value for session_id, key, value in values}
        state_rows = pa.table(  # noqa: F841 (read by DuckDB by name)
            {
                "session_id": [session_id for session_id, _ in latest],
                "key": [key for _, key in latest],
                "value": list(latest.values()),
            }
        )
        with self._transaction() as cur:
            cur.execute(
                """INSERT INTO session_state (session_id, key, value, updated_at)
                SELECT session_id, key, value, ? FROM state_rows
                ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value,
                  updated_at = excluded.updated_at""",
                (time.time(),),
            )

    # -- reads -----------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._statement() as cur:
            return cur.execute(sql, params).fetchall()

    async def get_state(self, session_id: str, key: str, default: Any = None) -> Any:
        rows = await asyncio.to_thread(
            self._query, "SELECT value FROM session_state WHERE session_id = ? AND key = ?", (session_id, key)
        )
        return json.loads(rows[0][0]) if rows else default

    async def get_states(self, key: str, session_ids: Sequence[str]) -> dict[str, Any]:
        if not session_ids:
            return {}
        rows = await asyncio.to_thread(
            self._query,
            "SELECT session_id, value FROM session_state WHERE key = ? AND session_id IN (SELECT unnest(?))",
            (key, list(session_ids)),
        )
        return {str(session_id): json.loads(value) for session_id, value in rows}

    async def session_state(self, session_id: str) -> dict[str, Any]:
        rows = await asyncio.to_thread(
            self._query,
            "SELECT key, value FROM session_state WHERE session_id = ? ORDER BY key",
            (session_id,),
        )
        return {k: json.loads(v) for k, v in rows}

    # A session with its counts, from the summary every write keeps (schema version 8): no
    # message is read (counting them over the messages table scanned every message's session
    # id, ~0.6 s at 1M messages however few sessions were listed).
    _SESSION_SQL = """
        SELECT s.id, s.project, s.harness, s.model, s.created_at, s.updated_at, s.title,
               coalesce(c.message_count, 0), coalesce(c.branch_count, 0)
        FROM sessions s
        LEFT JOIN session_summary c ON c.session_id = s.id
    """

    async def get_session(self, session_id: str) -> Session | None:
        rows = await asyncio.to_thread(self._query, self._SESSION_SQL + " WHERE s.id = ?", (session_id,))
        return _session(rows[0]) if rows else None

    async def list_sessions(
        self,
        project: str | None = None,
        limit: int = 50,
        *,
        before: tuple[float, str] | None = None,
        since: float | None = None,
        harness: str | None = None,
        model: str | None = None,
        text: str | None = None,
    ) -> list[Session]:
        where, params = _session_filters(project, before, since, harness, model, text)

        def run() -> list[tuple[Any, ...]]:
            # The page's ids first (the sessions table alone, newest first), then their rows
            # with the summary by primary key.
            ids = [
                r[0]
                for r in self._query(
                    f"SELECT id FROM sessions {where} ORDER BY updated_at DESC, id DESC LIMIT ?",
                    [*params, max(0, limit)],
                )
            ]
            if not ids:
                return []
            sql = self._SESSION_SQL + f" WHERE s.id IN {_literals(ids)} ORDER BY s.updated_at DESC, s.id DESC"
            return self._query(sql)

        return [_session(r) for r in await asyncio.to_thread(run)]

    async def list_projects(self) -> list[Project]:
        rows = await asyncio.to_thread(
            self._query, "SELECT id, name, created_at, last_seen_at FROM projects ORDER BY id"
        )
        return [Project(*r) for r in rows]

    async def project_summaries(self, spend_key: str) -> list[ProjectSummary]:
        rows = await asyncio.to_thread(self._query, _PROJECT_SUMMARY_SQL, (spend_key,))
        return [
            ProjectSummary(
                project=str(r[0]),
                sessions=int(r[1]),
                messages=int(r[2]),
                knowledge=int(r[3]),
                spend_usd=float(r[4]),
                last_activity=float(r[5]),
            )
            for r in rows
        ]

    async def session_messages(self, session_id: str) -> list[StoredMessage]:
        cols = ", ".join(_MESSAGE_COLUMNS)
        rows = await asyncio.to_thread(
            self._query,
            f"SELECT {cols} FROM messages WHERE session_id = ? ORDER BY position, created_at, id",
            (session_id,),
        )
        return [_message(r) for r in rows]

    async def get_messages(self, ids: Sequence[str]) -> list[StoredMessage]:
        if not ids:
            return []
        cols = ", ".join(_MESSAGE_COLUMNS)
        rows = await asyncio.to_thread(
            self._query, f"SELECT {cols} FROM messages WHERE id IN {_literals(ids)}"
        )
        found = {r[0]: _message(r) for r in rows}
        return [found[i] for i in ids if i in found]

    async def search(
        self,
        query: str,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        if not _WORD.search(query or "") or limit <= 0:
            return []
        index = self._index
        if index is None:
            self._cursor().close()  # reopens after an invalidation, or raises
            index = self._index
        assert index is not None
        return await asyncio.to_thread(index.search, query, session_id, project, limit)

    async def inventory(self) -> StoreInventory:
        def run() -> StoreInventory:
            return StoreInventory(
                state_sessions=tuple(
                    str(r[0]) for r in self._query("SELECT DISTINCT session_id FROM session_state ORDER BY 1")
                ),
                runs=tuple(
                    (str(p), str(r))
                    for p, r in self._query("SELECT project, run FROM event_runs ORDER BY 1, 2")
                ),
                bound_projects=tuple(
                    str(r[0]) for r in self._query("SELECT project FROM team_bindings ORDER BY 1")
                ),
                policy_teams=tuple(
                    str(r[0]) for r in self._query("SELECT team FROM team_policies ORDER BY 1")
                ),
            )

        return await asyncio.to_thread(run)

    async def set_knowledge_metrics(self, metrics: Sequence[KnowledgeMetric]) -> int:
        rows = list({m.logical_id: m for m in metrics}.values())  # one row per id for the upsert
        if not rows:
            return 0

        def run() -> int:
            with self._transaction() as cur:
                cur.executemany(
                    """INSERT INTO knowledge_metrics (logical_id, confidence, last_reinforced_at)
                    VALUES (?, ?, ?)
                    ON CONFLICT (logical_id) DO UPDATE SET confidence = excluded.confidence,
                      last_reinforced_at = excluded.last_reinforced_at""",
                    [(m.logical_id, m.confidence, m.last_reinforced_at) for m in rows],
                )
            return len(rows)

        return await asyncio.to_thread(run)

    async def stats(self) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            (projects,), (sessions,), (messages,), (distillations,) = (
                self._query(f"SELECT count(*) FROM {table}")[0]
                for table in ("projects", "sessions", "messages", "distillations")
            )
            ((knowledge,),) = self._query(
                "SELECT count(*) FROM knowledge_versions WHERE is_current AND NOT is_deleted"
            )
            ((entities,),) = self._query("SELECT count(*) FROM entities WHERE merged_into IS NULL")
            version = self._query("SELECT value FROM lore_meta WHERE key = 'schema_version'")
            with self._statement() as cur:
                file_blocks = block_size(cur)
            advice = []
            if file_blocks > NEW_FILE_BLOCK_BYTES:
                advice.append(
                    f"the file has {file_blocks // 1024} KiB blocks (made by an older Lore): with the "
                    f"gateway stopped, `lore duckdb-compact` moves it to {NEW_FILE_BLOCK_BYTES // 1024} KiB "
                    "ones, which recall reads faster"
                )
            return {
                "backend": self.name,
                "path": str(self.path),
                "index_path": str(self.index_path),
                "size_bytes": _size(self.path)
                + _size(Path(str(self.path) + ".wal"))
                + _size(self.index_path),
                "schema_version": int(version[0][0]) if version else 0,
                "projects": projects,
                "sessions": sessions,
                "messages": messages,
                "distillations": distillations,
                # Entries current and alive (deleted ones are kept, not counted).
                "knowledge": knowledge,
                "entities": entities,
                "index": self._index.health() if self._index else None,
                # Per embedding model; opening LanceDB only when some model was indexed.
                "vectors": self._vector_stats(None),
                "block_size_bytes": file_blocks,
                "advice": advice,
            }

        return await asyncio.to_thread(run)

    # -- vectors ---------------------------------------------------------------------------

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

    # Messages and distillations share the seq, so one watermark per model covers both.
    _PENDING_SQL = f"""SELECT * FROM (
            SELECT seq, '{VECTOR_MESSAGE}' AS kind, id, text, session_id, project, created_at, role, blocks
            FROM messages WHERE seq > $1
            UNION ALL
            SELECT seq, '{VECTOR_DISTILLATION}', id, content, session_id, project, created_at, NULL, NULL
            FROM distillations WHERE seq > $1
        ) ORDER BY seq LIMIT $2"""

    async def pending_embeddings(self, model: str, limit: int = 256) -> list[EmbeddingItem]:
        def run() -> list[EmbeddingItem]:
            # The recorded watermark first: with nothing pending, LanceDB is not loaded.
            watermark = self._vectors.watermark(model)
            rows = self._query(self._PENDING_SQL, (watermark, max(0, limit)))
            if rows and (table_watermark := self._vectors.table_watermark(model)) != watermark:
                rows = self._query(self._PENDING_SQL, (table_watermark, max(0, limit)))
            return [
                EmbeddingItem(
                    kind,
                    ident,
                    text or "",
                    session or "",
                    project or "",
                    float(at or 0.0),
                    int(seq),
                    role or "",
                    json.loads(blocks) if blocks else [],
                )
                for seq, kind, ident, text, session, project, at, role, blocks in rows
            ]

        return await asyncio.to_thread(run)

    async def write_vectors(self, model: str, dimensions: int, items: Sequence[ItemVectors]) -> int:
        return await asyncio.to_thread(self._vectors.write, model, dimensions, list(items))

    async def nearest_passages(
        self,
        model: str,
        vector: Sequence[float],
        kinds: Sequence[str] | None = None,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[PassageRef]:
        search = self._vectors.search
        found = await asyncio.to_thread(search, model, vector, kinds, session_id, project, limit)
        return [PassageRef(ident, index, score) for ident, score, index in found]

    async def read_passages(self, refs: Sequence[PassageRef]) -> list[SearchHit]:
        def run() -> list[SearchHit]:
            if not refs:
                return []
            # Each item is cut only as far as the last passage asked of it.
            last: dict[str, int] = {}
            for ref in refs:
                last[ref.item] = max(ref.passage, last.get(ref.item, 0))
            ids = list(last)
            # item id -> (search id, session, project, role, position, created_at, passages)
            items: dict[str, tuple[Any, ...]] = {}
            rows = self._query(
                "SELECT id, session_id, project, role, position, created_at, blocks FROM messages "
                f"WHERE id IN {_literals(ids)}"
            )
            # The text only of messages without blocks (written by hand), in a query of its
            # own: a column read at all costs ~4 ms for 20 messages at 1M (each lookup
            # decompresses its row's block of the column), and nearly every message has blocks.
            bare = [r[0] for r in rows if not r[6] or r[6] == "[]"]
            texts: dict[str, str] = {}
            if bare:
                texts = dict(self._query(f"SELECT id, text FROM messages WHERE id IN {_literals(bare)}"))
            for r in rows:
                blocks = json.loads(r[6]) if r[6] else []
                passages = message_passages(r[3], blocks, texts.get(r[0]) or "", until=last[r[0]])
                items[r[0]] = (*r[:6], passages)
            # The rest are distillations' (their ids, 24 hex digits, never meet a message's 32).
            rest = [ident for ident in ids if ident not in items]
            if rest:
                for r in self._query(
                    "SELECT id, session_id, project, created_at, content FROM distillations "
                    f"WHERE id IN {_literals(rest)}"
                ):
                    ref = DISTILLATION_PREFIX + r[0]
                    items[r[0]] = (ref, r[1], r[2], DISTILLATION_ROLE, 0, r[3], cut_text(r[4] or ""))
            hits = []
            for found in refs:
                item = items.get(found.item)
                if item is None or found.passage >= len(item[6]):
                    continue  # an item gone, or cut by other rules
                passage = item[6][found.passage]
                hits.append(
                    SearchHit(
                        id=item[0],
                        session_id=item[1],
                        project=item[2] or "",
                        role=item[3],
                        score=found.score,
                        text=passage.text,
                        position=int(item[4] or 0),
                        created_at=float(item[5] or 0.0),
                        passage=passage.index,
                        start=passage.start,
                        end=passage.end,
                        tool=passage.tool,
                        source=passage.source,
                    )
                )
            return hits

        return await asyncio.to_thread(run)

    async def vector_stats(self, model: str | None = None) -> dict[str, Any]:
        return await asyncio.to_thread(self._vector_stats, model)

    def _vector_stats(self, model: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in [model] if model is not None else self._vectors.models():
            stats = self._vectors.stats(name)
            (pending,) = self._query(
                "SELECT (SELECT count(*) FROM messages WHERE seq > $1) "
                "+ (SELECT count(*) FROM distillations WHERE seq > $1)",
                (stats["watermark"],),
            )[0]
            out[name] = {**stats, "pending": int(pending)}
        return out

    async def reset_vectors(self, model: str) -> None:
        await asyncio.to_thread(self._vectors.reset, model)

    async def optimize_vectors(self, model: str) -> None:
        """Compact ``model``'s table now (the indexer calls it when idle; benchmarks too)."""
        await asyncio.to_thread(self._vectors.optimize, model)

    # -- knowledge -------------------------------------------------------------------------
    #
    # knowledge_versions is the base table: every version, death certificates included, with
    # ``is_current`` kept on the latest one by write_knowledge. "Current and alive" is
    # ``is_current AND NOT is_deleted``; lookups that must see deletions never use it.
    # Titles are compared with the kernel's normalize_title (NFKC, casefold), which SQL cannot
    # reproduce, so candidates are filtered in Python: the tables are small.

    async def write_knowledge(self, version: KnowledgeVersion) -> bool:
        return await asyncio.to_thread(self._write_knowledge, version)

    def _write_knowledge(self, v: KnowledgeVersion) -> bool:
        with self._transaction() as cur:
            stored = cur.execute("SELECT 1 FROM knowledge_versions WHERE version_id = ?", (v.version_id,))
            if stored.fetchone():
                return False
            (latest,) = cur.execute(
                "SELECT max(version) FROM knowledge_versions WHERE logical_id = ?", (v.logical_id,)
            ).fetchone() or (None,)
            expected = int(latest) + 1 if latest is not None else 1
            if v.version != expected:
                # Raised inside the transaction: it is rolled back, nothing is written.
                raise KnowledgeConflict(
                    f"k:{v.logical_id}: version {v.version} does not follow {expected - 1}"
                )
            cur.execute(
                "UPDATE knowledge_versions SET is_current = false WHERE logical_id = ? AND is_current",
                (v.logical_id,),
            )
            cur.execute(
                f"""INSERT INTO knowledge_versions ({", ".join(_KNOWLEDGE_COLUMNS)})
                VALUES ({", ".join("?" * len(_KNOWLEDGE_COLUMNS))})""",
                _knowledge_row(v),
            )
            if v.version == 1:
                cur.execute(
                    "INSERT OR IGNORE INTO knowledge_metrics (logical_id, confidence, last_reinforced_at) "
                    "VALUES (?, ?, ?)",
                    (v.logical_id, INITIAL_CONFIDENCE.get(v.created_by, DEFAULT_CONFIDENCE), v.created_at),
                )
        return True

    async def knowledge_versions(self, logical_id: str) -> list[KnowledgeVersion]:
        rows = await asyncio.to_thread(
            self._query, f"{_KNOWLEDGE_SELECT} WHERE logical_id = ? ORDER BY version", (logical_id,)
        )
        return [_knowledge(r) for r in rows]

    async def current_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        sql = f"{_KNOWLEDGE_SELECT} WHERE is_current AND NOT is_deleted"
        params: list[Any] = []
        if project is not None:
            sql += " AND ((scope = 'project' AND project = ?) OR (? AND scope = 'global'))"
            params = [project, include_global]
        rows = await asyncio.to_thread(self._query, sql, params)
        return sorted((_knowledge(r) for r in rows), key=canonical_order)

    async def deleted_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        sql = f"{_KNOWLEDGE_SELECT} WHERE is_current AND is_deleted"
        params: list[Any] = []
        if project is not None:
            sql += " AND ((scope = 'project' AND project = ?) OR (? AND scope = 'global'))"
            params = [project, include_global]
        rows = await asyncio.to_thread(self._query, sql + " ORDER BY created_at DESC, logical_id", params)
        return [_knowledge(r) for r in rows]

    async def knowledge_tombstone(
        self, project: str, *, logical_id: str | None = None, title: str | None = None
    ) -> KnowledgeVersion | None:
        def run() -> KnowledgeVersion | None:
            # The base table, never the alive view: a death certificate is what it must see.
            if logical_id is not None:
                rows = self._query(f"{_KNOWLEDGE_SELECT} WHERE logical_id = ? AND is_current", (logical_id,))
                if rows:
                    # The entry's own state decides: alive (un-deleted) means no tombstone.
                    found = _knowledge(rows[0])
                    return found if found.is_deleted else None
            if title is not None:
                wanted = normalize_title(title)
                rows = self._query(
                    f"{_KNOWLEDGE_SELECT} WHERE is_current AND is_deleted "
                    "AND (scope = 'global' OR project = ?) ORDER BY created_at, logical_id",
                    (project,),
                )
                for row in rows:
                    found = _knowledge(row)
                    if normalize_title(found.title) == wanted:
                        return found
            return None

        return await asyncio.to_thread(run)

    async def knowledge_metrics(self, logical_ids: Sequence[str] | None = None) -> dict[str, KnowledgeMetric]:
        sql = "SELECT logical_id, confidence, last_reinforced_at FROM knowledge_metrics"
        params: list[Any] = []
        if logical_ids is not None:
            if not logical_ids:
                return {}
            sql += " WHERE logical_id IN (SELECT unnest(?))"
            params = [list(logical_ids)]
        rows = await asyncio.to_thread(self._query, sql, params)
        found = {i: KnowledgeMetric(i, float(c), float(at) if at is not None else None) for i, c, at in rows}
        order = found if logical_ids is None else logical_ids
        return {i: found[i] for i in order if i in found}

    async def reinforce_knowledge(self, logical_ids: Sequence[str], amount: float, at: float) -> int:
        ids = list(dict.fromkeys(logical_ids))  # one row per id: DuckDB's upsert refuses repeats
        if not ids:
            return 0

        def run() -> int:
            with self._transaction() as cur:
                cur.execute(
                    """INSERT INTO knowledge_metrics (logical_id, confidence, last_reinforced_at)
                    SELECT unnest($1), least(1.0, $2 + $3), $4
                    ON CONFLICT (logical_id) DO UPDATE SET
                      confidence = least(1.0, knowledge_metrics.confidence + $3),
                      last_reinforced_at = excluded.last_reinforced_at""",
                    (ids, DEFAULT_CONFIDENCE, amount, at),
                )
            return len(ids)

        return await asyncio.to_thread(run)

    async def decay_knowledge(self, factor: float, not_reinforced_since: float) -> int:
        def run() -> int:
            with self._transaction() as cur:
                result = cur.execute(
                    """UPDATE knowledge_metrics SET confidence = confidence * ?
                    WHERE last_reinforced_at IS NULL OR last_reinforced_at < ?""",
                    (factor, not_reinforced_since),
                ).fetchone()
            return int(result[0]) if result else 0

        return await asyncio.to_thread(run)

    async def record_contradiction(self, judgement: KnowledgeContradiction) -> None:
        c = judgement

        def run() -> None:
            with self._transaction() as cur:
                cur.execute(
                    """INSERT INTO knowledge_contradictions (first_id, second_id, project, status,
                        first_fingerprint, second_fingerprint, judged_at, judged_by, reason, kept_id)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (first_id, second_id) DO UPDATE SET
                      project = excluded.project, status = excluded.status,
                      first_fingerprint = excluded.first_fingerprint,
                      second_fingerprint = excluded.second_fingerprint,
                      judged_at = excluded.judged_at, judged_by = excluded.judged_by,
                      reason = excluded.reason, kept_id = excluded.kept_id""",
                    (
                        c.first_id, c.second_id, c.project, c.status, c.first_fingerprint,
                        c.second_fingerprint, c.judged_at, c.judged_by, c.reason, c.kept_id,
                    ),
                )  # fmt: skip

        await asyncio.to_thread(run)

    async def knowledge_contradictions(
        self, project: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[KnowledgeContradiction]:
        sql = """SELECT first_id, second_id, project, status, first_fingerprint, second_fingerprint,
            judged_at, judged_by, reason, kept_id FROM knowledge_contradictions WHERE true"""
        params: list[Any] = []
        if project is not None:
            sql += " AND project = ?"
            params.append(project)
        if statuses is not None:
            sql += " AND status IN (SELECT unnest(?))"
            params.append(list(statuses))
        rows = await asyncio.to_thread(
            self._query, sql + " ORDER BY judged_at DESC, first_id, second_id", params
        )
        return [KnowledgeContradiction(*row) for row in rows]

    # -- teams -----------------------------------------------------------------------------

    async def team_binding(self, project: str) -> TeamBinding | None:
        rows = await asyncio.to_thread(
            self._query,
            "SELECT project, team, bound_at, policy FROM team_bindings WHERE project = ?",
            (project,),
        )
        return TeamBinding(*rows[0]) if rows else None

    async def set_team_binding(self, project: str, binding: TeamBinding | None) -> None:
        def run() -> None:
            with self._transaction() as cur:
                cur.execute("DELETE FROM team_bindings WHERE project = ?", (project,))
                if binding is not None:
                    cur.execute(
                        "INSERT INTO team_bindings (project, team, policy, bound_at) VALUES (?, ?, ?, ?)",
                        (project, binding.team, binding.policy, binding.bound_at),
                    )

        await asyncio.to_thread(run)

    async def team_policy(self, team: str) -> str | None:
        rows = await asyncio.to_thread(
            self._query, "SELECT policy FROM team_policies WHERE team = ?", (team,)
        )
        return str(rows[0][0]) if rows else None

    async def set_team_policy(self, team: str, policy: str) -> None:
        def run() -> None:
            with self._transaction() as cur:
                cur.execute(
                    """INSERT INTO team_policies (team, policy) VALUES (?, ?)
                    ON CONFLICT (team) DO UPDATE SET policy = excluded.policy""",
                    (team, policy),
                )

        await asyncio.to_thread(run)

    async def record_decisions(self, decisions: Sequence[KnowledgeDecision]) -> int:
        rows = [
            (d.decision_id, d.logical_id, d.project, d.fingerprint, d.decision, d.decided_by, d.decided_at)
            for d in {d.decision_id: d for d in decisions}.values()
        ]
        if not rows:
            return 0

        def run() -> int:
            with self._transaction() as cur:
                held = cur.execute(
                    "SELECT decision_id FROM knowledge_decisions WHERE decision_id IN (SELECT unnest(?))",
                    ([r[0] for r in rows],),
                ).fetchall()
                known = {r[0] for r in held}
                new = [r for r in rows if r[0] not in known]
                if new:
                    cur.executemany(
                        """INSERT INTO knowledge_decisions (decision_id, logical_id, project, fingerprint,
                            decision, decided_by, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                        new,
                    )
                return len(new)

        return await asyncio.to_thread(run)

    async def knowledge_decisions(
        self, project: str | None = None, *, logical_ids: Sequence[str] | None = None
    ) -> list[KnowledgeDecision]:
        sql = """SELECT decision_id, logical_id, fingerprint, decision, decided_by, decided_at, project
            FROM knowledge_decisions WHERE true"""
        params: list[Any] = []
        if project is not None:
            sql += " AND project = ?"
            params.append(project)
        if logical_ids is not None:
            sql += " AND logical_id IN (SELECT unnest(?))"
            params.append(list(logical_ids))
        rows = await asyncio.to_thread(
            self._query, sql + " ORDER BY logical_id, decided_at, decision_id", params
        )
        return [KnowledgeDecision(*row) for row in rows]

    # -- entities --------------------------------------------------------------------------
    #
    # One row per entity, names and relations as JSON text; a merged entity keeps its row with
    # ``merged_into`` set. Listings are read whole and filtered by project in SQL only: the
    # kernel matches names in its own normalised form.

    async def write_entities(self, entities: Sequence[Entity]) -> None:
        rows = [_entity_row(e) for e in entities]
        if not rows:
            return

        def run() -> None:
            with self._transaction() as cur:
                cur.executemany(
                    f"""INSERT OR REPLACE INTO entities ({", ".join(_ENTITY_COLUMNS)})
                    VALUES ({", ".join("?" * len(_ENTITY_COLUMNS))})""",
                    rows,
                )

        await asyncio.to_thread(run)

    async def delete_entities(self, entity_ids: Sequence[str], updated: Sequence[Entity] = ()) -> int:
        ids, rows = sorted(set(entity_ids)), [_entity_row(e) for e in updated]

        def run() -> int:
            with self._transaction() as cur:
                removed = 0
                if ids:
                    found = cur.execute(
                        "DELETE FROM entities WHERE id IN (SELECT unnest(?))", (ids,)
                    ).fetchone()
                    removed = int(found[0]) if found else 0
                if rows:
                    cur.executemany(
                        f"""INSERT OR REPLACE INTO entities ({", ".join(_ENTITY_COLUMNS)})
                        VALUES ({", ".join("?" * len(_ENTITY_COLUMNS))})""",
                        rows,
                    )
            return removed

        return await asyncio.to_thread(run)

    async def get_entity(self, entity_id: str) -> Entity | None:
        rows = await asyncio.to_thread(self._query, f"{_ENTITY_SELECT} WHERE id = ?", (entity_id,))
        return _entity(rows[0]) if rows else None

    async def list_entities(
        self, project: str | None = None, *, include_global: bool = True, include_merged: bool = False
    ) -> list[Entity]:
        sql = f"{_ENTITY_SELECT} WHERE (? OR merged_into IS NULL)"
        params: list[Any] = [include_merged]
        if project is not None:
            sql += " AND (coalesce(project, '') = ? OR (? AND coalesce(project, '') = ''))"
            params += [project, include_global]
        rows = await asyncio.to_thread(self._query, sql, params)
        return sorted((_entity(r) for r in rows), key=entity_order)

    # -- the event log ---------------------------------------------------------------------

    async def append_events(self, project: str, run: str, events: Sequence[NewEvent], at: float) -> list[int]:
        def run_() -> list[int]:
            with self._transaction() as cur:
                row = cur.execute(
                    "SELECT last_seq FROM event_runs WHERE project = ? AND run = ?", (project, run)
                ).fetchone()
                last = int(row[0]) if row else 0
                seqs = list(range(last + 1, last + 1 + len(events)))
                # An Arrow table, as in _write: list parameters cost ~18 ms per 100 values,
                # executemany one statement per row; this is ~8 ms per 100 events.
                event_rows = pa.table(  # noqa: F841 (read by DuckDB by name)
                    {
                        "seq": pa.array(seqs, pa.int64()),
                        "kind": [e.kind for e in events],
                        "content": [e.content for e in events],
                        "working": pa.array([e.working for e in events], pa.bool_()),
                        "key": pa.array([e.key for e in events], pa.string()),
                    }
                )
                cur.execute(
                    """INSERT INTO events (project, run, seq, kind, content, working, key, created_at)
                    SELECT ?, ?, seq, kind, content, working, key, ? FROM event_rows""",
                    (project, run, at),
                )
                if row is None:
                    cur.execute(
                        """INSERT INTO event_runs
                        (project, run, last_seq, covered_seq, created_at, updated_at)
                        VALUES (?, ?, ?, 0, ?, ?)""",
                        (project, run, last + len(events), at, at),
                    )
                else:
                    cur.execute(
                        "UPDATE event_runs SET last_seq = ?, updated_at = ? WHERE project = ? AND run = ?",
                        (last + len(events), at, project, run),
                    )
                return seqs

        return await asyncio.to_thread(run_)

    async def run_events(
        self,
        project: str,
        run: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
        limit: int | None = None,
        newest: bool = False,
    ) -> list[RunEvent]:
        sql = """SELECT project, run, seq, kind, content, working, key, created_at FROM events
            WHERE project = ? AND run = ? AND seq > ?"""
        params: list[Any] = [project, run, after_seq]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            params.append(upto_seq)
        sql += " ORDER BY seq DESC" if newest else " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))
        rows = await asyncio.to_thread(self._query, sql, params)
        found = [RunEvent(*row) for row in rows]
        return found[::-1] if newest else found

    async def run_state(self, project: str, run: str) -> RunState | None:
        rows = await asyncio.to_thread(
            self._query,
            """SELECT project, run, last_seq, covered_seq, created_at, updated_at FROM event_runs
            WHERE project = ? AND run = ?""",
            (project, run),
        )
        return RunState(*rows[0]) if rows else None

    async def advance_run(
        self, project: str, run: str, covered_seq: int, snapshot: WorkingSnapshot | None, at: float
    ) -> None:
        def run_() -> None:
            with self._transaction() as cur:
                row = cur.execute(
                    "SELECT last_seq, covered_seq FROM event_runs WHERE project = ? AND run = ?",
                    (project, run),
                ).fetchone()
                if row is None or covered_seq <= int(row[1]):
                    return
                cur.execute(
                    "UPDATE event_runs SET covered_seq = ?, updated_at = ? WHERE project = ? AND run = ?",
                    (min(covered_seq, int(row[0])), at, project, run),
                )
                if snapshot is not None:
                    facts = json.dumps(
                        [
                            {"key": f.key, "content": f.content, "seq": f.seq, "kind": f.kind}
                            for f in snapshot.facts
                        ]
                    )
                    cur.execute(
                        """INSERT INTO event_working (project, run, as_of_seq, facts, taken_at)
                        VALUES (?, ?, ?, ?, ?) ON CONFLICT (project, run) DO UPDATE SET
                        as_of_seq = excluded.as_of_seq, facts = excluded.facts,
                        taken_at = excluded.taken_at""",
                        (project, run, snapshot.as_of_seq, facts, snapshot.taken_at),
                    )

        await asyncio.to_thread(run_)

    async def working_snapshot(self, project: str, run: str) -> WorkingSnapshot | None:
        rows = await asyncio.to_thread(
            self._query,
            "SELECT as_of_seq, facts, taken_at FROM event_working WHERE project = ? AND run = ?",
            (project, run),
        )
        if not rows:
            return None
        as_of, facts, taken_at = rows[0]
        return WorkingSnapshot(
            int(as_of), tuple(WorkingFact(**f) for f in json.loads(facts)), float(taken_at)
        )

    async def list_runs(self, project: str | None = None, limit: int = 100) -> list[RunState]:
        where, params = ("WHERE project = ?", [project]) if project is not None else ("", [])
        rows = await asyncio.to_thread(
            self._query,
            f"""SELECT project, run, last_seq, covered_seq, created_at, updated_at FROM event_runs {where}
            ORDER BY updated_at DESC, project, run LIMIT ?""",
            [*params, max(0, limit)],
        )
        return [RunState(*row) for row in rows]

    async def runs_behind(self, limit: int = 1_000) -> list[RunState]:
        rows = await asyncio.to_thread(
            self._query,
            """SELECT project, run, last_seq, covered_seq, created_at, updated_at FROM event_runs
            WHERE last_seq > covered_seq ORDER BY updated_at, project, run LIMIT ?""",
            (limit,),
        )
        return [RunState(*row) for row in rows]

    # -- maintenance (benchmarks, tests) ---------------------------------------------------

    async def sync_search_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        index = self._index
        if index is None:
            self._cursor().close()  # reopens after an invalidation, or raises
            index = self._index
        assert index is not None

        def run() -> int:
            total = index.behind()
            if progress is not None:
                progress(0, total)
                index.progress = lambda done: progress(done, max(total, done))
            try:
                added = index.catch_up(force=True)
            finally:
                index.progress = None
            index.optimize()
            return added

        return await asyncio.to_thread(run)

    async def sync_index(self, optimize: bool = True) -> None:
        """Bring the index fully up to date (and merged, with ``optimize``)."""
        if self._index is not None:
            await asyncio.to_thread(self._index.catch_up)
            if optimize:
                await asyncio.to_thread(self._index.optimize)


# ---------------------------------------------------------------------------------------------
# The full-text index
# ---------------------------------------------------------------------------------------------


class _Index:
    """LanceDB table ``messages`` with a native BM25 index over ``text``, fed from DuckDB."""

    def __init__(
        self, path: Path, connection: Callable[[], duckdb.DuckDBPyConnection], gate: _TrimGate
    ) -> None:
        self.path = path
        # The store's connection, asked for at each statement (a forget replaces it).
        self._connection = connection
        self._gate = gate
        self._db: Any = None
        self._table: Any = None
        self._append_lock = threading.Lock()
        self._optimize_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.watermark = 0
        # True when DuckDB may hold rows past the watermark: set by every write (and at open),
        # cleared before a catch-up reads, so a search skips the DuckDB query when nothing
        # was written since the last catch-up. One process owns the file, so no write is missed.
        self._dirty = True
        self._fts_ready = False
        self._next_optimize_at = 0.0
        self.pending_since: float | None = None
        self.unmerged = 0
        self.error: str | None = None
        self.last_optimize_seconds: float | None = None
        self.optimizations = 0
        # Resolves the tool of results stored before results were annotated (a rebuild).
        self._calls = CallMemo()
        #: Called with the items indexed so far during a catch-up (``lore reindex``).
        self.progress: Callable[[int], None] | None = None
        # Every project of the table's rows (a superset: read from DuckDB, then grown by
        # each append before it is made), for the project filter; loaded at first need.
        self._projects: set[str] | None = None

    def _statement(self) -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A cursor on the store's connection, with its trim gate held (``_TrimGate``)."""
        return _gated_cursor(self._connection, self._gate)

    def lagging(self) -> bool:
        with self._statement() as cur:
            (newest,) = cur.execute(
                "SELECT greatest((SELECT coalesce(max(seq), 0) FROM messages), "
                "(SELECT coalesce(max(seq), 0) FROM distillations))"
            ).fetchone() or (0,)
            row = cur.execute("SELECT value FROM lore_meta WHERE key = 'fts_watermark'").fetchone()
        return int(newest) > (int(row[0]) if row else 0)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(FTS_STOP_WAIT_SECONDS)
            if self._thread.is_alive():
                # A merge (lancedb's optimize) cannot be interrupted and takes minutes on a
                # large index. It holds no lock the close needs and commits atomically or
                # not at all: an abandoned one is redone after the next start (the unmerged
                # rows are counted at open and scanned by searches meanwhile).
                log.info("full-text index: a merge still runs at close; it is redone after the next start")
        # A catch-up in progress (DuckDB reads, appends) holds this lock: it ends soon,
        # since nothing writes any more.
        with self._append_lock:
            self._table = None
            self._db = None

    def wake(self) -> None:
        """Called after every write that added rows (and when the index lags at open)."""
        self._dirty = True
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="lore-fts-index", daemon=True)
                self._thread.start()
        self._wake.set()

    # -- opening ---------------------------------------------------------------------------

    def _ensure_table(self) -> Any:
        if self._table is not None:
            return self._table
        with self._statement() as meta:
            row = meta.execute("SELECT value FROM lore_meta WHERE key = 'fts_watermark'").fetchone()
            rules = meta.execute("SELECT value FROM lore_meta WHERE key = 'fts_rules'").fetchone()
        watermark = int(row[0]) if row else 0
        self._fts_ready = False
        try:
            db = lance.connect(self.path)
            tables = set(db.list_tables().tables)
            stale = [t for t in _OLD_INDEX_TABLES if t in tables]
            current = fulltext_rules()
            if _INDEX_TABLE in tables and (rules is None or rules[0] != current):
                stale.append(_INDEX_TABLE)
            if stale:
                # Cut by other rules (or an older layout): rebuilt from DuckDB.
                log.info("full-text index at %s: rebuilding it (passage rules %s)", self.path, current)
                for name in stale:
                    db.drop_table(name)
                tables -= set(stale)
                watermark = 0
                self._set_meta("fts_watermark", "0")
            self._set_meta("fts_rules", current)
            if _INDEX_TABLE in tables:
                table = db.open_table(_INDEX_TABLE)
                # A crash between an append and saving the watermark leaves rows past it.
                newest = table.search().where(f"seq > {watermark}").select(["seq"]).to_arrow()
                if newest.num_rows:
                    watermark = max(watermark, int(pa.compute.max(newest["seq"]).as_py()))
                self.unmerged = _unindexed_rows(table)
                if self._has_fts(table):
                    _ensure_scalar_indexes(table)  # an index built before they existed
                if self.unmerged:
                    # Appended before the last shutdown but never merged: merge them soon.
                    self.pending_since = time.monotonic() - OPTIMIZE_IDLE_SECONDS
            else:
                table = db.create_table(_INDEX_TABLE, schema=_INDEX_SCHEMA)
                watermark = 0
        except Exception as exc:
            # The index is derived data: rebuild it from DuckDB rather than fail.
            log.warning("full-text index at %s unreadable (%s); rebuilding it from DuckDB", self.path, exc)
            shutil.rmtree(self.path, ignore_errors=True)
            self._fts_ready = False
            self.unmerged, self.pending_since = 0, None
            db = lance.connect(self.path)
            table = db.create_table(_INDEX_TABLE, schema=_INDEX_SCHEMA)
            watermark = 0
        self._db, self._table, self.watermark = db, table, watermark
        return table

    def _has_fts(self, table: Any) -> bool:
        # Cached once true: list_indices() costs a few milliseconds on every search otherwise.
        # getattr (here and in the helpers below): lancedb's index descriptions, read defensively.
        if not self._fts_ready:
            self._fts_ready = any(getattr(ix, "index_type", "") == "FTS" for ix in table.list_indices())
        return self._fts_ready

    # -- feeding ---------------------------------------------------------------------------

    def behind(self) -> int:
        """Items (messages and distillations) not in the index yet (all of them before a
        rebuild)."""
        with self._append_lock:
            self._ensure_table()
            watermark = self.watermark
        with self._statement() as cur:
            (count,) = cur.execute(
                "SELECT (SELECT count(*) FROM messages WHERE seq > $1) "
                "+ (SELECT count(*) FROM distillations WHERE seq > $1)",
                (watermark,),
            ).fetchone() or (0,)
        return int(count)

    def catch_up(self, force: bool = False) -> int:
        """Copy every committed item past the watermark into the index, as passages.
        Returns the items added."""
        added = 0
        with self._append_lock:
            table = self._ensure_table()
            if not self._dirty and self._fts_ready and not force:
                return 0
            # Cleared before reading: a write committing meanwhile sets it again.
            self._dirty = False
            try:
                added = self._copy_new_rows(table)
            except BaseException:
                self._dirty = True  # the next search or tick retries the copy
                raise
        return added

    def _set_meta(self, key: str, value: str) -> None:
        with self._statement() as cur:
            cur.execute(
                """INSERT INTO lore_meta (key, value) VALUES (?, ?)
                ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
                (key, value),
            )

    def _copy_new_rows(self, table: Any) -> int:
        """The catch-up itself; the caller holds the append lock. Returns items indexed."""
        added = 0
        while True:
            with self._statement() as cur:
                # Distillations share the sequence (and so the watermark) and are indexed
                # as "d:<id>" items. Their text never changes (archiving only flags them).
                rows = cur.execute(
                    f"""SELECT * FROM (
                        SELECT seq, id, session_id, project, role, position, created_at, blocks,
                            NULL AS content, {_TEXT_IF_NO_BLOCKS} AS text
                        FROM messages WHERE seq > $1
                        UNION ALL
                        SELECT seq, $2 || id, session_id, project, $3, 0, created_at, NULL, content, NULL
                        FROM distillations WHERE seq > $1
                    ) ORDER BY seq LIMIT $4""",
                    (self.watermark, DISTILLATION_PREFIX, DISTILLATION_ROLE, INDEX_BATCH_ROWS),
                ).fetchall()
            if not rows:
                break
            passages = self._passage_rows(rows)
            if passages.num_rows:
                if self._projects is not None:
                    # A new set, not an update: a search may be iterating the old one.
                    self._projects = self._projects | set(passages.column("project").to_pylist())
                table.add(passages)
                if self._has_fts(table):
                    self.unmerged += passages.num_rows
                    self.pending_since = self.pending_since or time.monotonic()
            self.watermark = int(rows[-1][0])
            added += len(rows)
            self._set_meta("fts_watermark", str(self.watermark))
            if self.progress is not None:
                self.progress(added)
        # The first index is built once over everything copied (a rebuild from DuckDB
        # copies in batches; indexing each batch would re-merge the index every time).
        # Checked by row count, not by `added`: a crash may have left rows without one.
        if not self._has_fts(table) and table.count_rows() > 0:
            from lancedb.index import FTS

            table.create_index("text", config=FTS(with_position=False), replace=True)
            self._fts_ready = True
            _ensure_scalar_indexes(table)
        return added

    def _passage_rows(self, rows: Sequence[tuple[Any, ...]]) -> pa.Table:
        """Index rows for the passages of these messages and distillations."""
        columns: dict[str, list[Any]] = {name: [] for name in _INDEX_SCHEMA.names}
        for seq, ident, session, project, role, position, created_at, blocks, content, text in rows:
            if content is None:
                passages = self._calls.cut(session, role, json.loads(blocks) if blocks else [], text or "")
            else:
                passages = cut_text(content)
            for p in passages:
                columns["seq"].append(seq)
                columns["session_id"].append(session)
                columns["project"].append(project)
                fields = [ident, p.index, p.start, p.end, session, project, role, p.tool, p.source]
                columns["hit"].append(_HIT_JSON([*fields, position, created_at]))
                columns["text"].append(p.text)
        return pa.table(columns, schema=_INDEX_SCHEMA)

    def optimize(self) -> None:
        """Merge appended rows into the index and compact fragments (runs beside appends)."""
        with self._optimize_lock:
            table = self._table
            if table is None or not self.unmerged:
                return
            merged = self.unmerged
            started = time.monotonic()
            table.optimize(cleanup_older_than=CLEANUP_OLDER_THAN)
            ended = time.monotonic()
            self.last_optimize_seconds = round(ended - started, 3)
            self._next_optimize_at = ended + OPTIMIZE_PAUSE_FACTOR * (ended - started)
            self.optimizations += 1
            self.unmerged = max(0, self.unmerged - merged)
            self.pending_since = time.monotonic() if self.unmerged else None

    def forget(self, session_id: str, delete_rows: Callable[[], T]) -> tuple[T, int]:
        """``delete_rows()`` (the session's rows in DuckDB), then the session's passages out
        of the index and out of its files: returns what ``delete_rows`` returned and how many
        passages went. No catch-up (which could copy a row read before the delete) and no
        merge runs meanwhile; searches wait for the catch-up they start with."""
        with self._append_lock, self._optimize_lock:
            deleted = delete_rows()
            table = self._ensure_table()
            where = f"session_id = {_sql_str(session_id)}"
            if not table.count_rows(where):
                return deleted, 0
            # The full-text index holds the passages' terms: it is built again over what is
            # left. Dropped first, so that rewriting fragments does not index their rows one
            # merge at a time (13 s for 200K passages, against 1 s for a new index).
            for ix in table.list_indices():
                table.drop_index(ix.name)
            self._fts_ready = False
            removed = lance.remove_for_good(table, self.path / f"{_INDEX_TABLE}.lance", where)
            if table.count_rows() > 0:
                from lancedb.index import FTS

                table.create_index("text", config=FTS(with_position=False), replace=True)
                self._fts_ready = True
                _ensure_scalar_indexes(table)
            lance.drop_old_versions(table)
            self.unmerged, self.pending_since = 0, None
            return deleted, removed

    def optimize_due(self) -> bool:
        if not self.unmerged or self.pending_since is None:
            return False
        now = time.monotonic()
        if now < self._next_optimize_at:
            return False
        return self.unmerged >= OPTIMIZE_PENDING_ROWS or now - self.pending_since >= OPTIMIZE_IDLE_SECONDS

    def _run(self) -> None:
        while not self._stop.is_set():
            woke = self._wake.wait(timeout=_TICK_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                break
            if woke:
                # Let a burst of writes land first: fewer, larger appends make fewer fragments.
                self._stop.wait(0.5)
            try:
                if self._dirty:
                    self.catch_up()
                if self.optimize_due():
                    self.optimize()
                if self.error:
                    log.warning("full-text index works again")
                self.error = None
            except Exception as exc:
                if self._stop.is_set():
                    break
                message = " ".join(str(exc).split())[:300]
                if message != self.error:
                    log.error("full-text index update failed (search may miss recent messages): %s", message)
                self.error = message
                self._dirty = True  # retry the copy
                self._stop.wait(5)

    # -- querying --------------------------------------------------------------------------

    def search(self, query: str, session_id: str | None, project: str | None, limit: int) -> list[SearchHit]:
        self.catch_up()  # a committed message is searchable at once
        table = self._table
        if table is None or not self._has_fts(table):
            return []
        # A session is a small allow-list (fast); a project alone is filtered as "none of
        # the other projects" (MAX_EXCLUDED_PROJECTS), its hits checked after: a project
        # whose rows were appended after the list was made is then searched again with "=".
        others = self._other_projects(project) if project is not None and session_id is None else None
        if others is not None:
            where = f"project NOT IN ({', '.join(map(_sql_str, others))})" if others else None
            hits = self._search(table, query, where, limit)
            strays = {h.project for h in hits} - {project}
            if not strays:
                return hits
            self._projects = (self._projects or set()) | strays  # listed from now on
        filters = []
        if session_id is not None:
            filters.append(f"session_id = {_sql_str(session_id)}")
        if project is not None:
            filters.append(f"project = {_sql_str(project)}")
        return self._search(table, query, " AND ".join(filters) or None, limit)

    @staticmethod
    def _search(table: Any, query: str, where: str | None, limit: int) -> list[SearchHit]:
        def build(q: Any) -> Any:
            q = q.nearest_to_text(query).limit(limit).select(["hit", "text", "_score"])
            return q.where(where) if where else q  # a filter before the search (the default)

        rows = lance.run_query(table, build).to_pylist()
        hits = [_search_hit(r["hit"], r["text"], r["_score"]) for r in rows]
        hits.sort(key=lambda h: (-h.score, h.id, h.passage or 0))
        return hits

    def _other_projects(self, project: str) -> list[str] | None:
        """The projects of the table's rows but ``project``, sorted (``None``: too many to
        list, filter with ``=``)."""
        if self._projects is None:
            with self._append_lock:  # no append between the read and the set taking over
                if self._projects is None:
                    with self._statement() as cur:
                        rows = cur.execute(
                            "SELECT DISTINCT project FROM messages "
                            "UNION SELECT DISTINCT project FROM distillations"
                        ).fetchall()
                    self._projects = {r[0] for r in rows}
        others = sorted(p for p in self._projects if p != project)
        return others if len(others) <= MAX_EXCLUDED_PROJECTS else None

    def health(self) -> dict[str, Any]:
        return {
            "ok": self.error is None,
            "error": self.error,
            "path": str(self.path),
            "watermark": self.watermark,
            "passages": self._passage_count(),
            "unmerged_rows": self.unmerged,
            "optimizations": self.optimizations,
            "last_optimize_seconds": self.last_optimize_seconds,
        }

    def _passage_count(self) -> int | None:
        table = self._table
        if table is None:
            return None
        try:
            return int(table.count_rows())
        except Exception:  # a figure for status, never a reason to fail
            return None


# ---------------------------------------------------------------------------------------------
# Row conversion
# ---------------------------------------------------------------------------------------------


def _unindexed_rows(table: Any) -> int:
    """Rows of the table its FTS index does not cover yet (0 when unknown)."""
    try:
        for ix in table.list_indices():
            if getattr(ix, "index_type", "") == "FTS":
                stats = table.index_stats(ix.name)
                return int(getattr(stats, "num_unindexed_rows", 0) or 0)
    except Exception:  # statistics are an optimisation hint, never a reason to fail
        return 0
    return 0


def _ensure_scalar_indexes(table: Any) -> None:
    """Create the missing filter indexes; a failure only costs filtered searches speed."""
    try:
        from lancedb.index import Bitmap, BTree

        have = {column for ix in table.list_indices() for column in getattr(ix, "columns", ())}
        for column, kind in _SCALAR_INDEXES:
            if column not in have:
                table.create_index(column, config=Bitmap() if kind == "bitmap" else BTree(), replace=True)
    except Exception as exc:
        log.warning("full-text index: could not create the filter indexes (%s)", " ".join(str(exc).split()))


def _search_hit(hit: str, text: str | None, score: float) -> SearchHit:
    """A full-text hit from its index row's ``hit`` array, text and score."""
    item, passage, start, end, session, project, role, tool, source, position, created_at = json.loads(hit)
    return SearchHit(
        id=item,
        session_id=session,
        project=project or "",
        role=role,
        score=float(score),
        text=text or "",
        position=int(position or 0),
        created_at=float(created_at or 0.0),
        passage=int(passage),
        start=int(start),
        end=int(end),
        tool=tool,
        source=source,
    )


def _summarise(
    cur: duckdb.DuckDBPyConnection,
    inserted: Sequence[tuple[Any, ...]],
    batch: Sequence[StoredMessage],
) -> None:
    """Bring the ``session_summary`` rows of the sessions that just gained the ``inserted``
    messages (``(id, session_id, parent_id)``) up to date, in the write's transaction: one
    more message each; a new message is a head (a leaf) unless a message already stored
    names it as its parent (it is then in ``dangling``); its parent stops being a head when
    the session holds it, and becomes ``dangling`` otherwise. The same leaves as counting
    them over the session's messages, without reading any (a parent outside the batch and
    the heads is looked up by its primary key)."""
    sessions = sorted({str(r[1]) for r in inserted})
    found = {
        str(sid): (int(n), set(json.loads(heads)), set(json.loads(dangling)))
        for sid, n, heads, dangling in cur.execute(
            "SELECT session_id, message_count, heads, dangling FROM session_summary "
            f"WHERE session_id IN {_literals(sessions)}"
        ).fetchall()
    }
    summary = {sid: found.get(sid, (0, set(), set())) for sid in sessions}
    counts = dict.fromkeys(sessions, 0)
    # Where each message the batch names lives (stored before or now, it is stored now).
    owner = {m.id: m.session_id for m in batch}
    for mid, sid, _ in inserted:
        owner[str(mid)] = str(sid)
    for mid, sid, _ in inserted:
        _, heads, dangling = summary[str(sid)]
        counts[str(sid)] += 1
        if str(mid) in dangling:
            dangling.discard(str(mid))  # a child of it was stored first: not a leaf
        else:
            heads.add(str(mid))
    unknown = sorted(
        {
            str(parent)
            for _, sid, parent in inserted
            if parent and str(parent) not in owner and str(parent) not in summary[str(sid)][1]
        }
    )
    if unknown:
        owner.update(
            (str(a), str(b))
            for a, b in cur.execute(
                f"SELECT id, session_id FROM messages WHERE id IN {_literals(unknown)}"
            ).fetchall()
        )
    for _, sid, parent in inserted:
        if not parent:
            continue
        _, heads, dangling = summary[str(sid)]
        if str(parent) in heads or owner.get(str(parent)) == str(sid):
            heads.discard(str(parent))
        else:
            dangling.add(str(parent))
    summary_rows = pa.table(  # noqa: F841 (read by DuckDB by name)
        {
            "session_id": sessions,
            "message_count": [summary[s][0] + counts[s] for s in sessions],
            "branch_count": [len(summary[s][1]) for s in sessions],
            "heads": [json.dumps(sorted(summary[s][1])) for s in sessions],
            "dangling": [json.dumps(sorted(summary[s][2])) for s in sessions],
        }
    )
    cur.execute(
        """INSERT INTO session_summary (session_id, message_count, branch_count, heads, dangling)
        SELECT session_id, message_count, branch_count, heads, dangling FROM summary_rows
        ON CONFLICT (session_id) DO UPDATE SET message_count = excluded.message_count,
          branch_count = excluded.branch_count, heads = excluded.heads, dangling = excluded.dangling"""
    )


# Each project's figures in one statement over the sessions, their summary rows, their spend
# state and the knowledge entries (no message is read): see Store.project_summaries.
_PROJECT_SUMMARY_SQL = """
    WITH counted AS (
        SELECT s.project, count(*) AS sessions, coalesce(sum(c.message_count), 0) AS messages,
               max(s.updated_at) AS last
        FROM sessions s LEFT JOIN session_summary c ON c.session_id = s.id
        GROUP BY s.project
    ), spent AS (
        SELECT s.project, sum(try_cast(st.value AS DOUBLE)) AS usd
        FROM session_state st JOIN sessions s ON s.id = st.session_id
        WHERE st.key = ?
        GROUP BY s.project
    ), known AS (
        SELECT project, count(*) AS entries FROM knowledge_versions
        WHERE is_current AND NOT is_deleted AND scope = 'project' AND coalesce(project, '') <> ''
        GROUP BY project
    ), named AS (
        SELECT project FROM counted UNION SELECT id FROM projects UNION SELECT project FROM known
    )
    SELECT n.project, coalesce(c.sessions, 0), coalesce(c.messages, 0), coalesce(k.entries, 0),
           coalesce(sp.usd, 0), coalesce(c.last, p.last_seen_at, 0) AS last
    FROM named n
    LEFT JOIN counted c ON c.project = n.project
    LEFT JOIN spent sp ON sp.project = n.project
    LEFT JOIN known k ON k.project = n.project
    LEFT JOIN projects p ON p.id = n.project
    ORDER BY last DESC, n.project
"""


def _session_filters(
    project: str | None,
    before: tuple[float, str] | None,
    since: float | None,
    harness: str | None,
    model: str | None,
    text: str | None,
) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (or ``""``) and its parameters of :meth:`DuckDBStore.list_sessions`
    over the ``sessions`` table."""
    clauses: list[str] = []
    params: list[Any] = []
    if project is not None:
        clauses.append("project = ?")
        params.append(project)
    if before is not None:
        clauses.append("(updated_at < ? OR (updated_at = ? AND id < ?))")
        params += [float(before[0]), float(before[0]), str(before[1])]
    if since is not None:
        clauses.append("updated_at >= ?")
        params.append(float(since))
    if harness:
        clauses.append("harness = ?")
        params.append(harness)
    if model:
        clauses.append("model = ?")
        params.append(model)
    if text:
        # A case-insensitive substring of the title, id, model or project.
        columns = ("title", "id", "coalesce(model, '')", "project")
        clauses.append("(" + " OR ".join(f"contains(lower({c}), ?)" for c in columns) + ")")
        params += [text.lower()] * len(columns)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _literals(values: Sequence[str]) -> str:
    """``('a', 'b', ...)`` for ``WHERE id IN``: DuckDB looks each literal up in the primary
    key's index, where a list parameter (``id = ANY(?)``) becomes a hash join over a scan.
    Measured on the store's connection at 1M messages: 500 ids 18 against 116 ms, 18 ids
    3.8 against 4.3 ms (benchmarks/README.md, recall.py). ``values`` must not be empty. A
    NUL, which ends a literal in DuckDB's parser, is spliced in as ``chr(0)``."""
    return "(" + ", ".join(_sql_str(v).replace("\x00", "' || chr(0) || '") for v in values) + ")"


# One encoder for all rows: json.dumps with an option builds a new encoder per call.
_BLOCKS_JSON = json.JSONEncoder(ensure_ascii=False).encode
_HIT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _arrow_messages(messages: Sequence[StoredMessage]) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in _MESSAGE_COLUMNS}
    for m in messages:
        columns["id"].append(m.id)
        columns["session_id"].append(m.session_id)
        columns["parent_id"].append(m.parent_id)
        columns["position"].append(m.position)
        columns["role"].append(m.role)
        columns["blocks"].append(_BLOCKS_JSON(m.blocks))
        columns["text"].append(m.text)
        columns["model"].append(m.model)
        columns["usage"].append(json.dumps(m.usage) if m.usage is not None else None)
        columns["harness"].append(m.harness)
        columns["project"].append(m.project)
        columns["api"].append(m.api)
        columns["created_at"].append(m.created_at)
        columns["complete"].append(m.complete)
        columns["origin"].append(m.origin)
        columns["stop_reason"].append(m.stop_reason)
        columns["error"].append(m.error)
        columns["context_layer"].append(m.context_layer)
    return pa.table(columns, schema=_ARROW_MESSAGES)


def _message(row: tuple[Any, ...]) -> StoredMessage:
    r = dict(zip(_MESSAGE_COLUMNS, row, strict=True))
    r["blocks"] = json.loads(r["blocks"]) if r["blocks"] else []
    r["usage"] = json.loads(r["usage"]) if r["usage"] else None
    r["text"] = r["text"] or ""
    r["complete"] = bool(r["complete"])
    return StoredMessage(**r)


_ARCHIVE_SQL = "UPDATE distillations SET archived = true WHERE id IN (SELECT unnest(?)) AND NOT archived"
_DISTILLATION_COLUMNS = (
    "id",
    "session_id",
    "project",
    "generation",
    "content",
    "source_ids",
    "start_at",
    "end_at",
    "method",
    "source_tokens",
    "input_tokens",
    "output_tokens",
    "compression_ratio",
    "archived",
    "worker_provider",
    "worker_model",
    "created_at",
)


def _distillation_row(d: StoredDistillation) -> tuple[Any, ...]:
    return (
        d.id,
        d.session_id,
        d.project,
        d.generation,
        d.text,
        json.dumps(d.source_ids),
        d.start,
        d.end,
        d.method,
        d.source_tokens,
        d.input_tokens,
        d.output_tokens,
        d.compression_ratio,
        d.archived,
        d.worker_provider,
        d.worker_model,
        d.created_at,
    )


def _distillation(row: tuple[Any, ...]) -> StoredDistillation:
    r = dict(zip(_DISTILLATION_COLUMNS, row, strict=True))
    return StoredDistillation(
        id=r["id"],
        session_id=r["session_id"],
        project=r["project"] or "",
        generation=int(r["generation"]),
        text=r["content"],
        source_ids=json.loads(r["source_ids"] or "[]"),
        start=float(r["start_at"]),
        end=float(r["end_at"]),
        method=r["method"],
        source_tokens=int(r["source_tokens"]),
        input_tokens=int(r["input_tokens"]),
        output_tokens=int(r["output_tokens"]),
        compression_ratio=float(r["compression_ratio"]),
        archived=bool(r["archived"]),
        worker_provider=r["worker_provider"],
        worker_model=r["worker_model"],
        created_at=float(r["created_at"]),
    )


def _knowledge_row(v: KnowledgeVersion) -> tuple[Any, ...]:
    return (
        v.version_id,
        v.logical_id,
        v.version,
        True,  # the written version becomes current; write_knowledge clears the previous one
        v.is_deleted,
        v.category,
        v.title,
        v.content,
        v.scope,
        v.project,
        v.sensitivity,
        v.created_by,
        v.updated_by,
        v.source_session,
        v.source_ref,
        v.worker_provider,
        v.worker_model,
        v.created_at,
    )


def _knowledge(row: tuple[Any, ...]) -> KnowledgeVersion:
    r = dict(zip(_KNOWLEDGE_COLUMNS, row, strict=True))
    created_by = r["created_by"] or AUTHOR_USER
    return KnowledgeVersion(
        version_id=r["version_id"],
        logical_id=r["logical_id"],
        version=int(r["version"]),
        category=r["category"],
        title=r["title"],
        content=r["content"],
        scope=r["scope"],
        project=r["project"] or "",
        sensitivity=r["sensitivity"],
        is_deleted=bool(r["is_deleted"]),
        created_at=float(r["created_at"]),
        created_by=created_by,
        updated_by=r["updated_by"] or created_by,
        source_session=r["source_session"],
        source_ref=r["source_ref"],
        worker_provider=r["worker_provider"],
        worker_model=r["worker_model"],
        is_current=bool(r["is_current"]),
    )


def _entity_row(e: Entity) -> tuple[Any, ...]:
    return (
        e.id,
        e.kind,
        e.name,
        json.dumps(e.aliases, ensure_ascii=False),
        json.dumps(relations_json(e.relations), ensure_ascii=False),
        e.project,
        e.sensitivity,
        e.created_at,
        e.updated_at,
        e.created_by,
        e.updated_by,
        e.merged_into,
    )


def _entity(row: tuple[Any, ...]) -> Entity:
    r = dict(zip(_ENTITY_COLUMNS, row, strict=True))
    created_by = r["created_by"] or AUTHOR_USER
    return Entity(
        id=r["id"],
        kind=r["kind"],
        name=r["canonical_name"],
        aliases=aliases_from_json(json.loads(r["aliases"] or "[]")),
        relations=relations_from_json(json.loads(r["relations"] or "[]")),
        project=r["project"] or "",
        sensitivity=r["sensitivity"] or "normal",
        created_at=float(r["created_at"]),
        updated_at=float(r["updated_at"]),
        created_by=created_by,
        updated_by=r["updated_by"] or created_by,
        merged_into=r["merged_into"],
    )


def _session(row: tuple[Any, ...]) -> Session:
    return Session(
        id=row[0],
        project=row[1] or "",
        harness=row[2] or "",
        model=row[3],
        created_at=row[4],
        updated_at=row[5],
        title=row[6] or "",
        message_count=int(row[7]),
        branch_count=int(row[8]),
    )


def _size(path: Path) -> int:
    try:
        if path.is_dir():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        return path.stat().st_size
    except OSError:
        return 0


__all__ = ["SCHEMA_VERSION", "DuckDBStore"]
