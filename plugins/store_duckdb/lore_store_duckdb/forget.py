"""Forgetting a session for good (``lore forget``): its rows in one transaction, its passages
out of the full-text index and its vectors out of theirs, then the database file rewritten
without the deleted rows' bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb

from lore_core.storage.forget import ForgetReport
from lore_core.storage.private import tighten
from lore_core.storage.records import StoreUnavailable
from lore_store_duckdb.compact import check_copy, quoted, sql_literal, sync_directory
from lore_store_duckdb.connection import block_size, connect, file_size
from lore_store_duckdb.database import Database

#: The copy a forget writes beside the database before it takes its place.
REWRITE_SUFFIX = ".forgetting"


class Forgetting(Database):
    """:meth:`~lore_core.interfaces.Store.forget_session` on DuckDB."""

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
        return sum(file_size(p) for p in (self.path, wal, self.index_path, self.vector_path))

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
                        self._con = connect(self.path, self.settings)
                        tighten([self.path], self.path.parent)  # the copy is its owner's only too
        except BaseException:
            if attached and self._con is not None:
                with contextlib.suppress(duckdb.Error):
                    self._con.execute("DETACH lore_rewrite")
            copy.unlink(missing_ok=True)
            raise
