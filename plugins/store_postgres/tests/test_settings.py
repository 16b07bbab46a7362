"""The ``store-postgres`` section: DSN, password from the environment (never shown), TLS
mode, pool size; a server that is down; schema migrations at open."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from pathlib import Path

import psycopg
import pytest
from lore_store_postgres.config import SECTION, PostgresConfig
from lore_store_postgres.connect import connection_kwargs, shown_dsn
from lore_store_postgres.plugin import make_store
from lore_store_postgres.schema import SCHEMA_VERSION
from lore_store_postgres.store import PostgresStore

from lore_core.config import ConfigError, load_config
from lore_core.storage.records import StoreUnavailable

SECRET = "s3cr3t-Hunter2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_section_loads_from_lore_json(tmp_path: Path) -> None:
    path = tmp_path / ".lore.json"
    section = {"dsn": "postgresql://lore@db.internal/lore", "poolSize": 3, "tlsMode": "verify-full"}
    path.write_text(json.dumps({"store": {"backend": "postgres"}, SECTION: section}))
    config = load_config({SECTION: PostgresConfig}, env={"LORE_CONFIG": str(path)})
    store = make_store(config)
    assert isinstance(store, PostgresStore)
    assert (store.settings.pool_size, store.settings.tls_mode) == (3, "verify-full")
    assert store.location == "user=lore dbname=lore host=db.internal"
    assert store.journal_dir is not None and store.journal_dir.name.startswith("postgres-")


def test_bad_values_stop_loading(tmp_path: Path) -> None:
    path = tmp_path / ".lore.json"
    for section in ({"poolSize": 0}, {"tlsMode": "sometimes"}):
        path.write_text(json.dumps({SECTION: section}))
        with pytest.raises((ConfigError, ValueError)):
            load_config({SECTION: PostgresConfig}, env={"LORE_CONFIG": str(path)})


def test_dsn_shown_without_its_password() -> None:
    assert SECRET not in shown_dsn(f"postgresql://lore:{SECRET}@db:5433/lore?sslmode=require")
    assert shown_dsn(f"postgresql://lore:{SECRET}@db:5433/lore") == "user=lore dbname=lore host=db port=5433"
    assert SECRET not in shown_dsn(f"host=db user=lore password={SECRET}")
    assert SECRET not in shown_dsn(f"host=db password='{SECRET}' broken='")


def test_password_comes_from_the_environment_only() -> None:
    settings = PostgresConfig(dsn="host=db user=lore", tls_mode="require", password_env="MY_PG_PW")
    kwargs = connection_kwargs(settings, {"MY_PG_PW": SECRET})
    assert kwargs["password"] == SECRET and kwargs["sslmode"] == "require"
    assert "password" not in connection_kwargs(settings, {})
    with pytest.raises(StoreUnavailable) as refused:
        connection_kwargs(PostgresConfig(dsn=f"postgresql://lore:{SECRET}@db/lore"), {})
    assert SECRET not in str(refused.value) and "LORE_PG_PASSWORD" in str(refused.value)


def test_unset_dsn_says_what_to_write() -> None:
    with pytest.raises(StoreUnavailable, match=r"store-postgres\.dsn is not set"):
        asyncio.run(PostgresStore(PostgresConfig()).open())


def test_server_down_fails_clearly_after_bounded_retries(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there
    dsn = f"host=127.0.0.1 port={port} user=lore dbname=lore"
    settings = PostgresConfig(dsn=dsn, connect_attempts=2, connect_timeout=1)
    store = PostgresStore(settings, environ={"LORE_PG_PASSWORD": SECRET})
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as down:
        asyncio.run(store.open())
    elapsed = time.monotonic() - started
    message = str(down.value)
    assert f"port={port}" in message and "after 2 attempt(s)" in message
    assert SECRET not in message and SECRET not in caplog.text
    assert 1.0 <= elapsed < 10.0  # one pause of 1 s between the two attempts
    assert store.health()["ok"] is False


def test_migrations_applied_once_and_recorded(pg_dsn: str) -> None:
    async def open_and_stats() -> int:
        store = PostgresStore(PostgresConfig(dsn=pg_dsn))
        await store.open()
        try:
            return int((await store.stats())["schema_version"])
        finally:
            await store.close()

    # Two stores opening a new database at once (two gateways starting): one migrates,
    # the other waits on the advisory lock and finds the schema made.
    results: list[int] = []
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            results.append(asyncio.run(open_and_stats()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [SCHEMA_VERSION, SCHEMA_VERSION]
    with psycopg.connect(pg_dsn, autocommit=True) as con:
        con.execute(
            "UPDATE lore_meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.raises(StoreUnavailable, match="newer than this lore-store-postgres"):
        asyncio.run(open_and_stats())


def test_text_search_config_is_checked(pg_dsn: str) -> None:
    store = PostgresStore(PostgresConfig(dsn=pg_dsn, text_search_config="klingon"))
    with pytest.raises(StoreUnavailable, match="no text search configuration 'klingon'"):
        asyncio.run(store.open())


def test_a_journal_under_the_name_before_the_port_is_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    config = load_config(
        {SECTION: PostgresConfig}, env={"LORE_DB_PATH": "postgresql://lore@db.internal/lore"}
    )
    first = make_store(config)
    assert first.journal_dir is not None
    # What a gateway of the earlier plugin left: one journal per database, no port in its name.
    earlier = first.journal_dir.with_name(first.journal_dir.name.rsplit("-", 1)[0] + ".journal")
    earlier.mkdir(parents=True)
    (earlier / "000001.log").write_text("left unwritten")
    store = make_store(config)
    assert store.journal_dir == first.journal_dir
    assert (store.journal_dir / "000001.log").read_text() == "left unwritten"
    assert not earlier.exists()
