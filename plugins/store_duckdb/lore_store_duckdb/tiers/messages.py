"""The core of the store contract (:class:`~lore_core.interfaces.Store`) on DuckDB: projects,
sessions and messages written in one transaction per batch (with each session's summary:
message and branch counts kept by every write), per-session state, the reads of sessions,
projects and messages, and full-text search through the index (:mod:`~lore_store_duckdb.fulltext`).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from lore_core.interfaces import Store
from lore_core.storage.records import Project, ProjectSummary, SearchHit, Session, StoredMessage, WriteBatch
from lore_store_duckdb.connection import literals
from lore_store_duckdb.database import Database

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


_WORD = re.compile(r"\w", re.UNICODE)


class MessageTables(Database, Store):
    """:class:`~lore_core.interfaces.Store`'s writes, state and reads."""

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

    # -- per-session state -----------------------------------------------------------------

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

    # -- reads -----------------------------------------------------------------------------

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
            sql = self._SESSION_SQL + f" WHERE s.id IN {literals(ids)} ORDER BY s.updated_at DESC, s.id DESC"
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
            self._query, f"SELECT {cols} FROM messages WHERE id IN {literals(ids)}"
        )
        found = {r[0]: _message(r) for r in rows}
        return [found[i] for i in ids if i in found]

    # -- full-text search (sync_*: maintenance, for benchmarks and tests) ------------------

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
            f"WHERE session_id IN {literals(sessions)}"
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
                f"SELECT id, session_id FROM messages WHERE id IN {literals(unknown)}"
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


# One encoder for all rows: json.dumps with an option builds a new encoder per call.
_BLOCKS_JSON = json.JSONEncoder(ensure_ascii=False).encode


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
