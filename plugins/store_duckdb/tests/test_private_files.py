"""The DuckDB store's files are their owner's only: under a real ``lore serve`` started with
the usual umask (0o022), the database, its WAL, the LanceDB full-text index and the journal
that DuckDB, LanceDB and the kernel create are neither group- nor other-readable; a store
opened at a configured path tightens its own files left looser before, and nothing else in
the directory. All on the real file system (lore_core/storage/private.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.records import ItemVectors
from lore_core.testing.builders import batch_of, exchange, text
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import free_port, wait_for_http
from lore_core.testing.poll import poll


def readable_by_others(root: Path) -> list[str]:
    """Every entry under ``root`` (itself included) with a group or other permission bit."""
    return [
        f"{p} {p.lstat().st_mode & 0o777:o}"
        for p in [root, *root.rglob("*")]
        if not p.is_symlink() and p.lstat().st_mode & 0o077
    ]


def mode(path: Path) -> int:
    return path.lstat().st_mode & 0o777


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual shell umask for the test (and the processes it starts)."""
    before = os.umask(0o022)
    yield
    os.umask(before)


# Slow: a lore serve process, the LanceDB index a search loads in it, a lore export process
# (the test below checks the store's own files in process, in the fast run).
@pytest.mark.slow
def test_lore_serve_under_a_loose_umask_writes_nothing_others_can_read(
    fake_upstream: FakeUpstream, tmp_path: Path, loose_umask: None
) -> None:
    port = free_port()
    config = tmp_path / "lore.json"
    config.write_text(json.dumps({"store": {"flushIntervalMs": 50}}))
    env = {
        **os.environ,
        "LORE_CONFIG": str(config),
        "LORE_PORT": str(port),
        "LORE_UPSTREAM_ANTHROPIC": fake_upstream.url,
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "share"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    data = tmp_path / "share" / "lore"  # the default data directory, store included
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "gateway.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "lore_core.cli", "serve"], env=env, stdout=log, stderr=log)
    try:
        wait_for_http(url + "/health", timeout=60)
        for i in range(3):
            body = {
                "model": "claude-test",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": f"zebra {i}"}],
            }
            headers = {"anthropic-version": "2023-06-01", "x-session-id": "s-private"}
            httpx.post(url + "/v1/messages", json=body, headers=headers, timeout=30).raise_for_status()
        poll(lambda: httpx.get(url + "/health").json()["store"]["messages_written"] == 6, "the writes")
        token = (data / "gateway.token").read_text().strip()
        # A search catches the LanceDB index up: its folder and files exist from here on.
        found = httpx.get(
            url + "/lore/api/search",
            params={"q": "zebra"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert found.status_code == 200 and "zebra" in found.text
        # An export written where it is asked to, by a lore command started from the shell.
        export = tmp_path / "knowledge.json"
        subprocess.run(
            [sys.executable, "-m", "lore_core.cli", "export", "--format", "json", "-o", str(export)],
            env=env,
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )
        names = {p.name for p in data.iterdir()}
        assert {"gateway.token", "lore.duckdb", "lore.duckdb.fts", "lore.duckdb.journal"} <= names
        assert any(p.is_file() for p in (data / "lore.duckdb.fts").rglob("*"))
        assert readable_by_others(data) == [], (tmp_path / "gateway.log").read_text()[-2000:]
        assert mode(export) == 0o600
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    # What the shutdown wrote (the checkpoint) too.
    assert readable_by_others(data) == []


def test_a_store_at_a_configured_path_keeps_its_own_files_private_and_nothing_else(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, loose_umask: None
) -> None:
    shared = tmp_path / "projects"  # the user's directory, not the store's
    shared.mkdir()
    shared.chmod(0o755)
    db = shared / "lore.duckdb"

    async def write_search_and_embed() -> None:
        store = DuckDBStore(db)
        await store.open()
        try:
            await store.write(batch_of(exchange([text("user", "a zebra crossing")], session="s-1")))
            assert await store.search("zebra", limit=5)
            rng = random.Random(7)
            items = await store.pending_embeddings("fixed-vectors-v1", limit=10)
            vectors = [ItemVectors(i, [[rng.gauss(0, 1) for _ in range(16)]]) for i in items]
            assert await store.write_vectors("fixed-vectors-v1", 16, vectors)
        finally:
            await store.close()

    # Under Lore's own umask (lore_core.cli.commands.main sets it), what DuckDB and LanceDB
    # create themselves (database, WAL, both LanceDB folders) is the owner's only.
    os.umask(0o077)
    asyncio.run(write_search_and_embed())
    own = sorted(p for p in shared.iterdir() if p.name.startswith("lore.duckdb"))
    assert {"lore.duckdb", "lore.duckdb.fts", "lore.duckdb.vec"} <= {p.name for p in own}
    assert any(p.is_file() for p in (shared / "lore.duckdb.vec").rglob("*"))
    for path in own:
        assert readable_by_others(path) == []

    # Made looser, as by an older Lore or a process under umask 0o022; then opened again.
    os.umask(0o022)
    for path in own:
        for entry in [path, *path.rglob("*")]:
            entry.chmod(0o755 if entry.is_dir() else 0o644)
    neighbour = shared / "notes.txt"
    neighbour.write_text("the user's")
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    (shared / "lore.duckdb.fts" / "link").symlink_to(outside)
    assert mode(neighbour) == mode(outside) == 0o644

    async def reopen() -> None:
        store = DuckDBStore(db)
        await store.open()
        await store.close()

    with caplog.at_level(logging.WARNING, logger="lore.private"):
        asyncio.run(reopen())

    for path in own:
        assert readable_by_others(path) == []
    # The directory, what else is in it and what a link points to are not the store's.
    assert mode(shared) == 0o755 and mode(neighbour) == 0o644 and mode(outside) == 0o644
    (line,) = [r.getMessage() for r in caplog.records if r.name == "lore.private"]
    assert line.startswith("tightened the permissions of ") and f" in {shared} to owner-only" in line
