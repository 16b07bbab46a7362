"""The store's write-ahead journal: an exchange the client was answered survives the gateway
dying before its write (``kill -9``), and is stored exactly once after the restart.

The writer-level tests use the journal's files directly; the last one kills a real gateway
process (the DuckDB store) while every exchange still waits in the writer's queue."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import StoreConfig
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.journal import Journal, encode, read_segment
from lore_core.storage.records import WriteBatch
from lore_core.storage.writer import StoreWriter
from lore_core.testing.builders import answer, exchange, text
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply
from lore_core.testing.net import free_port, spawn_logged, wait_until_serving
from lore_core.testing.poll import poll

HOUR_MS = 3_600_000


def _batch(session: str, words: str) -> WriteBatch:
    return records_from_exchange(exchange([text("user", words)], answer(f"ack {words}"), session=session))


def test_frames_round_trip_and_a_torn_tail_is_ignored(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    assert journal.open() == []
    first, second = _batch("s", "one"), _batch("s", "two")
    journal.append(first)
    journal.append(second)
    journal.close(committed=False)
    segment = next((tmp_path / "j").glob("*.log"))
    # A crash in the middle of a write leaves a frame cut short.
    with segment.open("ab") as f:
        f.write(encode(_batch("s", "three"))[:-7])
    batches, torn = read_segment(segment)
    assert [b.messages[0].text for b in batches] == ["one", "two"]
    assert batches[0] == first and torn > 0
    # A frame whose bytes changed does not check out either: reading stops there.
    data = bytearray(segment.read_bytes())
    data[20] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert read_segment(segment)[0] == []


def test_what_orjson_refuses_is_journalled_too(tmp_path: Path) -> None:
    """A tool input may hold an integer past 64 bits or a lone surrogate (both valid JSON):
    the frame falls back to ``json`` and reads back equal."""
    journal = Journal(tmp_path / "j")
    journal.open()
    batch = _batch("s", "odd input")
    batch.messages[0].blocks.append({"type": "tool_call", "tool_input": {"n": 2**70, "s": "\ud800"}})
    plain = _batch("s", "plain")
    journal.append(batch)
    journal.append(plain)
    journal.close(committed=False)
    batches, torn = read_segment(next((tmp_path / "j").glob("*.log")))
    assert batches == [batch, plain] and torn == 0


def _writer(store: MemoryStore, directory: Path) -> StoreWriter:
    return StoreWriter(store, StoreConfig(flush_interval_ms=HOUR_MS), Journal(directory))


def test_what_a_dead_writer_held_is_replayed_once_and_the_journal_emptied(tmp_path: Path) -> None:
    directory = tmp_path / "journal"

    async def crash() -> None:
        writer = _writer(MemoryStore(), directory)
        await writer.start()
        for i in range(5):
            history = [text("user", f"question {j}") for j in range(i + 1)]
            writer.submit(exchange(history, answer(f"answer {i}"), session="s-crash"))
        # Killed: the hour-long batching pause never ended, nothing reached the store.
        assert writer.queued and writer.stats["batches"] == 0
        assert writer._task is not None and writer.journal is not None
        writer._task.cancel()
        # What the kernel does for a dead process: its files are closed, its lock released.
        writer.journal.close(committed=False)

    asyncio.run(crash())
    assert list(directory.glob("*.log"))

    async def restart(store: MemoryStore) -> list[str]:
        writer = _writer(store, directory)
        await writer.start()
        await writer.wait_idle(timeout=30)
        health = writer.health()
        await writer.stop()
        assert health["journal"]["replayed_batches"] == 5
        return [m.text for m in await store.session_messages("s-crash")]

    # The store already has part of it (committed just before the kill): exactly once all the same.
    store = MemoryStore()
    asyncio.run(store.write(_batch("s-crash", "question 0")))
    texts = asyncio.run(restart(store))
    assert sorted(texts) == sorted(
        [f"question {j}" for j in range(5)] + [f"answer {i}" for i in range(5)] + ["ack question 0"]
    )
    # A clean stop after everything was written leaves nothing to replay.
    assert list(directory.glob("*.log")) == []


def test_committed_segments_are_deleted_while_the_gateway_runs(tmp_path: Path) -> None:
    directory = tmp_path / "journal"

    async def go() -> list[list[int]]:
        store = MemoryStore()
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=10), Journal(directory))
        await writer.start()
        seen = []
        for i in range(3):
            writer.submit(exchange([text("user", f"turn {i}")], answer("ok"), session=f"s-{i}"))
            await writer.wait_idle(timeout=30)
            seen.append([p.stat().st_size for p in directory.glob("*.log")])
        await writer.stop()
        return seen

    for sizes in asyncio.run(go()):
        # The committed segments are gone (the next append starts a new one).
        assert sizes == []


def test_a_journal_that_cannot_be_written_degrades_health_and_loses_nothing_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the journal directory should be")

    async def go() -> tuple[dict[str, Any], list[str]]:
        store = MemoryStore()
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=10), Journal(blocker / "journal"))
        await writer.start()
        writer.submit(exchange([text("user", "still stored")], answer("yes"), session="s-nojournal"))
        await writer.wait_idle(timeout=30)
        health = writer.health()
        await writer.stop()
        return health, [m.text for m in await store.session_messages("s-nojournal")]

    health, texts = asyncio.run(go())
    assert health["status"] == "degraded" and "journal" in health["error"]
    assert texts == ["still stored", "yes"]


# A disk that fills up (here: a file size limit, so the test needs no special filesystem)
# in the middle of a frame, then has room again. Run in a child process: the limit applies
# to the whole process.
_FULL_DISK = """
import resource, sys
from pathlib import Path
from lore_core.storage.journal import Journal
from lore_core.storage.convert import records_from_exchange
from lore_core.testing.builders import answer, exchange, text

def batch(i):
    user = text("user", f"turn {i} " + "x" * 900)
    return records_from_exchange(exchange([user], answer("ok"), session="s"))

journal = Journal(Path(sys.argv[1]))
journal.open()
journal.append(batch(0))
room = journal.stats["segment_bytes"] + 100
resource.setrlimit(resource.RLIMIT_FSIZE, (room, resource.RLIM_INFINITY))
try:
    journal.append(batch(1))  # only part of the frame fits
except OSError as exc:
    print("failed:", exc.strerror)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
journal.append(batch(2))
journal.close(committed=False)
"""


def test_a_failed_append_leaves_no_torn_frame_behind(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(directory)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "failed: File too large" in done.stdout
    (segment,) = directory.glob("*.log")
    batches, torn = read_segment(segment)
    # The frame that did not fit is gone entirely; the one appended after it replays.
    assert [b.messages[0].text.split()[1] for b in batches] == ["0", "2"] and torn == 0


# -- a real gateway, killed ------------------------------------------------------------------


duckdb_store = pytest.importorskip("lore_store_duckdb.store")


def _stored_texts(db: Path) -> list[str]:
    async def main() -> list[str]:
        store = duckdb_store.DuckDBStore(db)
        await store.open()
        try:
            texts = []
            for session in await store.list_sessions(limit=1000):
                texts += [m.text for m in await store.session_messages(session.id)]
            return texts
        finally:
            await store.close()

    return asyncio.run(main())


@pytest.mark.slow
def test_sigkill_before_the_write_loses_no_answered_exchange(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    def respond(req: RecordedRequest) -> Reply:
        body = req.json or {}
        last = (body.get("messages") or [{}])[-1].get("content", "")
        return Reply(text=f"ack {last}", text_chunks=1)

    fake_upstream.responder = respond
    db = tmp_path / "store" / "lore.duckdb"
    port = free_port()
    config = tmp_path / "lore.json"
    # The longest batching pause: when the kill comes, every exchange still waits for its
    # write, and only the journal has it.
    config.write_text(
        json.dumps({"store": {"flushIntervalMs": 60_000}, "distill": {"idleTimeoutSeconds": 3600}})
    )
    env = {
        **os.environ,
        "LORE_CONFIG": str(config),
        "LORE_DB_PATH": str(db),
        "LORE_PORT": str(port),
        "LORE_UPSTREAM_ANTHROPIC": fake_upstream.url,
        "LORE_UPSTREAM_OPENAI": fake_upstream.url,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    url = f"http://127.0.0.1:{port}"

    def serve(name: str) -> subprocess.Popen[bytes]:
        log = tmp_path / name
        proc = spawn_logged([sys.executable, "-m", "lore_core.cli", "serve"], env, log)
        wait_until_serving(proc, url + "/health", log)
        return proc

    proc = serve("gateway-1.log")
    said = []
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            for i in range(6):
                words = f"journaled question {i}"
                said.append(words)
                body = {"model": "claude-test", "max_tokens": 20, "stream": i % 2 == 1}
                body["messages"] = [{"role": "user", "content": words}]
                headers = {"x-api-key": "k", "x-session-id": f"kill-{i}", "anthropic-version": "2023-06-01"}
                reply = client.post("/v1/messages", json=body, headers=headers)
                assert reply.status_code == 200 and f"ack {words}" in reply.text.replace('"', "")
            for i in range(2):  # Chat Completions, streamed
                words = f"journaled chat {i}"
                said.append(words)
                body = {"model": "gpt-test", "stream": True, "messages": [{"role": "user", "content": words}]}
                reply = client.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer k"})
                assert reply.status_code == 200 and "[DONE]" in reply.text
        journal = db.parent / "lore.duckdb.journal"
        assert sum(p.stat().st_size for p in journal.glob("*.log")) > 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    proc = serve("gateway-2.log")
    try:
        poll(lambda: "replaying" in (tmp_path / "gateway-2.log").read_text(), "the replay")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    texts = _stored_texts(db)
    for words in said:
        assert texts.count(words) == 1, words
        assert texts.count(f"ack {words}") == 1, words
    assert len(texts) == 2 * len(said)


def test_one_gateway_at_a_time_per_journal(tmp_path: Path) -> None:
    from lore_core.storage.journal import JournalError

    first = Journal(tmp_path / "j")
    first.open()
    with pytest.raises(JournalError, match="another gateway is using the journal"):
        Journal(tmp_path / "j").open()
    first.close(committed=True)
    second = Journal(tmp_path / "j")
    assert second.open() == []
    second.close(committed=True)
