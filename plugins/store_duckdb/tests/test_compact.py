"""``lore duckdb-compact``: an old store is copied into a file of the new block size, the
copy put in its place, and everything stored (and the indexes beside it) still works."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from lore_store_duckdb.compact import KEPT_SUFFIX, CompactError, compact_file
from lore_store_duckdb.connection import NEW_FILE_BLOCK_BYTES
from lore_store_duckdb.connection import block_size as file_block_size
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.records import StoredMessage, WriteBatch
from lore_core.testing.net import free_port


def message(ident: str, position: int, text: str) -> StoredMessage:
    return StoredMessage(
        id=ident, session_id="s", parent_id=None, position=position, role="user",
        blocks=[{"type": "text", "text": text}], text=text, project="/p", created_at=float(position),
    )  # fmt: skip


def block_size(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return file_block_size(con)
    finally:
        con.close()


def old_layout_store(path: Path, count: int) -> None:
    """A store of ``count`` messages in a file of DuckDB's default 256 KiB blocks, as files
    made before the store chose 16 KiB are."""
    duckdb.connect(str(path)).close()

    async def fill() -> None:
        store = DuckDBStore(path)
        await store.open()
        try:
            words = ["heron", "kestrel", "osprey", "plover"]
            rows = [message(f"m{i}", i, f"{words[i % 4]} note {i} " * 40) for i in range(count)]
            await store.write(WriteBatch(messages=rows))
            assert len(await store.search("osprey", limit=50)) > 0
        finally:
            await store.close()

    asyncio.run(fill())


def lore(tmp_path: Path, db: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / ".lore.json"
    config.write_text(json.dumps({"store": {"path": str(db)}, "server": {"port": free_port()}}))
    env = {**os.environ, "LORE_CONFIG": str(config)}
    return subprocess.run(
        [sys.executable, "-m", "lore_core.cli", *argv], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.slow
def test_the_command_moves_an_old_store_to_small_blocks_and_keeps_everything(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"
    old_layout_store(db, 400)
    assert block_size(db) == 256 * 1024
    status = lore(tmp_path, db, "status")
    assert status.returncode == 0, status.stderr
    assert "note: the file has 256 KiB blocks" in status.stdout and "lore duckdb-compact" in status.stdout

    out = lore(tmp_path, db, "duckdb-compact")
    assert out.returncode == 0, out.stderr
    assert "blocks of 256 -> 16 KiB" in out.stdout
    kept = db.with_name(db.name + KEPT_SUFFIX)
    assert kept.is_file() and str(kept) in out.stdout
    assert block_size(db) == NEW_FILE_BLOCK_BYTES
    assert block_size(kept) == 256 * 1024
    status = lore(tmp_path, db, "status")
    assert status.returncode == 0 and "note:" not in status.stdout

    async def use() -> tuple[int, list[str], list[str]]:
        store = DuckDBStore(db)
        await store.open()
        try:
            stored = len(await store.session_messages("s"))
            before = [h.id for h in await store.search("heron", limit=5)]
            # The sequence goes on where it was: the full-text index (and the vector index)
            # pick up what is written after its watermark, so a reused number would be lost.
            await store.write(WriteBatch(messages=[message("fresh", 1000, "a bittern seen today")]))
            return stored, before, [h.id for h in await store.search("bittern")]
        finally:
            await store.close()

    stored, heron, bittern = asyncio.run(use())
    assert stored == 400
    assert heron and all(int(ident[1:]) % 4 == 0 for ident in heron)
    assert bittern == ["fresh"]


def test_a_store_in_use_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"
    old_layout_store(db, 20)
    size = db.stat().st_size

    async def compact_while_open() -> subprocess.CompletedProcess[str]:
        store = DuckDBStore(db)
        await store.open()  # this process holds DuckDB's lock on the file, as a gateway does
        try:
            return await asyncio.to_thread(lore, tmp_path, db, "duckdb-compact")
        finally:
            await store.close()

    out = asyncio.run(compact_while_open())
    assert out.returncode == 3
    assert "stop the gateway first" in out.stderr
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lore.duckdb")) == [
        "lore.duckdb",
        "lore.duckdb.fts",
    ]
    assert db.stat().st_size == size and block_size(db) == 256 * 1024


def test_an_earlier_kept_file_is_never_overwritten(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"
    old_layout_store(db, 5)
    kept = db.with_name(db.name + KEPT_SUFFIX)
    kept.write_bytes(b"an earlier store")
    try:
        compact_file(db)
    except CompactError as exc:
        assert "earlier compaction" in str(exc)
    else:
        raise AssertionError("compacted over an earlier kept file")
    assert kept.read_bytes() == b"an earlier store"
    assert block_size(db) == 256 * 1024

    kept.unlink()
    done = compact_file(db, keep_old=False)
    assert done.kept is None and not kept.exists()
    assert block_size(db) == NEW_FILE_BLOCK_BYTES


def test_too_little_free_space_is_refused_before_copying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from lore_store_duckdb import compact

    db = tmp_path / "lore.duckdb"
    old_layout_store(db, 5)
    full = shutil.disk_usage(tmp_path)._replace(free=db.stat().st_size // 2)
    monkeypatch.setattr(compact.shutil, "disk_usage", lambda _: full)
    with pytest.raises(CompactError, match="are free"):
        compact_file(db)
    assert not db.with_name(db.name + ".compacting").exists()
    assert block_size(db) == 256 * 1024
