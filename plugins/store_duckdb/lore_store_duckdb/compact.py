"""``lore duckdb-compact``: copy the store into a new file, then swap the two.

A DuckDB file never shrinks (deleted rows leave free blocks) and keeps the block size it
was made with: files made before ``NEW_FILE_BLOCK_BYTES`` have DuckDB's 256 KiB blocks, and
a recall reading a few long rows at random decompresses a whole block per row (the
passage read at 1M messages: 7.7-8.5 ms with 256 KiB blocks, 4.0-4.4 with 16 KiB). A copy
made with ``COPY FROM DATABASE`` has the new block size and no free space; the derived
indexes beside the file (``.fts``, ``.vec``) and the journal stay valid, since they are
keyed by the messages' ids and sequence numbers, which the copy keeps.

Nothing is lost when something fails: the copy is written beside the store, checked table
by table, and only then renamed over it; the old file is kept (``<file>.before-compact``)
unless asked otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from lore_core.interfaces import Command

if TYPE_CHECKING:  # DuckDB is imported when a compaction runs, not with the plugin
    import duckdb

#: Suffixes of the copy being written and of the old file kept after the swap.
COPYING_SUFFIX = ".compacting"
KEPT_SUFFIX = ".before-compact"


class CompactError(Exception):
    """The store could not be compacted; it is left as it was."""


@attrs.frozen
class Compacted:
    path: Path
    kept: Path | None
    bytes_before: int
    bytes_after: int
    block_before: int
    block_after: int
    seconds: float


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def compact_file(path: Path, keep_old: bool = True) -> Compacted:
    """Copy the DuckDB file at ``path`` into a new one of the block size of new store files
    and put it in its place."""
    import duckdb

    from lore_store_duckdb.connection import NEW_FILE_BLOCK_BYTES, block_size

    path = Path(path)
    copy = path.with_name(path.name + COPYING_SUFFIX)
    kept = path.with_name(path.name + KEPT_SUFFIX)
    wal = Path(str(path) + ".wal")
    if not path.is_file():
        raise CompactError(f"there is no store at {path}")
    if kept.exists():
        raise CompactError(f"{kept} is there from an earlier compaction: remove it (or move it away) first")
    for leftover in (copy, Path(str(copy) + ".wal")):
        leftover.unlink(missing_ok=True)  # a copy an interrupted run left: never the store

    started = time.monotonic()
    bytes_before = path.stat().st_size
    free = shutil.disk_usage(path.parent).free
    if free < bytes_before:
        # The copy is about the size of the file (smaller when rows were deleted).
        raise CompactError(
            f"the copy needs up to {_mib(bytes_before)} beside {path}, and {_mib(free)} are free"
        )
    try:
        # Read-write, so DuckDB's lock refuses while a gateway (or any process) has the file,
        # and the checkpoint folds the write-ahead log into the file before it is copied.
        con = duckdb.connect(str(path))
    except duckdb.Error as exc:
        raise CompactError(f"cannot open {path} (stop the gateway first): {exc}") from exc
    try:
        con.execute("CHECKPOINT")
        source = str(con.execute("SELECT current_database()").fetchall()[0][0])
        block_before = block_size(con)
        con.execute(f"ATTACH {sql_literal(str(copy))} AS compacted (BLOCK_SIZE {NEW_FILE_BLOCK_BYTES})")
        con.execute(f"COPY FROM DATABASE {quoted(source)} TO compacted")
        check_copy(con, source, "compacted")
        con.execute("CHECKPOINT compacted")
        con.execute("DETACH compacted")
    except duckdb.Error as exc:
        con.close()
        copy.unlink(missing_ok=True)
        raise CompactError(f"the copy of {path} failed, the store is unchanged: {exc}") from exc
    con.close()
    if wal.exists():
        # Another process opened the store between the close and now: its writes would be
        # in a log beside the wrong file after the swap.
        copy.unlink(missing_ok=True)
        raise CompactError(f"{path} was opened by another process meanwhile: stop it and run again")
    os.replace(path, kept)
    try:
        os.replace(copy, path)
    except OSError as exc:
        os.replace(kept, path)  # the store back where it was
        raise CompactError(f"cannot put the copy in place, the store is unchanged: {exc}") from exc
    sync_directory(path.parent)
    if not keep_old:
        kept.unlink()
    return Compacted(
        path=path,
        kept=kept if keep_old else None,
        bytes_before=bytes_before,
        bytes_after=path.stat().st_size,
        block_before=block_before,
        block_after=NEW_FILE_BLOCK_BYTES,
        seconds=time.monotonic() - started,
    )


def check_copy(con: duckdb.DuckDBPyConnection, source: str, target: str) -> None:
    """Every table has as many rows in the copy, and every sequence goes on from where it
    was (the full-text and vector indexes follow the messages' sequence numbers)."""
    run = con.execute
    tables = [
        (str(schema), str(name))
        for schema, name in run(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?", [source]
        ).fetchall()
    ]
    for schema, name in tables:
        counted = []
        for database in (source, target):
            ref = f"{quoted(database)}.{quoted(schema)}.{quoted(name)}"
            counted.append(int(run(f"SELECT count(*) FROM {ref}").fetchall()[0][0]))
        if counted[0] != counted[1]:
            raise CompactError(f"the copy of {schema}.{name} has {counted[1]} rows instead of {counted[0]}")
    sequences = "SELECT sequence_name, last_value FROM duckdb_sequences() WHERE database_name = ?"
    before = dict(run(sequences, [source]).fetchall())
    after = dict(run(sequences, [target]).fetchall())
    for name, last in before.items():
        if name not in after or (last is not None and (after[name] is None or after[name] < last)):
            raise CompactError(f"the copy's sequence {name} would reuse numbers ({after.get(name)} < {last})")


def sync_directory(directory: Path) -> None:
    """The renames survive a power cut only once the directory is synced (POSIX)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not possible on this platform
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


class CompactCommand(Command):
    name = "duckdb-compact"
    help = "copy the DuckDB store into a new file (current block size, no free space); stop the gateway first"
    description = (
        "Copy the DuckDB store into a new file with the current block size and no free space,\n"
        "check every table's row count, and swap it in (the old file is kept as <file>.before-compact\n"
        "unless --remove-old). Refused while a gateway or any process holds the store."
    )
    examples = ("lore stop && lore duckdb-compact", "lore duckdb-compact --remove-old")

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--remove-old",
            action="store_true",
            help=f"delete the old file once the copy is in place (default: kept as <file>{KEPT_SUFFIX})",
        )

    def run(self, args: argparse.Namespace) -> int:
        from lore_core.local_gateway import gateway_running
        from lore_core.plugins import bootstrap
        from lore_store_duckdb.plugin import store_path

        config = bootstrap().config
        if config.store.backend not in ("", "duckdb"):
            backend = config.store.backend
            print(f"lore: store.backend is {backend!r}, not duckdb: nothing to compact", file=sys.stderr)
            return 2
        if gateway_running(config):
            print(
                f"lore: a gateway is running on port {config.server.port} and holds the store: stop it first",
                file=sys.stderr,
            )
            return 3
        path = store_path(config)
        if path.is_file():
            print(f"compacting {path} ({_mib(path.stat().st_size)})...", file=sys.stderr)
        try:
            done = compact_file(path, keep_old=not args.remove_old)
        except CompactError as exc:
            print(f"lore: {exc}", file=sys.stderr)
            return 3
        print(
            f"compacted {done.path}: {_mib(done.bytes_before)} -> {_mib(done.bytes_after)}, "
            f"blocks of {done.block_before // 1024} -> {done.block_after // 1024} KiB, "
            f"in {done.seconds:.1f} s"
        )
        if done.kept is not None:
            print(f"the old file is kept as {done.kept}: delete it once the gateway runs on the new one")
        return 0
