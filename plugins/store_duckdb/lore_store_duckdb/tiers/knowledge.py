"""The knowledge tier (:class:`~lore_core.interfaces.KnowledgeStore`) on DuckDB: versions,
metrics, contradictions, and teams (bindings, policies, decision records).

knowledge_versions is the base table: every version, death certificates included, with
``is_current`` kept on the latest one by write_knowledge. "Current and alive" is
``is_current AND NOT is_deleted``; lookups that must see deletions never use it. Titles are
compared with the kernel's normalize_title (NFKC, casefold), which SQL cannot reproduce, so
candidates are filtered in Python: the tables are small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from lore_core.interfaces import KnowledgeStore
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
from lore_store_duckdb.database import Database

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


class KnowledgeTables(Database, KnowledgeStore):
    """:class:`~lore_core.interfaces.KnowledgeStore` on the knowledge and team tables."""

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
