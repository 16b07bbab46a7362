"""The DuckDB file and the connection to it: opening it (:func:`connect`: one line that says
what to do when it cannot be), the files named after it, its block size, DuckDB's memory by
use, the gate statements and page-cache trims share (:class:`TrimGate`), and SQL literals
for ``IN`` lists.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import duckdb

from lore_core.storage.records import StoreUnavailable
from lore_store_duckdb.absent import fail_fast_when_absent
from lore_store_duckdb.config import DuckDBConfig

# Every parameterised query would otherwise look for pandas on disk (see absent.py).
fail_fast_when_absent()

#: DuckDB block size of a new store file (DuckDB's default is 256 KiB). Recall reads a few
#: dozen messages at random, and a row of a long text column costs DuckDB a whole block
#: read and checksum: at 1M messages the read of a recall's ~18 passages took 7.7-8.5 ms of
#: SQL with 256 KiB blocks and 4.0-4.4 ms with 16 KiB (hybrid recall 52.0 -> 49.2 ms p50,
#: the same queries alternating; benchmarks/README.md). The smallest size DuckDB accepts.
NEW_FILE_BLOCK_BYTES = 16_384


def connect(path: Path, settings: DuckDBConfig) -> duckdb.DuckDBPyConnection:
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


def memory_by_tag(cur: duckdb.DuckDBPyConnection) -> dict[str, float]:
    rows = cur.execute(
        "SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0"
    ).fetchall()
    return {str(tag).lower(): round(int(used) / 2**20, 1) for tag, used in rows}


@contextlib.contextmanager
def gated_cursor(
    connection: Callable[[], duckdb.DuckDBPyConnection], gate: TrimGate
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor on the store's connection for one or more statements, closed after them, with
    ``gate`` held (a page-cache trim waits for it: :class:`TrimGate`). The connection is
    taken once the gate is held: a forget's rewrite of the file replaces it under the gate."""
    with gate.statement():
        cur = connection().cursor()
        try:
            yield cur
        finally:
            cur.close()


class TrimGate:
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


def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def literals(values: Sequence[str]) -> str:
    """``('a', 'b', ...)`` for ``WHERE id IN``: DuckDB looks each literal up in the primary
    key's index, where a list parameter (``id = ANY(?)``) becomes a hash join over a scan.
    Measured on the store's connection at 1M messages: 500 ids 18 against 116 ms, 18 ids
    3.8 against 4.3 ms (benchmarks/README.md, recall.py). ``values`` must not be empty. A
    NUL, which ends a literal in DuckDB's parser, is spliced in as ``chr(0)``."""
    return "(" + ", ".join(sql_str(v).replace("\x00", "' || chr(0) || '") for v in values) + ")"


def file_size(path: Path) -> int:
    try:
        if path.is_dir():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        return path.stat().st_size
    except OSError:
        return 0
