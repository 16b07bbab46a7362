"""The event log tier (:class:`~lore_core.interfaces.EventLogStore`) on DuckDB: events per
run, each run's sequence and how far consolidation covered it, and its working snapshot.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from lore_core.interfaces import EventLogStore
from lore_core.storage.events import NewEvent, RunEvent, RunState, WorkingFact, WorkingSnapshot
from lore_store_duckdb.database import Database


class EventLogTables(Database, EventLogStore):
    """:class:`~lore_core.interfaces.EventLogStore` on the ``events`` tables."""

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
