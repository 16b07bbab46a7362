"""lore-store-postgres behind a real gateway: traffic is stored, searchable and survives a
restart of the gateway; credentials never reach the database; a server that is down
degrades the store while traffic flows, with an error that names the DSN without its
password. Polls with generous deadlines, no wall-clock limit."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import psycopg
import pytest
from psycopg import sql

from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.net import get_json
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer

API_KEY = "sk-ant-api03-PgStoreKey-" + "Zx8Q" * 8
PASSWORD = "pg-Secret-" + "k3Y" * 6


def post(url: str, text: str, session: str) -> str:
    body = {"model": "claude-test", "max_tokens": 50, "messages": [{"role": "user", "content": text}]}
    headers = {"anthropic-version": "2023-06-01", "x-session-id": session, "x-api-key": API_KEY}
    resp = httpx.post(url + "/v1/messages", json=body, headers=headers, timeout=10)
    resp.raise_for_status()
    return resp.text


#: The DSN goes in LORE_DB_PATH (store.path): the test kit's API helpers read the config file
#: without plugin sections, so a "store-postgres" section there would stop them.
CONFIG = {"store": {"backend": "postgres", "flushIntervalMs": 50}}


def test_gateway_stores_searches_and_restarts_on_postgres(
    pg_dsn: str, start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    server = start_gateway(config=CONFIG, env={"LORE_DB_PATH": pg_dsn})
    health = get_json(server.url + "/health")
    assert health["store"]["backend"] == "postgres"
    fake_upstream.enqueue(Reply(text="the capybara answer"))
    assert "capybara" in post(server.url, "tell me about the capybara", "s-pg")
    fake_upstream.enqueue(Reply(text="noted"))
    post(server.url, f"my key is {API_KEY} oops", "s-pg")
    hits = poll(lambda: get_json(server.url + "/lore/api/search?q=capybara"), "the turn to be searchable")
    assert {h["session"] for h in hits} == {"s-pg"}
    masked = poll(lambda: get_json(server.url + "/lore/api/search?q=oops"), "the masked turn")
    assert "[REDACTED:anthropic-key]" in masked[0]["text"]
    server.stop()

    # Nothing of the key in any text the database holds.
    with psycopg.connect(pg_dsn) as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
        ]
        for table in tables:
            query = sql.SQL("SELECT coalesce(string_agg(t::text, ' '), '') FROM {} t").format(
                sql.Identifier(table)
            )
            dump = con.execute(query).fetchone()
            assert dump is not None and "Zx8QZx8Q" not in dump[0], table

    # Another gateway on the same database sees the session (a restart, or a second machine).
    again = start_gateway(config=CONFIG, env={"LORE_DB_PATH": pg_dsn})
    detail = get_json(again.url + "/lore/api/sessions/s-pg")
    assert detail["session"]["message_count"] == 4
    assert [h["session"] for h in get_json(again.url + "/lore/api/search?q=capybara")][:1] == ["s-pg"]


@pytest.mark.slow
def test_server_down_degrades_but_traffic_flows(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    dsn = f"postgresql://lore@127.0.0.1:{port}/lore?connect_timeout=1"
    server = start_gateway(config=CONFIG, env={"LORE_DB_PATH": dsn, "LORE_PG_PASSWORD": PASSWORD})
    fake_upstream.enqueue(Reply(text="still answered"))
    assert "still answered" in post(server.url, "is anyone there", "s-down")

    def degraded() -> dict[str, object] | None:
        store = get_json(server.url + "/health")["store"]
        return store if store["status"] == "degraded" else None

    store = poll(degraded, "the store to report the server down")
    error = str(store["error"])
    assert f"port={port}" in error and "cannot connect to PostgreSQL" in error
    assert PASSWORD not in str(get_json(server.url + "/health"))
