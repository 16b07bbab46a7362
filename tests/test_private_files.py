"""Files only for their owner (lore_core/storage/private.py): the data directory is made
owner-only at the gateway's start, a store made before with looser modes is tightened (one
log line says so), and nothing outside the directory is touched through a link.

``lore run`` under a loose umask (every file it and its gateway write, and the client's own
umask) is in ``tests/e2e/test_launcher.py``; the DuckDB store's files under a real ``lore
serve`` are in ``plugins/store_duckdb/tests/test_private_files.py``. All on the real file
system."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lore_core.config import default_data_dir
from lore_core.storage.private import private_directory, tighten
from lore_core.testing.server import ThreadedServer

#: The kernel's own store: nothing of a store plugin's writes into the directory meanwhile.
MEMORY_STORE = {"store": {"backend": "memory"}}


def mode(path: Path) -> int:
    return path.lstat().st_mode & 0o777


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual shell umask for the test, whatever an earlier test left."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_an_existing_data_directory_is_tightened_at_start(
    start_gateway: Callable[..., ThreadedServer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    loose_umask: None,
) -> None:
    data = default_data_dir()  # under the test's XDG_DATA_HOME (the lore_env fixture)
    assert tmp_path in data.parents
    # A store left by an older Lore (or made under umask 0o022): world-readable.
    (data / "old.fts" / "data").mkdir(parents=True)
    (data / "old.duckdb").write_text("conversations")
    (data / "old.fts" / "data" / "0.lance").write_text("passages")
    (data / "gateway-8377.log").write_text("a log")
    script = data / "hook.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    for path in (data, data / "old.fts", data / "old.fts" / "data"):
        path.chmod(0o755)
    # A link out of the directory: its target is not the gateway's to change.
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    outside.chmod(0o644)
    (data / "elsewhere.txt").symlink_to(outside)
    assert mode(data / "old.duckdb") == 0o644

    with caplog.at_level(logging.WARNING, logger="lore.private"):
        start_gateway(MEMORY_STORE)

    assert mode(data) == 0o700
    assert mode(data / "old.fts") == mode(data / "old.fts" / "data") == 0o700
    assert mode(data / "old.duckdb") == mode(data / "old.fts" / "data" / "0.lance") == 0o600
    assert mode(data / "gateway-8377.log") == 0o600
    assert mode(script) == 0o700  # the owner's bits are kept, only group and other go
    assert mode(outside) == 0o644 and (data / "elsewhere.txt").is_symlink()
    lines = [r.getMessage() for r in caplog.records if r.name == "lore.private"]
    assert lines == [
        f"tightened the permissions of 7 files and directories in {data} to owner-only "
        "(group and other access removed)"
    ]
    # The token the gateway made there is its owner's too.
    assert mode(data / "gateway.token") == 0o600


def test_a_new_data_directory_is_made_owner_only(
    start_gateway: Callable[..., ThreadedServer], caplog: pytest.LogCaptureFixture, loose_umask: None
) -> None:
    data = default_data_dir()
    assert not data.exists()
    with caplog.at_level(logging.WARNING, logger="lore.private"):
        start_gateway(MEMORY_STORE)
    assert mode(data) == 0o700
    assert mode(data / "gateway.token") == 0o600
    assert [r for r in caplog.records if r.name == "lore.private"] == []  # nothing was loose


def test_tighten_leaves_what_is_already_private_and_what_is_not_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, loose_umask: None
) -> None:
    private = tmp_path / "private"
    assert private_directory(private) == 0  # made 0700, nothing to tighten
    assert mode(private) == 0o700
    (private / "secret").write_text("x")  # 0644 under the test's umask
    (private / "secret").chmod(0o600)
    readonly = private / "readonly"
    readonly.write_text("x")
    readonly.chmod(0o444)
    with caplog.at_level(logging.WARNING, logger="lore.private"):
        assert tighten([private, tmp_path / "missing"], private) == 1
    assert mode(readonly) == 0o400  # not made writable
    assert mode(private / "secret") == 0o600
    assert len([r for r in caplog.records if r.name == "lore.private"]) == 1
