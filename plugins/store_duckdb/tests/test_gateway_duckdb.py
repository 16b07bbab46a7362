"""lore-store-duckdb behind a real gateway: credentials never reach the files, a locked or
corrupted database degrades the store while traffic flows, and a gateway killed with SIGKILL
mid-load keeps every exchange that finished before a flush it reported.

No test asserts a wall-clock limit: a busy machine may make anything slow, so the tests
poll with generous deadlines and judge durability by the writer's own flush count."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from lore_store_duckdb.store import DuckDBStore

from lore_core.gateway import Gateway
from lore_core.testing.fake_upstream import FakeUpstream, Reply, ToolCall
from lore_core.testing.net import free_port, get_json, wait_for_http
from lore_core.testing.poll import DEADLINE_SECONDS, poll
from lore_core.testing.server import ThreadedServer

API_KEY = "sk-ant-api03-DuckStoreKey-" + "Pq7Z" * 8
BEARER = "duck-bearer-token-" + "m4W" * 10


def post(
    url: str, text: str, session: str, headers: dict[str, str] | None = None, stream: bool = False
) -> str:
    body = {
        "model": "claude-test",
        "max_tokens": 50,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    }
    hdrs = {"anthropic-version": "2023-06-01", "x-session-id": session, **(headers or {})}
    resp = httpx.post(url + "/v1/messages", json=body, headers=hdrs, timeout=10)
    resp.raise_for_status()
    return resp.text


def store_files(db: Path) -> list[Path]:
    return [p for p in db.parent.rglob("*") if p.is_file()]


def read_store(db: Path, body: Callable[[DuckDBStore], Any]) -> Any:
    async def main() -> Any:
        store = DuckDBStore(db)
        await store.open()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


def test_credentials_never_reach_the_store_files(
    lore_env: dict[str, str], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "db" / "lore.duckdb"
    # Our own server (not the fixture's): it is stopped here, so every file is closed.
    server = ThreadedServer(Gateway.load(env={**lore_env, "LORE_DB_PATH": str(db)}, cwd=tmp_path)).start()
    assert get_json(server.url + "/health")["store"]["backend"] == "duckdb"
    fake_upstream.enqueue(Reply(text="tool time", tool_calls=[ToolCall("Bash", {"command": "ls"})]))
    post(server.url, "first with key", "s-key", {"x-api-key": API_KEY})
    # Another session: a session belongs to the credentials that opened it.
    post(server.url, "second with bearer", "s-bearer", {"authorization": f"Bearer {BEARER}"}, stream=True)
    # A key pasted into content is masked in what is stored.
    post(server.url, f"my other key is {API_KEY} oops", "s-key", {"x-api-key": API_KEY})
    # The read API waits only briefly for the writer: poll, a busy machine may be slower.
    hits = poll(lambda: get_json(server.url + "/lore/api/search?q=oops"), "the message to be searchable")
    assert len(hits) == 1 and "[REDACTED:anthropic-key]" in hits[0]["text"]
    server.stop()

    files = store_files(db)
    assert db in files and any(".fts" in str(p) for p in files)
    for path in files:
        data = path.read_bytes()
        assert API_KEY.encode() not in data, path
        assert BEARER.encode() not in data, path
        assert b"Pq7ZPq7Z" not in data, path
    # ... while the conversation itself is there.
    messages = read_store(db, lambda s: s.stats())
    assert messages["messages"] == 6


def _hold_lock(db: Path) -> subprocess.Popen[str]:
    code = (
        "import duckdb, sys, time\n"
        f"con = duckdb.connect({str(db)!r})\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_locked_database_degrades_then_recovers_without_loss(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "locked.duckdb"
    holder = _hold_lock(db)
    try:
        server = start_gateway(env={"LORE_DB_PATH": str(db)}, config={"store": {"flushIntervalMs": 50}})
        for i in range(3):
            fake_upstream.enqueue(Reply(text=f"answer {i}"))
            assert f"answer {i}" in post(server.url, f"question {i}", "s-locked", {"x-api-key": API_KEY})
        health = get_json(server.url + "/health")
        assert health["status"] == "degraded"
        assert "locked by another process" in health["store"]["error"]
        assert str(db) in health["store"]["error"]
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(10)
    # The writer retries opening (with backoff up to 30 s); what was queued meanwhile is
    # written, nothing lost. Recovery is reported on open, the write follows: poll both.
    poll(lambda: get_json(server.url + "/health")["status"] == "ok", "the store to recover")

    def written() -> bool:
        health = get_json(server.url + "/health")
        return health["store"]["queued"] == 0 and health["store"]["messages_written"] >= 6

    poll(written, "the pending messages to be written")
    detail = get_json(server.url + "/lore/api/sessions/s-locked")
    assert detail["session"]["message_count"] == 6  # three one-turn branches of one session
    every = get_json(server.url + "/lore/api/sessions/s-locked?branches=all")["messages"]
    assert sorted(m["text"] for m in every) == sorted(
        [f"question {i}" for i in range(3)] + [f"answer {i}" for i in range(3)]
    )


def test_corrupted_database_degrades_but_traffic_flows(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "corrupt.duckdb"
    garbage = b"this is not a database\x00" * 4096
    db.write_bytes(garbage)
    server = start_gateway(env={"LORE_DB_PATH": str(db)})
    fake_upstream.enqueue(Reply(text="still answering"))
    assert "still answering" in post(server.url, "hello", "s-corrupt", {"x-api-key": API_KEY})
    health = get_json(server.url + "/health")
    assert health["status"] == "degraded"
    assert (
        "not a readable DuckDB database" in health["store"]["error"]
        or "cannot open" in health["store"]["error"]
    )
    assert any(line.startswith("store: ") for line in health["degraded"])
    # The read API says so in JSON rather than failing opaquely.
    with pytest.raises(urllib.error.HTTPError) as info:
        get_json(server.url + "/lore/api/sessions")
    assert info.value.code == 503
    server.stop()
    # Nothing is lost: the file is left as it was (for the user to recover), and what was
    # answered meanwhile waits in the journal. With the file moved aside, the next start
    # creates a new database and replays it.
    assert db.read_bytes() == garbage
    db.rename(tmp_path / "corrupt.duckdb.broken")
    restarted = start_gateway(env={"LORE_DB_PATH": str(db)})
    texts = poll(
        lambda: [m["text"] for m in get_json(restarted.url + "/lore/api/sessions/s-corrupt")["messages"]],
        "the journal to be replayed",
    )
    assert texts == ["hello", "still answering"]


@pytest.mark.slow
def test_sigkill_mid_load_keeps_every_durable_exchange(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    db = tmp_path / "crash" / "lore.duckdb"
    port = free_port()
    config = tmp_path / "lore.json"
    config.write_text(json.dumps({"store": {"flushIntervalMs": 250}}))
    env = {
        **os.environ,
        "LORE_CONFIG": str(config),
        "LORE_DB_PATH": str(db),
        "LORE_PORT": str(port),
        "LORE_UPSTREAM_ANTHROPIC": fake_upstream.url,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    log = (tmp_path / "gateway.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "lore_core.cli", "serve"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(url + "/health", timeout=60)
        completed: dict[int, float] = {}
        stop = threading.Event()

        def load(worker: int) -> None:
            i = worker
            while not stop.is_set():
                try:
                    post(
                        url,
                        f"crash probe {i} zanzibar",
                        f"crash-{i}",
                        {"x-api-key": API_KEY},
                        stream=i % 2 == 0,
                    )
                except httpx.HTTPError:
                    return  # the gateway is gone
                completed[i] = time.monotonic()
                i += 4

        workers = [threading.Thread(target=load, args=(w,)) for w in range(4)]
        for w in workers:
            w.start()
        # Enough load to judge on a slow or busy machine: at least 3 s and 60 exchanges.
        began = time.monotonic()
        while time.monotonic() - began < 3.0 or (
            len(completed) < 60 and time.monotonic() - began < DEADLINE_SECONDS
        ):
            time.sleep(0.1)
        # Every exchange finished by now was queued before its response ended. The flush
        # running now may have collected its batch earlier, but the one after it collects
        # later: once the writer reports two more batches written, all of them are durable.
        # (Judged by the writer's own count, not by a delay that a busy machine could exceed.)
        durable = sorted(completed.copy())  # copy: the load threads keep adding
        batches = get_json(url + "/health")["store"]["batches"]
        poll(lambda: get_json(url + "/health")["store"]["batches"] >= batches + 2, "two more flushes")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        stop.set()
        for w in workers:
            w.join(15)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()

    assert len(durable) > 20, f"too little load to judge: {len(completed)} exchanges"

    async def check(store: DuckDBStore) -> tuple[list[int], int]:
        missing = []
        for i in durable:
            messages = await store.session_messages(f"crash-{i}")
            texts = [m.text for m in messages]
            if f"crash probe {i} zanzibar" not in texts or len(messages) != 2:
                missing.append(i)
        hits = await store.search("zanzibar", limit=100_000)
        return missing, len(hits)

    missing, hits = read_store(db, check)
    assert missing == [], f"{len(missing)} of {len(durable)} durable exchanges lost"
    assert hits >= len(durable)  # the index caught up from DuckDB after the crash


@pytest.mark.slow
def test_a_full_disk_degrades_then_everything_is_written_once(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The disk fills up under a running gateway (a file size limit set on its process, so
    no special filesystem is needed: every write past the files' current sizes fails), then
    has room again. Clients are answered throughout, /health says why the store is degraded,
    and once writes work again every exchange is in the store exactly once."""
    db = tmp_path / "full" / "lore.duckdb"
    port = free_port()
    config = tmp_path / "lore.json"
    config.write_text(json.dumps({"store": {"flushIntervalMs": 50}}))
    env = {
        **os.environ,
        "LORE_CONFIG": str(config),
        "LORE_DB_PATH": str(db),
        "LORE_PORT": str(port),
        "LORE_UPSTREAM_ANTHROPIC": fake_upstream.url,
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    log = (tmp_path / "gateway.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "lore_core.cli", "serve"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"

    def health() -> dict[str, Any]:
        return httpx.get(url + "/health", timeout=10).json()["store"]

    def ask(i: int) -> None:
        # Long enough that each write grows the files past any limit set between writes.
        post(url, f"disk probe {i} " + "words to store " * 200, f"disk-{i}", stream=i % 2 == 1)

    try:
        wait_for_http(url + "/health", timeout=60)
        for i in range(4):
            ask(i)
        poll(lambda: health()["messages_written"] == 8 and health()["queued"] == 0, "the first writes")
        # The files writes append to (the WAL, the journal, the indexes): the database file
        # itself was checkpointed at the migrations and may be larger than any of them.
        largest = max(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file() and p != db)
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (largest, resource.RLIM_INFINITY))
        for i in range(4, 24):
            ask(i)  # raises unless answered in full
        degraded = poll(lambda: (h := health())["status"] == "degraded" and h, "the store to degrade")
        assert "File too large" in degraded["error"]
        # What could not be written waits in memory (and was answered all the same).
        assert degraded["queued"] > 0 and degraded["messages_written"] + degraded["queued"] == 48
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        poll(lambda: health()["messages_written"] == 48 and health()["queued"] == 0, "the queued writes")
        ask(24)  # the journal is written again too
        poll(lambda: health()["status"] == "ok", "the store to report it works again")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()

    async def check(store: DuckDBStore) -> dict[int, list[str]]:
        return {i: [m.text for m in await store.session_messages(f"disk-{i}")] for i in range(25)}

    for i, texts in read_store(db, check).items():
        assert len(texts) == 2 and texts[0].startswith(f"disk probe {i} "), (i, texts)
