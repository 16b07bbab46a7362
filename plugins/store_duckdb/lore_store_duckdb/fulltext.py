"""The full-text index beside the database: a LanceDB table of passages with a native BM25
index over their text, fed from DuckDB (:class:`FullTextIndex`).

Every message row gets a ``seq`` from a DuckDB sequence at insert. The indexer copies rows
with ``seq`` above its watermark into LanceDB in batches, then records the watermark; after a
crash it resumes from there, and a search first catches the index up, so a message is
searchable as soon as its write committed. Appends create LanceDB fragments and rows not yet
merged into the index are scanned at query time, so the indexer runs ``optimize()`` in the
background once enough rows are pending (or the index has been idle a while).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from lore_core.storage.passages import CallMemo, cut_text, fulltext_rules
from lore_core.storage.records import DISTILLATION_PREFIX, DISTILLATION_ROLE, SearchHit
from lore_store_duckdb import lance
from lore_store_duckdb.connection import TrimGate, gated_cursor, sql_str

log = logging.getLogger("lore.store.duckdb")

T = TypeVar("T")


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


#: How long closing the store waits for the index thread. A catch-up ends sooner; a merge
#: in progress (over a minute on a few million rows) is left behind rather than waited for.
FTS_STOP_WAIT_SECONDS = 5.0
#: Old LanceDB versions kept this long after an optimize (a running query may still use one).
CLEANUP_OLDER_THAN = timedelta(minutes=2)


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


class FullTextIndex:
    """LanceDB table ``messages`` with a native BM25 index over ``text``, fed from DuckDB."""

    def __init__(
        self, path: Path, connection: Callable[[], duckdb.DuckDBPyConnection], gate: TrimGate
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
        """A cursor on the store's connection, with its trim gate held (``TrimGate``)."""
        return gated_cursor(self._connection, self._gate)

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
            where = f"session_id = {sql_str(session_id)}"
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
            where = f"project NOT IN ({', '.join(map(sql_str, others))})" if others else None
            hits = self._search(table, query, where, limit)
            strays = {h.project for h in hits} - {project}
            if not strays:
                return hits
            self._projects = (self._projects or set()) | strays  # listed from now on
        filters = []
        if session_id is not None:
            filters.append(f"session_id = {sql_str(session_id)}")
        if project is not None:
            filters.append(f"project = {sql_str(project)}")
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


_HIT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
