"""The vector index: LanceDB tables of chunk vectors beside the DuckDB file (``<file>.vec/``).

One table per embedding model, so a model change starts an index of its own (backfilled
from DuckDB) and vectors of two models or two sizes are never compared. Each row is one
passage of one item (a message or a distillation; knowledge and entities later; column
``chunk`` is the passage's index, :mod:`lore_core.storage.passages`) with the item's ``seq``, kind,
id, session and project, so searches filter by scope before ranking.

What is embedded is derived, as for the full-text index, from a watermark per model over
the ``seq`` that messages and distillations share: items are embedded in ``seq`` order and
the watermark (``lore_meta`` key ``vectors:<model>``) records the highest written. A crash
between a LanceDB append and saving the watermark is repaired at open from the highest
``seq`` in the table (appends are atomic), so nothing is embedded twice or skipped.

Upkeep, so many small appends never degrade queries: every append makes a LanceDB
fragment, so after :data:`OPTIMIZE_APPENDS` appends the table is compacted (``optimize``,
which also adds new rows to the ANN index); once a table holds :data:`ANN_MIN_ROWS` rows an
IVF-RQ index is built (a flat scan of 1M 384-dim vectors takes seconds), and rebuilt when the
table has grown :data:`ANN_REBUILD_GROWTH` times since (its partitions were trained on a
smaller sample) or when compactions have left it more than :data:`ANN_MAX_SEGMENTS` delta
segments (at most ~5% of the time: :data:`ANN_REBUILD_PAUSE_FACTOR`). Both run in the thread
that appended (the gateway's indexer, never a request); searches meanwhile read the previous
version.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from lore_core.storage.records import ItemVectors, VectorDimensionError
from lore_store_duckdb import lance

log = logging.getLogger("lore.store.duckdb")

#: Compact the table after this many appends (each append is a fragment).
OPTIMIZE_APPENDS = 16
#: Build the approximate (IVF-RQ) index once a table holds this many vectors; below it a
#: flat scan is exact and fast enough (~50 ms at 50K on 2 cores).
ANN_MIN_ROWS = 50_000
#: Rebuild the ANN index when the table has grown this many times since it was trained ...
ANN_REBUILD_GROWTH = 4.0
#: ... or when it has this many segments: each optimize adds the new rows as a delta index
#: that every query searches too (measured at 100K: ~1.2 ms more per delta, 13 -> 45 ms
#: after 400 small appends), and LanceDB (without pylance) cannot merge them.
ANN_MAX_SEGMENTS = 8
#: A rebuild for segments starts no sooner than this many times the last build's duration
#: after it ended, so rebuilding takes at most ~5% of the indexer's time. A build takes
#: ~70 s at 2.4M vectors (the IVF-PQ index before it 90-150 s at 1M); without the pause a
#: session's small appends (or a backfill's batches) would start one every 8 compactions,
#: and a 1M backfill would spend most of its time rebuilding. Meanwhile deltas pile up past
#: the limit (queries a little slower); a rebuild for growth is never held back.
ANN_REBUILD_PAUSE_FACTOR = 20.0
#: Vectors per IVF partition (the partition count follows the table size).
ANN_PARTITION_ROWS = 4096
#: The approximate index: IVF partitions of RaBitQ codes (one bit per dimension: 48 bytes
#: for 384 dimensions, as many as the IVF-PQ index with 48 sub-vectors it replaced). Against
#: that index on the real sessions' embeddings (benchmarks/ann_recall.py: 22K passages, their
#: 166 questions): recall@50 0.978 against 0.938 with every partition probed (the codes'
#: own loss), the same within k-means' spread with 2 or 4 of 43 probed (0.58 and 0.74-0.75
#: both). On the 1M benchmark store a project-scoped ANN search takes 15.7-17.7 against
#: 20.4-22.8 ms and the build 63-68 against 109 s (benchmarks/README.md, recall.py). An
#: index of another kind is rebuilt at the next upkeep. One bit a dimension suits embeddings
#: of hundreds of dimensions, as every embedder's; a handful would be too few to rank by.
ANN_KIND = "ivf_rq"
#: Partitions probed per query, and how many candidates per result are re-ranked exactly.
ANN_NPROBES = 24
ANN_REFINE_FACTOR = 4
#: Filter indexes (project, session, kind) once a table holds this many vectors: measured
#: at 200K, a project-scoped search 16 -> 11 ms, a session-scoped one 11 -> 6 ms; they build
#: in a fraction of a second and rows appended later are scanned until the next optimize.
SCALAR_MIN_ROWS = 10_000
_SCALAR_INDEXES = (("project", "bitmap"), ("kind", "bitmap"), ("session_id", "btree"))
#: Old LanceDB versions kept after an optimize (a running query may still read one).
CLEANUP_OLDER_THAN = timedelta(minutes=2)

_META_PREFIX = "vectors:"


def _slug(model: str) -> str:
    base = re.sub(r"[^A-Za-z0-9]+", "_", model).strip("_")[:40] or "model"
    return f"v_{base}_{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _schema(dimensions: int) -> pa.Schema:
    return pa.schema(
        [
            ("seq", pa.int64()),
            ("kind", pa.string()),
            ("item_id", pa.string()),
            ("chunk", pa.int32()),
            ("session_id", pa.string()),
            ("project", pa.string()),
            ("created_at", pa.float64()),
            ("vector", pa.list_(pa.float32(), dimensions)),
        ]
    )


class _Model:
    """One model's table and its bookkeeping (guarded by the index's lock)."""

    def __init__(self, name: str, table: Any, dimensions: int, watermark: int, ann_rows: int) -> None:
        self.name = name
        self.table = table
        self.dimensions = dimensions
        self.watermark = watermark
        self.ann_rows = ann_rows
        #: The kind of the table's ANN index (``ANN_KIND`` once rebuilt); None without one.
        self.ann_kind: str | None = ANN_KIND if ann_rows else None
        #: Rows in the table, kept with the watermark in ``lore_meta`` so that the stats of
        #: a table not opened yet need no LanceDB (:meth:`VectorIndex.stats`).
        self.vectors = 0
        self.appends = 0
        self.scalar_ready = False
        self.optimizations = 0
        self.last_optimize_seconds: float | None = None
        # monotonic time before which too many segments do not start a rebuild (see
        # ANN_REBUILD_PAUSE_FACTOR); 0 after a start, so an index left with many rebuilds soon.
        self.segment_rebuild_after = 0.0


class VectorIndex:
    """The ``.vec`` directory. ``meta_get``/``meta_put`` read and write ``lore_meta`` in
    DuckDB (the put runs in the store's write transaction)."""

    def __init__(
        self,
        path: Path,
        meta_get: Callable[[str], str | None],
        meta_put: Callable[[str, str | None], None],
        meta_keys: Callable[[str], list[str]],
    ) -> None:
        self.path = path
        self._meta_get = meta_get
        self._meta_put = meta_put
        self._meta_keys = meta_keys
        self._lock = threading.RLock()
        self._db: Any = None
        self._models: dict[str, _Model] = {}
        self.error: str | None = None
        # Sessions forgotten in this process, and the highest seq they had then: vectors of
        # their items up to it (read as pending before the forget, written after it) are
        # dropped. New turns of the session come later, with higher seqs.
        self._forgotten: dict[str, int] = {}

    # -- opening ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self._db is None:
            self._db = lance.connect(self.path)
        return self._db

    def _info(self, model: str) -> dict[str, Any] | None:
        raw = self._meta_get(_META_PREFIX + model)
        return json.loads(raw) if raw else None

    def _save(self, m: _Model) -> None:
        info = {"table": _slug(m.name), "dimensions": m.dimensions, "watermark": m.watermark}
        info["vectors"] = m.vectors
        info["ann_rows"] = m.ann_rows
        info["ann_kind"] = m.ann_kind
        self._meta_put(_META_PREFIX + m.name, json.dumps(info))

    def models(self) -> list[str]:
        return sorted(k.removeprefix(_META_PREFIX) for k in self._meta_keys(_META_PREFIX))

    def model(self, name: str, dimensions: int | None = None) -> _Model | None:
        """The model's table, opened (created when ``dimensions`` is given); ``None`` for a
        model never indexed."""
        # Without the lock when open: a search must not wait for a write holding it (its
        # upkeep may be building the ANN index for minutes).
        found = self._models.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self._models.get(name)
            if found is not None:
                return found
            info = self._info(name)
            if info is None and dimensions is None:
                return None
            db = self._connect()
            table_name = _slug(name)
            tables = set(db.list_tables().tables)
            if info is None or table_name not in tables:
                if table_name in tables:
                    db.drop_table(table_name)
                dims = int(info["dimensions"]) if info else int(dimensions or 0)
                table = db.create_table(table_name, schema=_schema(dims))
                m = _Model(name, table, dims, 0, 0)
                self._save(m)
            else:
                try:
                    table = db.open_table(table_name)
                except Exception as exc:
                    # Derived data: rebuilt from DuckDB rather than fail.
                    log.warning("vector table for %s unreadable (%s); re-embedding from DuckDB", name, exc)
                    shutil.rmtree(self.path / f"{table_name}.lance", ignore_errors=True)
                    table = db.create_table(table_name, schema=_schema(int(info["dimensions"])))
                    info = {**info, "watermark": 0, "ann_rows": 0}
                m = _Model(name, table, int(info["dimensions"]), int(info.get("watermark", 0)), 0)
                m.ann_rows = int(info.get("ann_rows", 0)) if _has_vector_index(table) else 0
                # An index saved before its kind was recorded is IVF-PQ.
                m.ann_kind = str(info.get("ann_kind") or "ivf_pq") if m.ann_rows else None
                if info.get("watermark") == 0:
                    self._save(m)  # a rebuilt table: everything is pending again, durably
                # A crash between an append and saving the watermark leaves rows past it.
                newest = table.search().where(f"seq > {m.watermark}").select(["seq"]).to_arrow()
                if newest.num_rows:
                    m.watermark = max(m.watermark, int(pa.compute.max(newest["seq"]).as_py()))
                # Fragments left by the last run count as appends toward the next compaction.
                m.appends = max(0, _fragments(table) - 1)
                m.vectors = table.count_rows()
                if "vectors" not in info:
                    self._save(m)  # recorded once for a store from before the count was kept
            self._models[name] = m
            return m

    def close(self) -> None:
        # No lock: the store closes after a fatal DuckDB error while holding its write lock,
        # which a vector write holding ours may be waiting for. Dropping the handles is
        # atomic; a write in progress finishes on the handle it holds.
        self._models = {}
        self._db = None

    # -- writing ---------------------------------------------------------------------------

    def watermark(self, model: str) -> int:
        """The last item seq embedded, as recorded in DuckDB when the table is not open (so
        that a gateway with nothing to embed never loads LanceDB). Opening the table may
        find rows written past the record by a crash: :meth:`table_watermark`."""
        m = self._models.get(model)
        if m is not None:
            return m.watermark
        info = self._info(model)
        if info is None:
            return 0
        if not self._table_dir(model).is_dir():
            return self.table_watermark(model)  # its files are gone: opening rebuilds it empty
        return int(info.get("watermark", 0))

    def _table_dir(self, model: str) -> Path:
        return self.path / f"{_slug(model)}.lance"

    def table_watermark(self, model: str) -> int:
        """The watermark with the table opened: past the record when a crash came between
        an append and saving it (read before embedding, so those items are not redone)."""
        m = self.model(model)
        return m.watermark if m is not None else 0

    def write(self, model: str, dimensions: int, items: Sequence[ItemVectors]) -> int:
        with self._lock:
            m = self.model(model, dimensions)
            assert m is not None
            if m.dimensions != dimensions:
                raise VectorDimensionError(
                    f"the {model!r} vector index holds {m.dimensions}-dimensional vectors, not {dimensions}"
                )
            columns: dict[str, list[Any]] = {name: [] for name in _schema(dimensions).names}
            flat: list[Sequence[float]] = []
            for iv in items:
                if iv.item.cursor <= m.watermark:
                    continue  # written before (a retried batch)
                if iv.item.cursor <= self._forgotten.get(iv.item.session_id, 0):
                    continue  # its session was forgotten since it was read
                for chunk, vector in zip(iv.passage_indexes(), iv.vectors, strict=True):
                    if len(vector) != dimensions:
                        raise VectorDimensionError(
                            f"a vector of {len(vector)} dimensions for the {model!r} index ({dimensions})"
                        )
                    columns["seq"].append(iv.item.cursor)
                    columns["kind"].append(iv.item.kind)
                    columns["item_id"].append(iv.item.id)
                    columns["chunk"].append(chunk)
                    columns["session_id"].append(iv.item.session_id)
                    columns["project"].append(iv.item.project)
                    columns["created_at"].append(iv.item.created_at)
                    flat.append(vector)
            rows = len(columns["seq"])
            if rows:
                import numpy as np  # a lancedb dependency; one C-level copy instead of a float loop

                values = pa.array(np.asarray(flat, dtype=np.float32).reshape(-1))
                columns["vector"] = pa.FixedSizeListArray.from_arrays(values, dimensions)  # type: ignore[assignment]
                m.table.add(pa.table(columns, schema=_schema(dimensions)))
                m.appends += 1
                m.vectors += rows
            newest = max((iv.item.cursor for iv in items), default=0)
            if newest > m.watermark:
                m.watermark = newest
                self._save(m)
            if rows:
                self.upkeep(m)
            return rows

    def upkeep(self, m: _Model, force: bool = False) -> None:
        """Compact after enough appends; build or rebuild the ANN index when due."""
        try:
            if force or m.appends >= OPTIMIZE_APPENDS:
                started = time.monotonic()
                m.table.optimize(cleanup_older_than=CLEANUP_OLDER_THAN)
                m.last_optimize_seconds = round(time.monotonic() - started, 3)
                m.optimizations += 1
                m.appends = 0
            rows = m.table.count_rows()
            if rows >= ANN_MIN_ROWS and (
                not m.ann_rows
                or m.ann_kind != ANN_KIND
                or rows >= ANN_REBUILD_GROWTH * m.ann_rows
                or (
                    time.monotonic() >= m.segment_rebuild_after
                    and _index_segments(m.table) > ANN_MAX_SEGMENTS
                )
            ):
                self.build_ann(m, rows)
            if rows >= SCALAR_MIN_ROWS and not m.scalar_ready:
                _ensure_scalar_indexes(m.table)
                m.scalar_ready = True
            self.error = None
        except Exception as exc:  # upkeep only costs speed when it fails: keep serving
            self.error = " ".join(str(exc).split())[:300]
            log.warning("vector index upkeep failed for %s: %s", m.name, self.error)

    def build_ann(self, m: _Model, rows: int) -> None:
        started = time.monotonic()
        m.table.create_index("vector", config=ann_config(max(1, rows // ANN_PARTITION_ROWS)), replace=True)
        m.ann_rows, m.ann_kind = rows, ANN_KIND
        self._save(m)
        ended = time.monotonic()
        m.segment_rebuild_after = ended + ANN_REBUILD_PAUSE_FACTOR * (ended - started)
        log.info("vector index for %s: ANN index over %d vectors in %.1f s", m.name, rows, ended - started)

    def forget(self, session_id: str, upto_seq: int) -> int:
        """Remove the session's vectors from every model's table and from the files (the
        ANN and filter indexes are built again without them: the ANN index keeps a code of
        every vector it was built with); returns the vectors removed. ``upto_seq``: the
        highest seq the session's items had (see ``_forgotten``)."""
        with self._lock:
            self._forgotten[session_id] = max(upto_seq, self._forgotten.get(session_id, 0))
            removed = 0
            for name in self.models():
                m = self.model(name)
                if m is None:
                    continue
                table_dir = self.path / f"{_slug(name)}.lance"
                where = f"session_id = {_sql_str(session_id)}"
                if not m.table.count_rows(where):
                    continue
                # Dropped before the rewrite of fragments (which would index their rows again
                # one merge at a time), built again after it. Searches meanwhile scan exactly.
                for ix in m.table.list_indices():
                    m.table.drop_index(ix.name)
                m.scalar_ready = False
                had_ann, m.ann_rows, m.ann_kind = bool(m.ann_rows), 0, None
                removed += lance.remove_for_good(m.table, table_dir, where)
                rows = m.vectors = m.table.count_rows()
                if had_ann and rows >= ANN_MIN_ROWS:
                    self.build_ann(m, rows)
                else:
                    self._save(m)  # no ANN index any more
                if rows >= SCALAR_MIN_ROWS:
                    _ensure_scalar_indexes(m.table)
                    m.scalar_ready = True
                lance.drop_old_versions(m.table)
                m.appends = 0
            return removed

    def optimize(self, model: str) -> None:
        with self._lock:
            m = self.model(model)
            if m is not None:
                self.upkeep(m, force=True)

    def reset(self, model: str) -> None:
        with self._lock:
            self._models.pop(model, None)
            if self._info(model) is not None or self.path.exists():
                db = self._connect()
                if _slug(model) in set(db.list_tables().tables):
                    db.drop_table(_slug(model))
            self._meta_put(_META_PREFIX + model, None)

    # -- reading ---------------------------------------------------------------------------

    def search(
        self,
        model: str,
        vector: Sequence[float],
        kinds: Sequence[str] | None,
        session_id: str | None,
        project: str | None,
        limit: int,
    ) -> list[tuple[str, float, int]]:
        """``(item id, cosine similarity, passage index)`` per passage, best first, at most
        ``limit`` (fewer when several of the best vectors are one passage's). A passage with
        facets has several vectors: it counts once, at its best one. The item's kind is not
        read (the store finds each id in its own table): LanceDB reads every selected column
        of every hit at random, and the ``kind`` column cost recall ~5 ms p50 at 1M messages
        (56.6 against 51.8 ms, benchmarks/README.md)."""
        m = self.model(model)
        if m is None or limit <= 0:
            return []
        if len(vector) != m.dimensions:
            raise VectorDimensionError(
                f"a query vector of {len(vector)} dimensions for the {model!r} index ({m.dimensions})"
            )
        filters = []
        if kinds is not None:
            if not kinds:
                return []
            filters.append(f"kind IN ({', '.join(_sql_str(k) for k in kinds)})")
        if session_id is not None:
            filters.append(f"session_id = {_sql_str(session_id)}")
        if project is not None:
            filters.append(f"project = {_sql_str(project)}")
        where = " AND ".join(filters)

        # ``limit`` rows, collapsed to passages: a passage the user wrote has a vector per
        # sentence besides its own (lore_core.storage.facets.facets), so several of the
        # best rows may be one passage and fewer than ``limit`` passages come back. Fetching
        # more rows cost ~2 ms (10 more) to ~7 ms (3x) per search at 1M vectors (the refine
        # step reads them all) and changed no LongMemEval answer: recall fetches three times
        # what it shows anyway.

        def run(exact: bool) -> tuple[list[tuple[str, float, int]], int]:
            """The passages found, best first, and how many rows the search returned."""

            def build(q: Any) -> Any:
                q = q.nearest_to(list(vector)).column("vector").distance_type("cosine").limit(limit)
                if exact:
                    q = q.bypass_vector_index()
                elif m.ann_rows:
                    q = q.nprobes(ANN_NPROBES).refine_factor(ANN_REFINE_FACTOR)
                if where:
                    q = q.where(where)  # a filter before the search (the default)
                return q.select(["item_id", "chunk", "_distance"])

            rows = lance.run_query(m.table, build).to_pylist()
            best: dict[tuple[str, int], float] = {}
            for r in rows:
                key = (r["item_id"], int(r["chunk"]))
                best[key] = max(best.get(key, -2.0), 1.0 - float(r["_distance"]))
            found = [(item, score, chunk) for (item, chunk), score in best.items()]
            return sorted(found, key=lambda x: (-x[1], x[0], x[2])), len(rows)

        # The ANN index only looks in the partitions nearest the query: a selective filter
        # (a session, a small project, one kind) may have few or none of its rows there
        # (measured: 1-3 of a session's 40 hits). A session is small, so it is scanned
        # exactly (its rows found through the session_id index); another filter that comes
        # back short of rows (not of passages: facets of one passage are no shortage) is
        # retried exactly.
        exact = bool(m.ann_rows) and session_id is not None
        found, rows = run(exact)
        if m.ann_rows and not exact and where and rows < limit:
            found, rows = run(True)
        return found[:limit]

    def stats(self, model: str) -> dict[str, Any]:
        if model not in self._models:
            # Not opened in this process: the record in DuckDB says as much, without loading
            # LanceDB (an idle gateway's indexer asks at start; ~85 MB and ~2 s to import).
            info = self._info(model)
            if info is None:
                return {"dimensions": None, "vectors": 0, "watermark": 0, "fragments": 0, "ann_index": False}
            # Recorded since the count is kept (else opened below), and its files still there.
            if "vectors" in info and self._table_dir(model).is_dir():
                return {
                    "dimensions": int(info["dimensions"]),
                    "vectors": int(info["vectors"]),
                    "watermark": int(info.get("watermark", 0)),
                    "fragments": None,  # not known until the table is opened
                    "ann_index": bool(info.get("ann_rows")),
                    "optimizations": 0,
                    "last_optimize_seconds": None,
                    "path": str(self.path),
                }
        m = self.model(model)
        if m is None:
            return {"dimensions": None, "vectors": 0, "watermark": 0, "fragments": 0, "ann_index": False}
        return {
            "dimensions": m.dimensions,
            "vectors": m.table.count_rows(),
            "watermark": m.watermark,
            "fragments": _fragments(m.table),
            "ann_index": bool(m.ann_rows),
            "optimizations": m.optimizations,
            "last_optimize_seconds": m.last_optimize_seconds,
            "path": str(self.path),
        }


def ann_config(partitions: int) -> Any:
    """The ANN index (:data:`ANN_KIND`) the store builds, with ``partitions`` IVF partitions
    (``benchmarks/ann_recall.py`` builds the same)."""
    from lancedb.index import IvfRq

    return IvfRq(
        distance_type="cosine",
        num_partitions=partitions,
        num_bits=1,
        # Fewer k-means iterations and a smaller training sample than LanceDB's defaults:
        # the build takes a fraction of the time for a recall@30 that the exact re-ranking
        # (refine) makes up for.
        max_iterations=10,
        sample_rate=64,
    )


def _fragments(table: Any) -> int:
    try:
        return int(table.stats()["fragment_stats"]["num_fragments"])
    except Exception:  # statistics are a hint, never a reason to fail
        return 0


def _ensure_scalar_indexes(table: Any) -> None:
    from lancedb.index import Bitmap, BTree

    # getattr here and below: lancedb's index descriptions, read defensively (upkeep hints).
    have = {column for ix in table.list_indices() for column in getattr(ix, "columns", ())}
    for column, kind in _SCALAR_INDEXES:
        if column not in have:
            table.create_index(column, config=Bitmap() if kind == "bitmap" else BTree(), replace=True)


def _index_segments(table: Any) -> int:
    """How many segments (the trained index plus deltas) the vector index has (0: none)."""
    try:
        for ix in table.list_indices():
            if "vector" in getattr(ix, "columns", ()):
                return int(getattr(table.index_stats(ix.name), "num_indices", 1) or 1)
    except Exception:  # a hint for upkeep, never a reason to fail
        return 0
    return 0


def _has_vector_index(table: Any) -> bool:
    try:
        return any("vector" in getattr(ix, "columns", ()) for ix in table.list_indices())
    except Exception:
        return False
